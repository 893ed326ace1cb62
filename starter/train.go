package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
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
	maxStaleness                     int
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
	fl.IntVar(&f.maxStaleness, "max-staleness", 0, "overlap rounds: the most weights versions a training sample may lag behind its trainer (0: rounds one after another; default: the harness's collect.max_staleness)")
	fl.StringVar(&f.stopFile, "stop-file", "", "while following, a file whose creation asks for a controlled stop (default runs/<run>/STOP under the current directory)")
	return cmd
}

func train(ctx context.Context, out io.Writer, e *connect.Endpoints, f trainFlags) error {
	t := runs.Train{Run: f.run, Config: f.config, Vars: f.vars, Weights: f.weights, PoolReport: f.poolReport, PoolAnyWeights: f.poolAnyWeights,
		Rounds: int32(f.rounds), Groups: f.groups, Attempts: f.attempts, Heartbeat: f.heartbeat, Priority: f.priority, Replace: f.replace, Given: f.set,
		MaxStaleness: int32(f.maxStaleness)}
	if err := t.Check(); err != nil {
		return err
	}
	h := t.Harness
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
		return follow(ctx, out, c, s, e, f.run, f.detach, f.stopFile)
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
		fmt.Fprintf(out, "resuming run %s at round %d/%d from weights %s (%d rounds done)\n", f.run, p.Round, p.Rounds, p.WeightsID, p.RoundsDone)
	}
	if err != nil {
		return err
	}
	in := api.TrainInput{Run: f.run, Harness: h, InitialWeightsID: p.InitialWeightsID, WeightsID: p.WeightsID, Rounds: p.Rounds, Groups: p.Groups,
		Attempts: p.Attempts, PoolReport: p.PoolReport, Round: p.Round, Summaries: p.Summaries, HeartbeatTimeout: p.Heartbeat, Priority: f.priority,
		MaxStaleness: p.MaxStaleness}
	if _, err := api.StartTrain(ctx, c, in); err != nil {
		return fmt.Errorf("start workflow %s on %s: %w", id, e.Temporal, err)
	}
	if !p.Resumed {
		fmt.Fprintf(out, "started run %s: harness %s (digest %s), weights %s, %d rounds of %d groups × %d attempts%s\n",
			f.run, h.Name, h.Digest, f.weights, in.Rounds, in.Groups, in.Attempts, overlapNote(in.MaxStaleness))
	}
	return follow(ctx, out, c, s, e, f.run, f.detach, f.stopFile)
}

// follow prints progress until the run ends, then the per-round table.
// A STOP file (the upstream controller's habit) asks for a controlled stop.
func follow(ctx context.Context, out io.Writer, c client.Client, s *store.Store, e *connect.Endpoints, run string, detach bool, stopFile string) error {
	fmt.Fprintf(out, "Temporal UI: %s\nS3 prefix:   s3://%s/%s\n", e.WorkflowURL(api.WorkflowID(run)), s.Bucket, schemas.Layout{Run: run}.Prefix())
	if detach {
		return nil
	}
	if stopFile != "" {
		fmt.Fprintf(out, "controlled stop: starter stop --run %s, or touch %s\n", run, stopFile)
	}
	res, err := api.FollowTrain(ctx, out, c, run, func() {
		if _, err := os.Stat(stopFile); stopFile == "" || err != nil {
			return // no STOP file
		}
		if err := api.RequestStop(ctx, c, run, "STOP file "+stopFile); err != nil {
			fmt.Fprintf(out, "STOP file seen, but the stop request failed: %v\n", err)
		} else {
			fmt.Fprintf(out, "STOP file %s seen: stop requested (running episodes finish)\n", stopFile)
			os.Remove(stopFile)
		}
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
	report.WriteRounds(out, res.Summaries)
	if res.Stopped {
		fmt.Fprintf(out, "run %s stopped in round %d; `starter train --run %s --config …` resumes it\n", run, res.StoppedRound, run)
		return
	}
	switch v := res.FinalVal; {
	case v != nil:
		fmt.Fprintf(out, "final validation success (weights %s): %d/%d %s over valid, %s over attempted\n", res.FinalWeightsID,
			v.Successes, v.Valid, stats.Rate(v.Successes, v.Valid), stats.Rate(v.Successes, v.Attempted()))
		if w := report.FinalValWarning(*v, report.LastLimit(res.Summaries)); w != "" {
			fmt.Fprintln(out, w)
		}
	case res.FinalValSuccess >= 0: // a result from before counts were kept
		fmt.Fprintf(out, "final validation success (weights %s): %.1f%%\n", res.FinalWeightsID, 100*res.FinalValSuccess)
	}
	fmt.Fprintf(out, "final weights: s3://%s/%s\n", bucket, schemas.Layout{Run: run}.Weights(res.FinalWeightsID))
}

// overlapNote says how a run's rounds overlap, "" when they do not.
func overlapNote(eta int32) string {
	if eta == 0 {
		return ""
	}
	return fmt.Sprintf(", overlapped (max staleness %d: collection runs while the round before trains)", eta)
}
