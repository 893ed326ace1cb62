package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/internal/term"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

type statusFlags struct {
	run      string
	limit    int
	watch    bool
	interval time.Duration
}

func statusCmd(e *connect.Endpoints) *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List runs and evaluations, or show one run's training and evaluations",
		Long: `List the training runs and evaluations, newest first: kind (train, eval, or
sweep-eval for a sweep's), tag, status, round, phase, the current phase's
episodes, success so far, latest validation success (an evaluation's: its
report's), weights and last error. With --run, one run: its training run
in detail (running episode chunks, per-round table), then its evaluations. Everything comes from Temporal (the progress query of
running runs, search attributes and results of finished ones), nothing from S3.
--watch redraws until Ctrl-C, or with --run until the run ends.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return status(cmd.Context(), cmd.OutOrStdout(), e, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.run, "run", "", "show this run in detail")
	fl.IntVar(&f.limit, "limit", 20, "list at most this many runs")
	fl.BoolVar(&f.watch, "watch", false, "redraw until Ctrl-C (with --run: until the run ends)")
	fl.DurationVar(&f.interval, "interval", 2*time.Second, "how often --watch redraws")
	return cmd
}

func status(ctx context.Context, out io.Writer, e *connect.Endpoints, f statusFlags) error {
	if f.run != "" && !runName.MatchString(f.run) {
		return fmt.Errorf("--run %q: give the name of a run (see `starter status`)", f.run)
	}
	if f.limit < 1 || f.limit > 1000 {
		return fmt.Errorf("--limit %d: give a number from 1 to 1000", f.limit)
	}
	if f.watch && f.interval < 100*time.Millisecond {
		return fmt.Errorf("--interval %s: give at least 100ms, e.g. --interval 2s", f.interval)
	}
	dc, err := e.DataConverter()
	if err != nil {
		return err
	}
	c, err := connect.Temporal(ctx, *e, quietLogger())
	if err != nil {
		return err
	}
	defer c.Close()
	draw := func(ctx context.Context) (string, bool, error) {
		var b bytes.Buffer
		if f.run != "" {
			views, err := api.DescribeRunAll(ctx, c, e.Namespace, dc, f.run)
			if err != nil {
				return "", false, err
			}
			done := renderRun(&b, views)
			if err := fleetPart(ctx, &b, c, f.run); err != nil {
				return "", false, err
			}
			return b.String(), done, nil
		}
		views, err := api.ListRuns(ctx, c, e.Namespace, dc, f.limit)
		if err != nil {
			return "", false, err
		}
		renderList(&b, views)
		if err := fleetPart(ctx, &b, c, ""); err != nil {
			return "", false, err
		}
		return b.String(), false, nil
	}
	if !f.watch {
		text, _, err := draw(ctx)
		if err != nil {
			return err
		}
		_, err = io.WriteString(out, text)
		return err
	}
	// Ctrl-C ends the watch as a normal exit, not an error.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	return term.Watch(ctx, out, term.IsTerminal(out), f.interval, draw)
}

// renderList is the table of training runs and evaluations, one row
// each (one per shard of a sharded evaluation).
func renderList(out io.Writer, views []api.RunView) {
	if len(views) == 0 {
		fmt.Fprintln(out, "no runs yet: start one with `starter train --config <harness.yaml> --run <name> --weights <dir>`")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tKIND\tTAG\tSTATUS\tROUND\tPHASE\tEPISODES\tSUCCESS\tVALIDATION\tWEIGHTS\tLAST ERROR")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Run, v.Kind, tagOf(v), v.Status, roundOf(v), dash(v.Phase),
			episodesOf(v), successOf(v), valOf(v), dash(v.WeightsID), dash(term.OneLine(v.Err, 60)))
	}
	tw.Flush()
}

// renderRun is everything of one run: its training run in detail, then
// its evaluations as a table. It says whether all of them have ended.
func renderRun(out io.Writer, views []api.RunView) bool {
	done := true
	var evals []api.RunView
	for _, v := range views {
		done = done && !v.Running()
		if v.Kind == api.KindTrain {
			renderDetail(out, v)
		} else {
			evals = append(evals, v)
		}
	}
	if len(evals) > 0 {
		if len(evals) < len(views) {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "evaluations of run %s:\n", evals[0].Run)
		renderList(out, evals)
	}
	return done
}

// tagOf is an evaluation's tag, with its shard when it is one.
func tagOf(v api.RunView) string {
	if v.Shards > 1 {
		return fmt.Sprintf("%s %d/%d", v.Tag, v.Shard, v.Shards)
	}
	return dash(v.Tag)
}

// renderDetail is one run: its state, the current phase, the running
// chunks, and the per-round table.
func renderDetail(out io.Writer, v api.RunView) {
	fmt.Fprintf(out, "run %s: %s, round %s, phase %s, weights %s\n", v.Run, v.Status, roundOf(v), dash(v.Phase), dash(v.WeightsID))
	if v.Live {
		e := v.Episodes
		fmt.Fprintf(out, "episodes:   %s  valid %d, successes %s, lost %d, skipped %d\n", bar(e.Done, e.Total), e.Valid, successOf(v), e.Lost, e.Skipped)
	}
	fmt.Fprintf(out, "validation: %s\n", valOf(v))
	if v.Err != "" {
		fmt.Fprintf(out, "last error: %s\n", term.OneLine(v.Err, 400))
	}
	if len(v.Children) > 0 {
		fmt.Fprintf(out, "running episode chunks: %s\n", strings.Join(v.Children, ", "))
	}
	if len(v.Summaries) > 0 {
		fmt.Fprintln(out)
		report.WriteRounds(out, v.Summaries)
	}
}

func roundOf(v api.RunView) string {
	switch {
	case v.Round == 0:
		return "-"
	case v.Rounds == 0:
		return fmt.Sprintf("%d/?", v.Round)
	}
	return fmt.Sprintf("%d/%d", v.Round, v.Rounds)
}

func episodesOf(v api.RunView) string {
	if !v.Live {
		return "-"
	}
	return bar(v.Episodes.Done, v.Episodes.Total)
}

// successOf is the current phase's success so far: over valid episodes
// with its 95 % interval, then over the episodes done (invalid and lost
// included), so invalid episodes cannot hide behind the rate.
func successOf(v api.RunView) string {
	e := v.Episodes
	if !v.Live || e.Done == 0 {
		return "-"
	}
	if e.Valid == 0 {
		return fmt.Sprintf("0/0 · 0/%d done", e.Done)
	}
	return fmt.Sprintf("%d/%d (%s) · %d/%d done", e.Successes, e.Valid, stats.Rate(e.Successes, e.Valid), e.Successes, e.Done)
}

// valOf is the latest validation's success with its 95 % interval when
// its counts are known (a search attribute carries the bare rate only).
func valOf(v api.RunView) string {
	if v.Val < 0 {
		return "-"
	}
	s := fmt.Sprintf("%.1f%%", 100*v.Val)
	if c := v.ValCounts; c != nil && c.Valid > 0 {
		s = fmt.Sprintf("%d/%d %s", c.Successes, c.Valid, stats.Rate(c.Successes, c.Valid))
	}
	switch {
	case v.Kind != api.KindTrain && v.Status == "stopped":
		s += " (incomplete)"
	case v.Kind != api.KindTrain:
		s += " (report)"
	case v.FinalVal:
		s += " (final)"
	}
	return s
}

// bar draws done/total as " 30% [=====>              ] (3/10)" with
// schollz/progressbar, which renders to a string as well as to a terminal,
// so one bar per row fits the redrawn table; ASCII keeps tabwriter's
// column widths right.
func bar(done, total int) string {
	if total <= 0 {
		return "-"
	}
	b := progressbar.NewOptions(total, progressbar.OptionSetWriter(io.Discard), progressbar.OptionSetWidth(20),
		progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(false), progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionSetTheme(progressbar.Theme{Saucer: "=", SaucerHead: ">", SaucerPadding: " ", BarStart: "[", BarEnd: "]"}))
	_ = b.Set(min(max(done, 0), total))
	return strings.TrimRight(strings.TrimLeft(b.String(), "\r"), " ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fleetPart adds the rollout fleet, if one runs, to a status frame.
func fleetPart(ctx context.Context, w io.Writer, c client.Client, run string) error {
	st, ok, err := api.QueryFleet(ctx, c)
	if err != nil || !ok {
		return err
	}
	renderFleet(w, st, run, time.Now())
	return nil
}

// renderFleet writes the rollout fleet's part of `starter status`: per
// host what it serves and what its model servers did (for one run when
// run is set), then the weights episodes wait for.
func renderFleet(w io.Writer, st api.FleetStatus, run string, now time.Time) {
	s := st.State
	names := slices.Sorted(maps.Keys(s.Hosts))
	if run == "" {
		fmt.Fprintf(w, "\nrollout fleet: %d hosts\n", len(names))
	} else {
		fmt.Fprintf(w, "\non the rollout fleet (model servers for run %s):\n", run)
	}
	if len(names) > 0 {
		fmt.Fprintf(w, "  %-16s %-28s %-34s %6s %9s %9s %9s %7s %8s\n", "HOST", "ASSIGNED", "LOADED (BUSY)", "LOADS", "FETCHING", "PAUSED", "IDLE", "WAITED", "WAITING")
	}
	for _, n := range names {
		h := s.Hosts[n]
		var loaded []string
		for _, sv := range h.Loaded {
			loaded = append(loaded, fmt.Sprintf("%s (%d)", sv.Weights, sv.Busy))
		}
		var sum schemas.SlotStats
		for _, x := range st.Stats[n] {
			if run != "" && x.Run != run {
				continue
			}
			sum.Add(x)
		}
		loads := fmt.Sprint(sum.Loads)
		if sum.Failed > 0 {
			loads += fmt.Sprintf("+%d✗", sum.Failed)
		}
		// A load is the weights' transfer, then the serving pause (a start,
		// or an in-place reload) until the server answers again.
		fmt.Fprintf(w, "  %-16s %-28s %-34s %6s %9s %9s %9s %7d %8d\n", n, dash(strings.Join(s.Assign[n], ", ")), dash(strings.Join(loaded, ", ")),
			loads, sum.FetchTime.Round(100*time.Millisecond), sum.Paused().Round(100*time.Millisecond), sum.Idle.Round(time.Second), sum.Waits, sum.Waiting)
	}
	by := s.ServedBy()
	ws := s.ByWeights(run)
	if len(ws) == 0 {
		fmt.Fprintln(w, "  no episodes waiting for weights")
		return
	}
	// One line per weights: its episode sets (chunks of 500) summed.
	fmt.Fprintf(w, "  %-32s %-10s %13s %-20s %s\n", "WEIGHTS", "PRIORITY", "LEFT/EPISODES", "SERVED BY", "UNSERVED FOR")
	for _, d := range ws {
		wait := "—"
		if at, ok := s.Waiting[d.Weights]; ok {
			wait = now.Sub(at).Round(time.Second).String()
		}
		note := ""
		switch {
		case s.Boost[d.Weights]:
			note = fmt.Sprintf("boosted: waited %s", fleet.DefaultPolicy.MaxWait)
		case !s.Parked[d.Weights].IsZero():
			note = "parked: nothing queued"
		}
		fmt.Fprintf(w, "  %-32s %-10d %13s %-20s %s %s\n", d.Weights, d.Priority, fmt.Sprintf("%d/%d", d.Left, d.Episodes), dash(strings.Join(by[d.Weights], ", ")), wait, note)
	}
}
