package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows"
)

var runName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

func rootCmd() *cobra.Command {
	e := connect.FromEnv()
	root := &cobra.Command{Use: "starter", Short: "Start and follow Roundhouse runs", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().StringVar(&e.Temporal, "temporal", e.Temporal, "Temporal frontend host:port (env ROUNDHOUSE_TEMPORAL)")
	root.PersistentFlags().StringVar(&e.S3.Endpoint, "s3-endpoint", e.S3.Endpoint, "S3 endpoint URL (env ROUNDHOUSE_S3_ENDPOINT)")
	root.PersistentFlags().StringVar(&e.S3.Bucket, "bucket", e.S3.Bucket, "S3 bucket (env ROUNDHOUSE_BUCKET)")
	root.AddCommand(trainCmd(&e), statusCmd(&e), validateCmd(), reportCmd(&e))
	return root
}

type trainFlags struct {
	config, run, weights, poolReport string
	rounds, groups, attempts         int
	vars                             []string
	replace, detach                  bool
	heartbeat                        time.Duration
}

func trainCmd(e *connect.Endpoints) *cobra.Command {
	var f trainFlags
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Run RL rounds: validate, select the pool, collect, compute advantages, train",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return train(cmd.Context(), cmd.OutOrStdout(), e, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "harness file, e.g. harnesses/minimal/harness.yaml")
	fl.StringVar(&f.run, "run", "", "run name; its data lives under runs/<run>/ in the bucket")
	fl.StringVar(&f.weights, "weights", "", "initial weights: a file or a directory holding the harness's weights file")
	fl.StringVar(&f.poolReport, "pool-report", "", "validation report.json choosing round 1's pool (skips the first validation)")
	fl.IntVar(&f.rounds, "rounds", 6, "rounds to run")
	fl.IntVar(&f.groups, "groups", 0, "groups per round (default: the harness's collect.groups)")
	fl.IntVar(&f.attempts, "attempts", 0, "attempts per group (default: the harness's collect.attempts)")
	fl.StringArrayVar(&f.vars, "var", nil, "override a harness var: --var name=value (repeatable)")
	fl.BoolVar(&f.replace, "replace", false, "delete an earlier finished run of the same name before starting")
	fl.BoolVar(&f.detach, "detach", false, "start the run and return without following it")
	fl.DurationVar(&f.heartbeat, "heartbeat-timeout", 30*time.Second, "how long a silent rollout worker keeps an episode before it is retried elsewhere")
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
	vars, err := harness.ParseVars(f.vars)
	if err != nil {
		return err
	}
	h, err := harness.Load(f.config, vars)
	if err != nil {
		return err
	}
	if f.groups == 0 {
		f.groups = h.Collect.Groups
	}
	if f.attempts == 0 {
		f.attempts = h.Collect.Attempts
	}
	if f.groups < 1 || f.attempts < 2 {
		return fmt.Errorf("--groups %d --attempts %d: need at least 1 group of at least 2 attempts", f.groups, f.attempts)
	}
	weightFiles, err := findWeights(f.weights, h.Model.WeightsFile)
	if err != nil {
		return err
	}
	var pool []byte
	if f.poolReport != "" {
		if pool, err = os.ReadFile(f.poolReport); err != nil {
			return fmt.Errorf("--pool-report %s: %w", f.poolReport, err)
		}
		var rep schemas.Report
		if err := json.Unmarshal(pool, &rep); err != nil || len(rep.Tasks) == 0 {
			return fmt.Errorf("--pool-report %s is not a report.json with tasks (%v): pass eval/<tag>/report.json of a validation", f.poolReport, err)
		}
	}
	c, err := connect.Temporal(ctx, *e, quietLogger())
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := connect.Store(ctx, *e)
	if err != nil {
		return err
	}
	id := workflows.WorkflowID(f.run)
	l := schemas.Layout{Run: f.run}

	running, err := isRunning(ctx, c, id)
	if err != nil {
		return err
	}
	if running {
		fmt.Fprintf(out, "run %s is already running; following it\n", f.run)
		return follow(ctx, out, c, s, e, id, f.run, f.detach)
	}
	exists, err := s.Exists(ctx, l.Harness())
	if err != nil {
		return err
	}
	if exists && !f.replace {
		return fmt.Errorf("run %s already has data at s3://%s/%s: choose another --run, or pass --replace to delete it and start over", f.run, s.Bucket, l.Prefix())
	}
	if exists {
		n, err := s.DeletePrefix(ctx, l.Prefix())
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "deleted %d objects of the earlier run %s\n", n, f.run)
	}

	hb, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode harness: %w", err)
	}
	if err := s.Put(ctx, l.Harness(), hb); err != nil {
		return err
	}
	if _, err := weights.Publish(ctx, s, l.Weights("w0"), weightFiles, schemas.WeightsManifest{WeightsID: "w0"}); err != nil {
		return err
	}
	in := workflows.TrainInput{Run: f.run, Harness: h, InitialWeights: "w0", Weights: "w0", Rounds: int32(f.rounds),
		Groups: f.groups, Attempts: f.attempts, Round: 1, HeartbeatTimeout: f.heartbeat}
	if pool != nil {
		in.PoolReport = l.Prefix() + "pool-report.json"
		if err := s.Put(ctx, in.PoolReport, pool); err != nil {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = c.ExecuteWorkflow(sctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: workflows.ControlQueue,
		StaticSummary:            fmt.Sprintf("%s: %d rounds × %d groups × %d attempts from %s", h.Name, f.rounds, f.groups, f.attempts, f.weights),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, workflows.Train, in)
	if err != nil {
		return fmt.Errorf("start workflow %s on %s: %w", id, e.Temporal, err)
	}
	fmt.Fprintf(out, "started run %s: harness %s (digest %s), weights %s, %d rounds of %d groups × %d attempts\n",
		f.run, h.Name, h.Digest, f.weights, f.rounds, f.groups, f.attempts)
	return follow(ctx, out, c, s, e, id, f.run, f.detach)
}

// findWeights accepts the weights file itself or a directory holding it.
// findWeights lists the starting weights: a directory (a checkpoint, every
// file under it) or, for a harness naming a weights_file, that one file.
func findWeights(path, file string) ([]weights.File, error) {
	if path == "" {
		return nil, errors.New("--weights is required: pass the initial weights, e.g. --weights harnesses/minimal/weights/w0")
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--weights %s does not exist: pass a weights directory", path)
	}
	if !st.IsDir() {
		if file == "" {
			return nil, fmt.Errorf("--weights %s is a file; this harness's weights are a directory (no model.weights_file): pass the checkpoint directory", path)
		}
		return []weights.File{{Name: file, Path: path}}, nil
	}
	if file != "" {
		if _, err := os.Stat(filepath.Join(path, file)); err != nil {
			return nil, fmt.Errorf("--weights %s has no %s (the harness's model.weights_file): pass the directory that holds it", path, file)
		}
	}
	files, err := weights.Dir(path)
	if err != nil {
		return nil, fmt.Errorf("--weights: %w", err)
	}
	return files, nil
}

func isRunning(ctx context.Context, c client.Client, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := c.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("describe workflow %s: %w", id, err)
	}
	return d.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}

