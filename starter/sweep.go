package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/spf13/cobra"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// sweepTimeout bounds each call to Temporal or S3 made by a sweep command.
const sweepTimeout = 15 * time.Second

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

// checkSweepName refuses names that cannot name a schedule, a run and keys.
func checkSweepName(name string) error {
	if !runName.MatchString(name) || !runName.MatchString(schemas.SweepRun(name)) {
		return fmt.Errorf("--name %q: give a sweep name of letters, digits, '.', '_' or '-' (at most 90)", name)
	}
	return nil
}

// sweepSpec checks the schedule flags and returns the Temporal spec and
// how to say it, without contacting any server.
func sweepSpec(every, cronExpr string) (client.ScheduleSpec, string, error) {
	var spec client.ScheduleSpec
	switch {
	case every != "" && cronExpr != "":
		return spec, "", errors.New(`--every and --cron both given: choose one, e.g. --every 6h or --cron "0 3 * * *"`)
	case every == "" && cronExpr == "":
		return spec, "", errors.New(`--every or --cron is required: e.g. --every 6h or --cron "0 3 * * *"`)
	case every != "":
		d, err := time.ParseDuration(every)
		if err != nil {
			return spec, "", fmt.Errorf("--every %q is not a duration: write it like 6h, 90m or 24h (no d unit)", every)
		}
		if d < time.Minute {
			return spec, "", fmt.Errorf("--every %s is shorter than a minute: sweeps evaluate whole splits, give e.g. --every 1h", every)
		}
		spec.Intervals = []client.ScheduleIntervalSpec{{Every: d}}
		return spec, "every " + every, nil
	}
	if err := checkCron(cronExpr); err != nil {
		return spec, "", err
	}
	spec.CronExpressions = []string{cronExpr}
	return spec, "cron " + cronExpr, nil
}

// cronParser is the classic five fields, with the descriptors below and
// an optional CRON_TZ= prefix: the part of Temporal's cron syntax whose
// meaning the two agree on.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// checkCron validates a --cron expression before Temporal sees it.
func checkCron(expr string) error {
	spec := strings.TrimSpace(expr)
	if tz, rest, ok := strings.Cut(spec, " "); ok && (strings.HasPrefix(tz, "CRON_TZ=") || strings.HasPrefix(tz, "TZ=")) {
		spec = strings.TrimSpace(rest)
	}
	if strings.HasPrefix(spec, "@every") {
		return fmt.Errorf("--cron %q: use --every for intervals, e.g. --every 6h", expr)
	}
	if strings.HasPrefix(spec, "@") {
		switch spec {
		case "@yearly", "@monthly", "@weekly", "@daily", "@hourly":
		default:
			return fmt.Errorf("--cron %q: the shorthands are @yearly, @monthly, @weekly, @daily and @hourly", expr)
		}
	}
	if _, err := cronParser.Parse(expr); err != nil {
		return fmt.Errorf(`--cron %q: %v; write five fields (minute hour day-of-month month day-of-week), e.g. "0 3 * * *" for 03:00 daily`, expr, err)
	}
	return nil
}

// sweepSource checks --run and --weights-prefix (exactly one) and returns
// the sweep's source and evaluation run.
func sweepSource(f sweepFlags, bucket string) (source, run string, err error) {
	switch {
	case f.run != "" && f.prefix != "":
		return "", "", errors.New("--run and --weights-prefix both given: sweep the weights of a run (--run R) or of an s3 prefix (--weights-prefix s3://bucket/prefix/), not both")
	case f.run == "" && f.prefix == "":
		return "", "", errors.New("--run or --weights-prefix is required: --run R sweeps runs/R/weights/, --weights-prefix s3://bucket/prefix/ the weights ids under it")
	case f.run != "":
		if !runName.MatchString(f.run) {
			return "", "", fmt.Errorf("--run %q: give the name of a run of letters, digits, '.', '_' or '-'", f.run)
		}
		return f.run, f.run, nil
	}
	b, _, err := store.ParseURL(f.prefix)
	if err != nil {
		return "", "", fmt.Errorf("--weights-prefix: %w", err)
	}
	if b != bucket {
		return "", "", fmt.Errorf("--weights-prefix %s is in bucket %s, but workers read bucket %s: copy the weights into s3://%s/… or run with --bucket %s", f.prefix, b, bucket, bucket, b)
	}
	return f.prefix, schemas.SweepRun(f.name), nil
}

