package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Init keys an evaluation may use; train_init_ids is training data.
const (
	valKey   = report.ValKey
	finalKey = report.FinalKey
)

type evalFlags struct {
	config, run, weights, tag, initKey, shard string
	vars                                      []string
	replaceTag, detach, tasks                 bool
	heartbeat                                 time.Duration
	priority                                  int
}

func evalCmd(e *connect.Endpoints) *cobra.Command {
	var f evalFlags
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Evaluate weights once on every (task, init state) cell of a split, or one shard of it",
		Long: `Evaluate weights once on every (task, init state) cell of a split, or one shard of it.

The report goes to runs/<run>/eval/<tag>/report.json; a shard's (--shard i/n)
to eval/<tag>/shards/<i>-of-<n>.json, and "starter report merge" builds the
full report once all n shards are there. A tag is never overwritten unless
--replace-tag says so; a final score (--init-key eval_init_ids) never is.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEval(cmd.Context(), cmd.OutOrStdout(), e, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "harness file, e.g. harnesses/minimal/harness.yaml")
	fl.StringVar(&f.run, "run", "", "run name; a new one is created for the evaluation when --weights is a local directory")
	fl.StringVar(&f.weights, "weights", "", "a weights id of the run (w0, r1, …) or a local weights directory or file")
	fl.StringVar(&f.tag, "tag", "", "report tag: the report goes to eval/<tag>/")
	fl.StringVar(&f.initKey, "init-key", valKey, "split of init states: val_init_ids (validation) or eval_init_ids (final score)")
	fl.StringVar(&f.shard, "shard", "", "evaluate shard i of n only (cells with index % n == i), e.g. 0/8")
	fl.StringArrayVar(&f.vars, "var", nil, "override a harness var: --var name=value (repeatable)")
	fl.BoolVar(&f.replaceTag, "replace-tag", false, "overwrite the tag's report (not allowed for eval_init_ids)")
	fl.BoolVar(&f.detach, "detach", false, "start the evaluation and return without following it")
	fl.BoolVar(&f.tasks, "tasks", false, "print every task's row of the report, however many tasks")
	fl.DurationVar(&f.heartbeat, "heartbeat-timeout", 30*time.Second, "how long a silent rollout worker keeps an episode before it is retried elsewhere")
	priorityFlag(fl, &f.priority, fleet.EvalPriority, "its episodes")
	return cmd
}

// checkEvalFlags checks what can be checked without servers.
func checkEvalFlags(f evalFlags) (runs.Shard, error) {
	if f.config == "" {
		return runs.Shard{}, errors.New("--config is required: pass the harness file, e.g. --config harnesses/minimal/harness.yaml")
	}
	if !runName.MatchString(f.run) {
		return runs.Shard{}, fmt.Errorf("--run %q: give a run name of letters, digits, '.', '_' or '-'", f.run)
	}
	if !runName.MatchString(f.tag) {
		return runs.Shard{}, fmt.Errorf("--tag %q: give a tag of letters, digits, '.', '_' or '-', e.g. --tag sft_val", f.tag)
	}
	if schemas.IsValTag(f.tag) {
		return runs.Shard{}, fmt.Errorf("--tag %s is the shape of a training run's validation tags (val-r<R>): choose another tag", f.tag)
	}
	if f.initKey != valKey && f.initKey != finalKey {
		return runs.Shard{}, fmt.Errorf("--init-key %q: use val_init_ids (validation) or eval_init_ids (final score)", f.initKey)
	}
	if f.initKey == finalKey && f.replaceTag {
		return runs.Shard{}, errors.New("--replace-tag with --init-key eval_init_ids: a final score is never replaced; evaluate under a new --tag")
	}
	if f.weights == "" {
		return runs.Shard{}, errors.New("--weights is required: a weights id of the run (w0, r1, …) or a local weights directory")
	}
	return runs.ParseShard(f.shard)
}

func runEval(ctx context.Context, out io.Writer, e *connect.Endpoints, f evalFlags) error {
	// Check every input before touching anything, so a bad one starts nothing.
	sh, err := checkEvalFlags(f)
	if err != nil {
		return err
	}
	t, err := resolveEval(f, sh)
	if err != nil {
		return err
	}
	c, s, err := connectBoth(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()
	id, err := startEval(ctx, out, c, s, e, &t)
	if err != nil {
		return err
	}
	return followEval(ctx, out, c, s, e, id, f.run, f.detach, f.tasks)
}

// evalTarget is an evaluation as far as it is known without servers (its
// harness and weights, runs.ResolveEval) and how its workflow is to run.
// `starter eval` runs one, `starter compare` up to two.
type evalTarget struct {
	runs.Eval
	weights   string // as --weights names them, for messages
	heartbeat time.Duration
	priority  int
}

// resolveEval loads the harness with the vars and finds the weights f
// names: a weights id of the run, or local files (then named ext-<digest>,
// as they will be published).
func resolveEval(f evalFlags, sh runs.Shard) (evalTarget, error) {
	t := evalTarget{weights: f.weights, heartbeat: f.heartbeat, priority: f.priority}
	if err := runs.CheckPriority(f.priority); err != nil {
		return t, err
	}
	ev, err := runs.ResolveEval(runs.Eval{Run: f.run, Tag: f.tag, InitKey: f.initKey, Config: f.config, Shard: sh, ReplaceTag: f.replaceTag, Flag: "--weights"}, f.vars, f.weights)
	t.Eval = ev
	if err != nil {
		return t, err
	}
	if ev.Files == nil && !runName.MatchString(f.weights) {
		return t, fmt.Errorf("--weights %q is neither a local path nor a weights id: pass w0, r1, … or a weights directory", f.weights)
	}
	return t, nil
}

// checkRun checks the target against its run in S3 (runs.CheckEval),
// reading a weights id's digest into t, and says whether the run exists.
func checkRun(ctx context.Context, s *store.Store, t *evalTarget) (bool, error) {
	exists, digest, err := runs.CheckEval(ctx, s, t.Eval)
	if err != nil {
		return exists, err
	}
	t.Digest = digest
	return exists, nil
}

// startEval checks the target against the run and its tag, then publishes
// local weights, creates a new run and starts the Eval workflow; an
// evaluation of the same weights already running under the tag is joined
// instead. It returns the workflow id to follow.
func startEval(ctx context.Context, out io.Writer, c client.Client, s *store.Store, e *connect.Endpoints, t *evalTarget) (string, error) {
	exists, err := checkRun(ctx, s, t)
	if err != nil {
		return "", err
	}
	id := api.EvalWorkflowID(t.Run, t.Tag, t.Shard.I, t.Shard.N)
	running, err := api.IsRunning(ctx, c, id)
	if err != nil {
		return "", err
	}
	if running {
		p, err := api.QueryEvalProgress(ctx, c, id)
		if err == nil && (p.WeightsID != t.WeightsID || p.InitKey != t.InitKey) {
			return "", fmt.Errorf("evaluation %s is running with weights %s on %s: wait for it, or use another --tag", id, p.WeightsID, p.InitKey)
		}
		fmt.Fprintf(out, "evaluation %s is already running; following it\n", id)
		return id, nil
	}
	if err := api.RegisterSearchAttributes(ctx, c, e.Namespace); err != nil {
		return "", err
	}
	p, err := runs.PrepareEval(ctx, s, t.Eval, exists)
	if p.Wiped {
		fmt.Fprintf(out, "--replace-tag: deleted tag %s of run %s (%d objects)\n", t.Tag, t.Run, p.Deleted)
	}
	for _, k := range p.Removed {
		fmt.Fprintf(out, "--replace-tag: deleted s3://%s/%s\n", s.Bucket, k)
	}
	if p.Published {
		fmt.Fprintf(out, "published %s as weights %s of run %s\n", t.weights, t.WeightsID, t.Run)
	}
	if p.Created {
		fmt.Fprintf(out, "created run %s for evaluation: harness %s (digest %s)\n", t.Run, t.Harness.Name, t.Harness.Digest)
	}
	if err != nil {
		return "", err
	}
	_, err = api.StartEval(ctx, c, api.EvalInput{Run: t.Run, Harness: t.Harness, WeightsID: t.WeightsID, Tag: t.Tag, InitKey: t.InitKey,
		Shard: t.Shard.I, Shards: t.Shard.N, Heartbeat: t.heartbeat, Priority: t.priority})
	if err != nil {
		return "", fmt.Errorf("start workflow %s on %s: %w", id, e.Temporal, err)
	}
	fmt.Fprintf(out, "started evaluation %s: weights %s (digest %.12s) on %s, shard %s, harness %s\n", t.Tag, t.WeightsID, t.Digest, t.InitKey, t.Shard, t.Harness.Name)
	return id, nil
}

// followEval prints progress until the evaluation ends, then its report
// (every task's row with tasks).
func followEval(ctx context.Context, out io.Writer, c client.Client, s *store.Store, e *connect.Endpoints, id, run string, detach, tasks bool) error {
	printEvalLinks(out, s, e, id, run)
	if detach {
		return nil
	}
	rep, err := waitEval(ctx, out, c, id)
	if err != nil {
		return err
	}
	if rep.OmittedTasks > 0 {
		// The workflow's result left the task rows in S3 (schemas.Report.ForHistory).
		if err := store.GetJSON(ctx, s, rep.Key(), &rep); err != nil {
			return fmt.Errorf("evaluation %s finished; its report's task rows: %w", id, err)
		}
	}
	fmt.Fprintln(out)
	return writeReport(out, rep, s.Bucket, tasks)
}

// printEvalLinks says where to watch an evaluation: its workflow in the
// Temporal UI and the run's prefix in S3.
func printEvalLinks(out io.Writer, s *store.Store, e *connect.Endpoints, id, run string) {
	fmt.Fprintf(out, "Temporal UI: %s\nS3 prefix:   s3://%s/%s\n", e.WorkflowURL(id), s.Bucket, schemas.Layout{Run: run}.Prefix())
}

// waitEval prints progress lines (and failing activities) until the
// evaluation ends, and returns its report.
func waitEval(ctx context.Context, out io.Writer, c client.Client, id string) (schemas.Report, error) {
	var rep schemas.Report
	err := api.Follow(ctx, out, c, id, func(ctx context.Context) error { return c.GetWorkflow(ctx, id, "").Get(ctx, &rep) }, func() api.Line {
		p, err := api.QueryEvalProgress(ctx, c, id)
		if err != nil {
			return api.Line{}
		}
		t := p.Episodes
		l := api.Line{Text: fmt.Sprintf("eval %s %s: %d/%d episodes, %d successes", p.Tag, p.Phase, t.Done, t.Total, t.Successes), Stage: p.Phase, Done: t.Done, Total: t.Total}
		if p.Shards > 1 {
			l.Text = fmt.Sprintf("eval %s shard %d/%d %s: %d/%d episodes, %d successes", p.Tag, p.Shard, p.Shards, p.Phase, t.Done, t.Total, t.Successes)
		}
		return l
	})
	var cancelled *temporal.CanceledError
	switch {
	case errors.As(err, &cancelled):
		// Someone asked for it (starter cancel, the UI): not a failure to fix.
		return rep, fmt.Errorf("evaluation %s was cancelled (starter cancel or the Temporal UI), so no report was written: rerun the same command to evaluate again", id)
	case err != nil:
		return rep, fmt.Errorf("evaluation %s failed: %w (details in the Temporal UI; fix the cause, then rerun the same command: no report was written)", id, err)
	}
	return rep, nil
}