func uiURL(e *connect.Endpoints, id string) string {
	ui := os.Getenv("ROUNDHOUSE_UI")
	if ui == "" {
		ui = "http://127.0.0.1:8233"
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimRight(ui, "/"), e.Namespace, id)
}

// follow prints progress until the run ends, then the per-round table.
func follow(ctx context.Context, out io.Writer, c client.Client, s *store.Store, e *connect.Endpoints, id, run string, detach bool) error {
	fmt.Fprintf(out, "Temporal UI: %s\nS3 prefix:   s3://%s/%s\n", uiURL(e, id), s.Bucket, schemas.Layout{Run: run}.Prefix())
	if detach {
		return nil
	}
	done := make(chan error, 1)
	var res workflows.TrainResult
	go func() { done <- c.GetWorkflow(ctx, id, "").Get(ctx, &res) }()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	last := ""
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("run %s failed: %w (details in the Temporal UI)", run, err)
			}
			fmt.Fprintln(out)
			printSummaries(out, res.Summaries)
			if res.FinalValSuccess >= 0 {
				fmt.Fprintf(out, "final validation success (weights %s): %.1f%%\n", res.FinalWeights, 100*res.FinalValSuccess)
			}
			fmt.Fprintf(out, "final weights: s3://%s/%s\n", s.Bucket, schemas.Layout{Run: run}.Weights(res.FinalWeights))
			return nil
		case <-tick.C:
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			v, err := c.QueryWorkflow(qctx, id, "", workflows.ProgressQuery)
			cancel()
			if err != nil {
				continue // between runs of a continue-as-new chain the query may miss
			}
			var p workflows.Progress
			if v.Get(&p) != nil {
				continue
			}
			line := fmt.Sprintf("round %d/%d  %-10s %d/%d episodes, %d successes", p.Round, p.Rounds, p.Phase, p.EpisodesDone, p.EpisodesTotal, p.Successes)
			if line != last {
				fmt.Fprintln(out, line)
				last = line
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func printSummaries(out io.Writer, ss []schemas.RoundSummary) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tval success\tepisodes\tvalid\tsuccess rate\tgroups w/ signal\tsamples\tweights in\tnew weights\t")
	for _, r := range ss {
		val := "-"
		if r.ValSuccess >= 0 {
			val = fmt.Sprintf("%.1f%%", 100*r.ValSuccess)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%.1f%%\t%d/%d\t%d\t%s\t%s\t\n", r.Round, val, r.Episodes, r.Valid,
			100*r.SuccessRate, r.GroupsWithSignal, r.Groups, r.Samples, r.WeightsIn, r.WeightsOut)
	}
	tw.Flush()
}
