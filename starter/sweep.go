package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

func sweepCmd(e *connect.Endpoints) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Scheduled validation sweeps: evaluate new weights on a schedule and keep a leaderboard",
		Long: `Scheduled validation sweeps: a Temporal Schedule that finds weights not
evaluated yet (those of a run, or under an s3 prefix), evaluates each and
updates sweeps/<name>/leaderboard.json and leaderboard.md in the bucket.
A sweep that is due while the last one still runs is skipped, not stacked.`,
	}
	cmd.AddCommand(sweepCreateCmd(e), sweepListCmd(e), sweepShowCmd(e), sweepTriggerCmd(e),
		sweepActionCmd(e, "pause", "Pause a sweep's schedule (a running sweep finishes)"),
		sweepActionCmd(e, "unpause", "Resume a paused sweep's schedule"),
		sweepActionCmd(e, "delete", "Delete a sweep's schedule; its leaderboard and reports stay in S3"))
	return cmd
}

type sweepFlags struct {
	name, every, cron, config, run, prefix, initKey string
	vars                                            []string
	parallel                                        int
	priority                                        int
}

func sweepCreateCmd(e *connect.Endpoints) *cobra.Command {
	var f sweepFlags
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sweep: --name N (--every 6h | --cron \"0 3 * * *\") --config FILE (--run R | --weights-prefix s3://…)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return sweepCreate(cmd.Context(), cmd.OutOrStdout(), e, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "sweep name; its schedule is sweep-<name>, its leaderboard sweeps/<name>/")
	fl.StringVar(&f.every, "every", "", "sweep at this interval, e.g. 6h or 90m")
	fl.StringVar(&f.cron, "cron", "", `sweep at the times of a 5-field cron expression (UTC unless prefixed CRON_TZ=Zone), e.g. "0 3 * * *"`)
	fl.StringVar(&f.config, "config", "", "harness file the evaluations run, e.g. harnesses/minimal/harness.yaml")
	fl.StringVar(&f.run, "run", "", "evaluate the weights of this run (runs/<run>/weights/<id>/), in that run")
	fl.StringVar(&f.prefix, "weights-prefix", "", "evaluate the weights ids under s3://bucket/prefix/ (each <id>/ with a manifest.json), imported into run sweep-<name>")
	fl.StringVar(&f.initKey, "init-key", "val_init_ids", "split to evaluate on: val_init_ids or eval_init_ids")
	fl.StringArrayVar(&f.vars, "var", nil, "override a harness var: --var name=value (repeatable)")
	fl.IntVar(&f.parallel, "parallel", 1, "evaluations at once within one sweep")
	priorityFlag(fl, &f.priority, fleet.EvalPriority, "its evaluations' episodes")
	return cmd
}

func sweepCreate(ctx context.Context, out io.Writer, e *connect.Endpoints, f sweepFlags) error {
	// Every input is checked before a server is contacted, so a bad
	// command changes nothing.
	if err := runs.CheckSweepName(f.name); err != nil {
		return err
	}
	spec, when, err := api.SweepSpec(f.every, f.cron)
	if err != nil {
		return err
	}
	w := runs.Sweep{Name: f.name, Run: f.run, Prefix: f.prefix, InitKey: f.initKey, Parallel: f.parallel, Priority: f.priority, Config: f.config, Vars: f.vars}
	if err := w.Check(e.S3.Bucket); err != nil {
		return err
	}
	c, s, err := connectBoth(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()
	id := api.SweepScheduleID(f.name)
	exists := fmt.Errorf("sweep %s exists (schedule %s): choose another --name, or delete it first with `starter sweep delete --name %s`", f.name, id, f.name)
	if _, err := api.DescribeSweep(ctx, c, f.name); err == nil {
		return exists
	} else if !errors.Is(err, api.ErrNoSweep) {
		return err
	}
	if err := runs.PrepareSweep(ctx, s, w); err != nil {
		return err
	}
	if err := api.RegisterSearchAttributes(ctx, c, e.Namespace); err != nil {
		return err
	}
	in := api.SweepInput{Name: f.name, Source: w.Source, Run: w.Run, Harness: w.Harness, InitKey: f.initKey, Parallel: f.parallel, Priority: f.priority}
	if _, err := api.CreateSweep(ctx, c, in, spec, when); errors.Is(err, api.ErrSweepExists) {
		return exists
	} else if err != nil {
		return fmt.Errorf("create schedule %s on %s: %w", id, e.Temporal, err)
	}
	fmt.Fprintf(out, "created sweep %s (schedule %s): %s, weights of %s evaluated in run %s on %s\n", f.name, id, when, w.Source, w.Run, f.initKey)
	if d, err := api.DescribeSweep(ctx, c, f.name); err == nil && len(d.Info.NextActionTimes) > 0 {
		fmt.Fprintf(out, "next sweep: %s\n", d.Info.NextActionTimes[0].UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(out, "leaderboard: s3://%s/%s (starter sweep show --name %s)\n", s.Bucket, schemas.SweepLeaderboard(f.name), f.name)
	return nil
}

// sweepClient checks a sweep's name and connects to Temporal.
func sweepClient(ctx context.Context, e *connect.Endpoints, name string) (client.Client, error) {
	if err := runs.CheckSweepName(name); err != nil {
		return nil, err
	}
	return connect.Temporal(ctx, *e, quietLogger())
}

// sweepError says so when there is no sweep of that name.
func sweepError(name string, err error) error {
	if errors.Is(err, api.ErrNoSweep) {
		return fmt.Errorf("no sweep named %s (no schedule %s): `starter sweep list` shows the sweeps", name, api.SweepScheduleID(name))
	}
	return err
}

// sweepActionCmd is pause, unpause or delete.
func sweepActionCmd(e *connect.Endpoints, verb, short string) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   verb,
		Short: short,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := sweepClient(cmd.Context(), e, name)
			if err != nil {
				return err
			}
			defer c.Close()
			change, done := api.PauseSweep, fmt.Sprintf("sweep %s paused; `starter sweep unpause --name %s` resumes it", name, name)
			switch verb {
			case "unpause":
				change, done = api.UnpauseSweep, fmt.Sprintf("sweep %s resumed", name)
			case "delete":
				change, done = api.DeleteSweep, fmt.Sprintf("sweep %s deleted; a sweep still running finishes; its leaderboard stays at s3://%s/%s", name, e.S3.Bucket, schemas.SweepLeaderboard(name))
			}
			if err := change(cmd.Context(), c, name); errors.Is(err, api.ErrNoSweep) {
				return sweepError(name, err)
			} else if err != nil {
				return fmt.Errorf("%s sweep %s: %w", verb, name, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), done)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "sweep name")
	return cmd
}

func sweepTriggerCmd(e *connect.Endpoints) *cobra.Command {
	var name string
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "trigger",
		Short: "Start a sweep now (skipped if one is running); --wait follows it and prints the leaderboard",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return sweepTrigger(cmd.Context(), cmd.OutOrStdout(), e, name, wait, timeout)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "sweep name")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the sweep ends, then print its leaderboard")
	cmd.Flags().DurationVar(&timeout, "wait-timeout", 6*time.Hour, "how long --wait waits")
	return cmd
}

func sweepTrigger(ctx context.Context, out io.Writer, e *connect.Endpoints, name string, wait bool, timeout time.Duration) error {
	c, err := sweepClient(ctx, e, name)
	if err != nil {
		return err
	}
	defer c.Close()
	started, err := api.TriggerSweep(ctx, c, name)
	if err != nil {
		return sweepError(name, err)
	}
	if started == nil {
		fmt.Fprintf(out, "sweep %s is running already; this trigger was skipped (overlapping sweeps are skipped, not stacked)\n", name)
		return nil
	}
	fmt.Fprintf(out, "sweep %s started: workflow %s\n", name, started.WorkflowID)
	if !wait {
		return nil
	}
	wctx, wcancel := context.WithTimeout(ctx, timeout)
	defer wcancel()
	res, err := api.FollowSweep(wctx, out, c, started)
	if err != nil {
		return fmt.Errorf("sweep %s (workflow %s, details in the Temporal UI): %w", name, started.WorkflowID, err)
	}
	ids := ""
	if len(res.Evaluated) > 0 {
		ids = " (" + strings.Join(res.Evaluated, ", ") + ")"
	}
	fmt.Fprintf(out, "evaluated %d weights%s, %d already on the leaderboard\n", len(res.Evaluated), ids, res.Skipped)
	s, err := connect.Store(ctx, *e)
	if err != nil {
		return err
	}
	return printLeaderboard(out, s.Bucket, func(key string, v any) error { return store.GetJSON(ctx, s, key, v) }, name)
}

func sweepShowCmd(e *connect.Endpoints) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print a sweep's leaderboard",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := runs.CheckSweepName(name); err != nil {
				return err
			}
			ro := *e
			ro.ReadOnly = true // reading a leaderboard needs no write access
			s, err := connect.Store(cmd.Context(), ro)
			if err != nil {
				return err
			}
			return printLeaderboard(cmd.OutOrStdout(), s.Bucket,
				func(key string, v any) error { return store.GetJSON(cmd.Context(), s, key, v) }, name)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "sweep name")
	return cmd
}