func sweepCreate(ctx context.Context, out io.Writer, e *connect.Endpoints, f sweepFlags) error {
	// Every input is checked before a server is contacted, so a bad
	// command changes nothing.
	if err := checkSweepName(f.name); err != nil {
		return err
	}
	spec, when, err := sweepSpec(f.every, f.cron)
	if err != nil {
		return err
	}
	source, run, err := sweepSource(f, e.S3.Bucket)
	if err != nil {
		return err
	}
	if err := checkPriority(f.priority); err != nil {
		return err
	}
	if f.initKey != "val_init_ids" && f.initKey != "eval_init_ids" {
		return fmt.Errorf("--init-key %q: use val_init_ids or eval_init_ids", f.initKey)
	}
	if f.parallel < 1 {
		return fmt.Errorf("--parallel %d: need at least 1", f.parallel)
	}
	if f.config == "" {
		return errors.New("--config is required: pass the harness file the evaluations run, e.g. --config harnesses/minimal/harness.yaml")
	}
	vars, err := harness.ParseVars(f.vars)
	if err != nil {
		return err
	}
	h, err := harness.Load(f.config, vars)
	if err != nil {
		return err
	}
	c, s, err := connectBoth(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()
	id := api.SweepScheduleID(f.name)
	sc := c.ScheduleClient()
	if _, err := describeSchedule(ctx, sc, id); err == nil {
		return fmt.Errorf("sweep %s exists (schedule %s): choose another --name, or delete it first with `starter sweep delete --name %s`", f.name, id, f.name)
	} else if !isScheduleNotFound(err) {
		return err
	}
	var lb schemas.Leaderboard
	if err := store.GetJSON(ctx, s, schemas.SweepLeaderboard(f.name), &lb); err != nil && !store.IsNotFound(err) {
		return err
	}
	if lb.Source != "" && (lb.Source != source || lb.Run != run || lb.InitKey != f.initKey) {
		return fmt.Errorf("sweep name %s has a leaderboard of %s on %s in run %s (s3://%s/%s): choose another --name, or remove that leaderboard", f.name, lb.Source, lb.InitKey, lb.Run, s.Bucket, schemas.SweepLeaderboard(f.name))
	}
	l := schemas.Layout{Run: run}
	old, exists, err := runs.ReadHarness(ctx, s, run)
	switch {
	case err != nil:
		return err
	case exists && old.Digest != h.Digest:
		return fmt.Errorf("run %s was started with another harness (digest %s; --config %s with these --var values gives %s): pass the run's harness file and vars", run, old.Digest, f.config, h.Digest)
	case !exists && f.run != "":
		return fmt.Errorf("run %s does not exist (no s3://%s/%s): start it with `starter train`, or sweep an s3 prefix with --weights-prefix", run, s.Bucket, l.Harness())
	case !exists:
		// The sweep's own evaluation run: episodes read the harness here.
		if err := runs.PutHarness(ctx, s, run, h); err != nil {
			return err
		}
	}
	if err := api.RegisterSearchAttributes(ctx, c, e.Namespace); err != nil {
		return err
	}
	in := api.SweepInput{Name: f.name, Source: source, Run: run, Harness: h, InitKey: f.initKey, Parallel: f.parallel, Priority: f.priority}
	cctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	handle, err := api.CreateSweep(cctx, c, in, spec, when)
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return fmt.Errorf("sweep %s exists (schedule %s): choose another --name, or delete it first with `starter sweep delete --name %s`", f.name, id, f.name)
	}
	if err != nil {
		return fmt.Errorf("create schedule %s on %s: %w", id, e.Temporal, err)
	}
	fmt.Fprintf(out, "created sweep %s (schedule %s): %s, weights of %s evaluated in run %s on %s\n", f.name, id, when, source, run, f.initKey)
	if d, err := describeSchedule(ctx, sc, handle.GetID()); err == nil && len(d.Info.NextActionTimes) > 0 {
		fmt.Fprintf(out, "next sweep: %s\n", d.Info.NextActionTimes[0].UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(out, "leaderboard: s3://%s/%s (starter sweep show --name %s)\n", s.Bucket, schemas.SweepLeaderboard(f.name), f.name)
	return nil
}

// describeSchedule describes a schedule with a timeout.
func describeSchedule(ctx context.Context, sc client.ScheduleClient, id string) (*client.ScheduleDescription, error) {
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	d, err := sc.GetHandle(ctx, id).Describe(ctx)
	if err != nil {
		return nil, fmt.Errorf("describe schedule %s: %w", id, err)
	}
	return d, nil
}

func isScheduleNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// sweepHandle connects and finds sweep name's schedule, or says there is
// no such sweep.
func sweepHandle(ctx context.Context, e *connect.Endpoints, name string) (client.Client, client.ScheduleHandle, *client.ScheduleDescription, error) {
	if err := checkSweepName(name); err != nil {
		return nil, nil, nil, err
	}
	c, err := connect.Temporal(ctx, *e, quietLogger())
	if err != nil {
		return nil, nil, nil, err
	}
	id := api.SweepScheduleID(name)
	d, err := describeSchedule(ctx, c.ScheduleClient(), id)
	if isScheduleNotFound(err) {
		c.Close()
		return nil, nil, nil, fmt.Errorf("no sweep named %s (no schedule %s): `starter sweep list` shows the sweeps", name, id)
	}
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	return c, c.ScheduleClient().GetHandle(ctx, id), d, nil
}

// sweepActionCmd is pause, unpause or delete.
func sweepActionCmd(e *connect.Endpoints, verb, short string) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   verb,
		Short: short,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, h, _, err := sweepHandle(ctx, e, name)
			if err != nil {
				return err
			}
			defer c.Close()
			actx, cancel := context.WithTimeout(ctx, sweepTimeout)
			defer cancel()
			out := cmd.OutOrStdout()
			switch verb {
			case "pause":
				err = h.Pause(actx, client.SchedulePauseOptions{Note: "starter sweep pause"})
				if err == nil {
					fmt.Fprintf(out, "sweep %s paused; `starter sweep unpause --name %s` resumes it\n", name, name)
				}
			case "unpause":
				err = h.Unpause(actx, client.ScheduleUnpauseOptions{Note: "starter sweep unpause"})
				if err == nil {
					fmt.Fprintf(out, "sweep %s resumed\n", name)
				}
			case "delete":
				err = h.Delete(actx)
				if err == nil {
					fmt.Fprintf(out, "sweep %s deleted; a sweep still running finishes; its leaderboard stays at s3://%s/%s\n", name, e.S3.Bucket, schemas.SweepLeaderboard(name))
				}
			}
			if err != nil {
				return fmt.Errorf("%s sweep %s: %w", verb, name, err)
			}
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
	c, h, before, err := sweepHandle(ctx, e, name)
	if err != nil {
		return err
	}
	defer c.Close()
	tctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	if err := h.Trigger(tctx, client.ScheduleTriggerOptions{}); err != nil {
		return fmt.Errorf("trigger sweep %s: %w", name, err)
	}
	// The schedule takes the action asynchronously: watch its counters to
	// learn whether it started a sweep or skipped one that would overlap.
	var started *client.ScheduleWorkflowExecution
	deadline := time.Now().Add(30 * time.Second)
	for started == nil {
		d, err := describeSchedule(ctx, c.ScheduleClient(), h.GetID())
		if err != nil {
			return err
		}
		if d.Info.NumActionsSkippedOverlap > before.Info.NumActionsSkippedOverlap {
			fmt.Fprintf(out, "sweep %s is running already; this trigger was skipped (overlapping sweeps are skipped, not stacked)\n", name)
			return nil
		}
		if d.Info.NumActions > before.Info.NumActions && len(d.Info.RecentActions) > 0 {
			started = d.Info.RecentActions[len(d.Info.RecentActions)-1].StartWorkflowResult
			if started == nil {
				return fmt.Errorf("sweep %s: the schedule's last action started no workflow", name)
			}
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sweep %s: triggered, but the schedule took no action within 30s (is it paused? `starter sweep list`)", name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	fmt.Fprintf(out, "sweep %s started: workflow %s\n", name, started.WorkflowID)
	if !wait {
		return nil
	}
	wctx, wcancel := context.WithTimeout(ctx, timeout)
	defer wcancel()
	var res api.SweepResult
	err = followUntil(wctx, out, c, started.WorkflowID, func(ctx context.Context) error {
		return c.GetWorkflow(ctx, started.WorkflowID, started.FirstExecutionRunID).Get(ctx, &res)
	}, func() string { return "" })
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
			if err := checkSweepName(name); err != nil {
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
			c, err := connect.Temporal(ctx, *e, quietLogger())
			if err != nil {
				return err
			}
			defer c.Close()
			lctx, cancel := context.WithTimeout(ctx, sweepTimeout)
			defer cancel()
			it, err := c.ScheduleClient().List(lctx, client.ScheduleListOptions{})
			if err != nil {
				return fmt.Errorf("list schedules: %w", err)
			}
			var rows []*client.ScheduleListEntry
			for it.HasNext() {
				s, err := it.Next()
				if err != nil {
					return fmt.Errorf("list schedules: %w", err)
				}
				if name, ok := strings.CutPrefix(s.ID, "sweep-"); ok && name != "" && s.WorkflowType.Name == api.SweepWorkflow {
					rows = append(rows, s)
				}
			}
			printSweeps(cmd.OutOrStdout(), rows)
			return nil
		},
	}
}

func printSweeps(out io.Writer, rows []*client.ScheduleListEntry) {
	if len(rows) == 0 {
		fmt.Fprintln(out, "no sweeps (starter sweep create makes one)")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\twhen\tstate\tlast sweep\tnext sweep\tsource\tevaluation run")
	for _, s := range rows {
		state := "active"
		if s.Paused {
			state = "paused"
		}
		last, next := "-", "-"
		if n := len(s.RecentActions); n > 0 {
			last = s.RecentActions[n-1].ActualTime.UTC().Format("2006-01-02 15:04")
		}
		if len(s.NextActionTimes) > 0 && !s.Paused {
			next = s.NextActionTimes[0].UTC().Format("2006-01-02 15:04")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", strings.TrimPrefix(s.ID, "sweep-"), memoString(s.Memo, api.SweepMemoWhen), state, last, next,
			memoString(s.Memo, api.SweepMemoSource), memoString(s.Memo, api.SweepMemoRun))
	}
	tw.Flush()
}

// memoString reads a string the schedule's memo holds ("-" when absent).
func memoString(m *commonpb.Memo, key string) string {
	if m == nil || m.Fields[key] == nil {
		return "-"
	}
	var v string
	if err := historyConverter.FromPayload(m.Fields[key], &v); err != nil {
		return "-"
	}
	return v
}
