package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/failnote"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

type trainFlags struct {
	config, run, weights, poolReport string
	rounds, groups, attempts         int
	vars                             []string
	replace, detach                  bool
	poolAnyWeights                   bool // use a --pool-report of other weights
	heartbeat                        time.Duration
	stopFile                         string
	priority                         int
	// set says which flags the user gave: a resumed run keeps its own
	// rounds, groups and attempts unless told otherwise.
	set map[string]bool
}

func trainCmd(e *connect.Endpoints) *cobra.Command {
	var f trainFlags
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Run RL rounds: validate, select the pool, collect, compute advantages, train",
		Long: `Run RL rounds: validate, select the pool, collect, compute advantages, train.

With the name of a run that is running, follows it. With a run that failed
or was stopped, resumes it where it stopped (completed episodes, reports and
weights are kept) with the same starting weights.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.set = map[string]bool{}
			cmd.Flags().Visit(func(fl *pflag.Flag) { f.set[fl.Name] = true })
			return train(cmd.Context(), cmd.OutOrStdout(), e, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "harness file, e.g. harnesses/minimal/harness.yaml")
	fl.StringVar(&f.run, "run", "", "run name; its data lives under runs/<run>/ in the bucket")
	fl.StringVar(&f.weights, "weights", "", "initial weights: a local directory (or the harness's weights file), or s3://bucket/prefix/ of published weights, e.g. another run's weights/r3/")
	fl.StringVar(&f.poolReport, "pool-report", "", "validation report.json, a local file or s3://bucket/key, choosing round 1's pool (skips the first validation)")
	fl.BoolVar(&f.poolAnyWeights, "pool-report-any-weights", false, "accept a --pool-report of other weights than --weights, or one without digests")
	fl.IntVar(&f.rounds, "rounds", 6, "rounds to run")
	fl.IntVar(&f.groups, "groups", 0, "groups per round (default: the harness's collect.groups)")
	fl.IntVar(&f.attempts, "attempts", 0, "attempts per group (default: the harness's collect.attempts)")
	fl.StringArrayVar(&f.vars, "var", nil, "override a harness var: --var name=value (repeatable)")
	fl.BoolVar(&f.replace, "replace", false, "delete an earlier finished run of the same name before starting")
	fl.BoolVar(&f.detach, "detach", false, "start the run and return without following it")
	fl.DurationVar(&f.heartbeat, "heartbeat-timeout", 30*time.Second, "how long a silent rollout worker keeps an episode before it is retried elsewhere")
	priorityFlag(fl, &f.priority, fleet.TrainPriority, "its episodes")
	fl.StringVar(&f.stopFile, "stop-file", "", "while following, a file whose creation asks for a controlled stop (default runs/<run>/STOP under the current directory)")
	return cmd
}

func train(ctx context.Context, out io.Writer, e *connect.Endpoints, f trainFlags) error {
	// Check every input before touching anything, so a bad one starts nothing.
	if f.config == "" {
		return errors.New("--config is required: pass the harness file, e.g. --config harnesses/minimal/harness.yaml")
	}
	if !runName.MatchString(f.run) {
		return fmt.Errorf("--run %q: give a run name of letters, digits, '.', '_' or '-'", f.run)
	}
	if f.rounds < 1 {
		return fmt.Errorf("--rounds %d: need at least 1", f.rounds)
	}
	if err := checkPriority(f.priority); err != nil {
		return err
	}
	vars, err := harness.ParseVars(f.vars)
	if err != nil {
		return err
	}
	h, err := harness.Load(f.config, vars)
	if err != nil {
		return err
	}
	t := runs.Train{Run: f.run, Config: f.config, Harness: h, Weights: f.weights, PoolReport: f.poolReport, PoolAnyWeights: f.poolAnyWeights,
		Rounds: int32(f.rounds), Groups: f.groups, Attempts: f.attempts, Heartbeat: f.heartbeat, Replace: f.replace, Given: f.set}
	if err := t.Check(); err != nil {
		return err
	}
	if f.stopFile == "" {
		f.stopFile = filepath.Join("runs", f.run, "STOP")
	}
	c, s, err := connectBoth(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := t.CheckPool(ctx, s); err != nil {
		return err
	}
	id := api.WorkflowID(f.run)
	running, err := api.IsRunning(ctx, c, id)
	if err != nil {
		return err
	}
	if running {
		fmt.Fprintf(out, "run %s is already running; following it\n", f.run)
		return follow(ctx, out, c, s, e, id, f.run, f.detach, f.stopFile)
	}
	if err := api.RegisterSearchAttributes(ctx, c, e.Namespace); err != nil {
		return err
	}
	p, err := runs.PrepareTrain(ctx, s, &t)
	if p.Replaced {
		fmt.Fprintf(out, "deleted %d objects of the earlier run %s\n", p.Deleted, f.run)
	}
	if p.OldDigest != "" {
		fmt.Fprintf(out, "harness changed since the run started (digest %s → %s); resuming with %s\n", p.OldDigest, h.Digest, f.config)
	}
	if p.Resumed {
		fmt.Fprintf(out, "resuming run %s at round %d/%d from weights %s (%d rounds done)\n", f.run, p.Round, p.Rounds, p.Weights, p.RoundsDone)
	}
	if err != nil {
		return err
	}
	in := api.TrainInput{Run: f.run, Harness: h, InitialWeightsID: p.InitialWeights, WeightsID: p.Weights, Rounds: p.Rounds, Groups: p.Groups,
		Attempts: p.Attempts, PoolReport: p.PoolReport, Round: p.Round, Summaries: p.Summaries, HeartbeatTimeout: p.Heartbeat, Priority: f.priority}
	if _, err := api.StartTrain(ctx, c, in); err != nil {
		return fmt.Errorf("start workflow %s on %s: %w", id, e.Temporal, err)
	}
	if !p.Resumed {
		fmt.Fprintf(out, "started run %s: harness %s (digest %s), weights %s, %d rounds of %d groups × %d attempts\n",
			f.run, h.Name, h.Digest, f.weights, in.Rounds, in.Groups, in.Attempts)
	}
	return follow(ctx, out, c, s, e, id, f.run, f.detach, f.stopFile)
}

func uiURL(e *connect.Endpoints, id string) string {
	ui := os.Getenv("ROUNDHOUSE_UI")
	if ui == "" {
		ui = "http://127.0.0.1:8233"
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimRight(ui, "/"), e.Namespace, id)
}

// follow prints progress until the run ends, then the per-round table.
// A STOP file (the upstream controller's habit) asks for a controlled stop.
func follow(ctx context.Context, out io.Writer, c client.Client, s *store.Store, e *connect.Endpoints, id, run string, detach bool, stopFile string) error {
	fmt.Fprintf(out, "Temporal UI: %s\nS3 prefix:   s3://%s/%s\n", uiURL(e, id), s.Bucket, schemas.Layout{Run: run}.Prefix())
	if detach {
		return nil
	}
	if stopFile != "" {
		fmt.Fprintf(out, "controlled stop: starter stop --run %s, or touch %s\n", run, stopFile)
	}
	var res api.TrainResult
	err := followUntil(ctx, out, c, id, func(ctx context.Context) error { return c.GetWorkflow(ctx, id, "").Get(ctx, &res) }, func() string {
		if stopFile != "" {
			if _, err := os.Stat(stopFile); err == nil {
				if err := requestStop(ctx, c, run, "STOP file "+stopFile); err != nil {
					fmt.Fprintf(out, "STOP file seen, but the stop request failed: %v\n", err)
				} else {
					fmt.Fprintf(out, "STOP file %s seen: stop requested (running episodes finish)\n", stopFile)
					os.Remove(stopFile)
				}
			}
		}
		p, err := api.QueryProgress(ctx, c, run)
		if err != nil {
			return "" // between runs of a continue-as-new chain the query may miss
		}
		e := p.Episodes
		line := fmt.Sprintf("round %d/%d  %-10s %d/%d episodes, %d successes", p.Round, p.Rounds, p.Phase, e.Done, e.Total, e.Successes)
		if p.Stopping {
			line += " (stopping)"
		}
		return line
	})
	if err != nil {
		return fmt.Errorf("run %s failed: %w (details in the Temporal UI; fix the cause, then `starter train --run %s` resumes it)", run, err, run)
	}
	printResult(out, s.Bucket, run, res)
	return nil
}

// printResult prints how a run ended: the rounds' table, then the stop,
// or the final validation (with its interval, and a loud line when too
// many of its episodes did not count) and the final weights.
func printResult(out io.Writer, bucket, run string, res api.TrainResult) {
	fmt.Fprintln(out)
	printSummaries(out, res.Summaries)
	if res.Stopped {
		fmt.Fprintf(out, "run %s stopped in round %d; `starter train --run %s --config …` resumes it\n", run, res.StoppedRound, run)
		return
	}
	switch v := res.FinalVal; {
	case v != nil:
		fmt.Fprintf(out, "final validation success (weights %s): %d/%d %s over valid, %s over attempted\n", res.FinalWeightsID,
			v.Successes, v.Valid, stats.Rate(v.Successes, v.Valid), stats.Rate(v.Successes, v.Attempted()))
		if w := finalValWarning(*v, lastLimit(res.Summaries)); w != "" {
			fmt.Fprintln(out, w)
		}
	case res.FinalValSuccess >= 0: // a result from before counts were kept
		fmt.Fprintf(out, "final validation success (weights %s): %.1f%%\n", res.FinalWeightsID, 100*res.FinalValSuccess)
	}
	fmt.Fprintf(out, "final weights: s3://%s/%s\n", bucket, schemas.Layout{Run: run}.Weights(res.FinalWeightsID))
}

// followUntil prints progress lines — line() every 2 s, when it changed and is
// not empty — until wait returns, and returns its error. Each failed attempt
// of an activity of workflow id (or of its running children) that Temporal
// is still retrying is printed once, as soon as the server has it, with
// its cause and when it is retried.
func followUntil(ctx context.Context, out io.Writer, c client.Client, id string, wait func(context.Context) error, line func() string) error {
	done := make(chan error, 1)
	go func() { done <- wait(ctx) }()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	last := ""
	var fails failnote.Printer
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if l := line(); l != "" && l != last {
				fmt.Fprintln(out, l)
				last = l
			}
			// Describe may miss between runs of a continue-as-new chain;
			// the next tick asks again.
			if fs, err := failnote.Pending(ctx, c, id); err == nil {
				fails.Print(out, fs, time.Now())
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// printSummaries is the per-round table of `starter status --run` and
// `starter report`: success over valid and over attempted episodes, with
// 95 % intervals, and a loud line for each round over its invalid limit.
func printSummaries(out io.Writer, ss []schemas.RoundSummary) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tval success [95% CI]\tcollection success / valid\tsuccess / attempted\tinvalid + lost\tgroups w/ signal\tsamples\tweights in\tnew weights\t")
	for _, r := range ss {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%d/%d\t%d\t%s\t%s\t\n", r.Round, report.ValRate(r), stats.Rate(r.Successes, r.Valid),
			stats.Rate(r.Successes, r.Attempted()), r.Attempted()-r.Valid, r.Attempted(), r.GroupsWithSignal, r.Groups, r.Samples, r.WeightsID, r.NewWeightsID)
	}
	tw.Flush()
	for _, r := range ss {
		if w := report.RoundWarning(r); w != "" {
			fmt.Fprintf(out, "!! %s\n", w)
		}
	}
}