// printLeaderboard prints the leaderboard as its markdown table, with
// 95 % intervals and ≈ marks.
func printLeaderboard(out io.Writer, bucket string, get func(key string, v any) error, name string) error {
	key := schemas.SweepLeaderboard(name)
	var lb schemas.Leaderboard
	if err := get(key, &lb); err != nil {
		if store.IsNotFound(err) {
			return fmt.Errorf("sweep %s has no leaderboard yet (s3://%s/%s): it is written when the first sweep ends; `starter sweep trigger --name %s` starts one", name, bucket, key, name)
		}
		return err
	}
	// Sorting again sets the intervals and ≈ marks that leaderboards
	// written before them lack; for newer ones it changes nothing.
	report.SortLeaderboard(lb.Entries)
	fmt.Fprint(out, report.LeaderboardMarkdown(lb))
	fmt.Fprintf(out, "\ns3://%s/%s\n", bucket, key)
	return nil
}

func sweepListCmd(e *connect.Endpoints) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the sweeps: schedule, state, last and next sweep, source",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			dc, err := e.DataConverter()
			if err != nil {
				return err
			}
			c, err := connect.Temporal(ctx, *e, quietLogger())
			if err != nil {
				return err
			}
			defer c.Close()
			sweeps, err := api.ListSweeps(ctx, c, dc)
			if err != nil {
				return err
			}
			printSweeps(cmd.OutOrStdout(), sweeps)
			return nil
		},
	}
}

func printSweeps(out io.Writer, sweeps []api.SweepView) {
	if len(sweeps) == 0 {
		fmt.Fprintln(out, "no sweeps (starter sweep create makes one)")
		return
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04")
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\twhen\tstate\tlast sweep\tnext sweep\tsource\tevaluation run")
	for _, s := range sweeps {
		state, next := "active", at(s.Next)
		if s.Paused {
			state, next = "paused", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.When, state, at(s.Last), next, s.Source, s.Run)
	}
	tw.Flush()
}
