package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Init keys an evaluation may use; train_init_ids is training data.
const (
	valKey   = "val_init_ids"
	finalKey = "eval_init_ids"
)

// valTag is the tag shape of a training run's validations (val-r<R>): an
// evaluation under it would collide with them.
var valTag = regexp.MustCompile(`^val-r[0-9]+$`)

type evalFlags struct {
	config, run, weights, tag, initKey, shard string
	vars                                      []string
	replaceTag, detach                        bool
	heartbeat                                 time.Duration
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
	fl.DurationVar(&f.heartbeat, "heartbeat-timeout", 30*time.Second, "how long a silent rollout worker keeps an episode before it is retried elsewhere")
	return cmd
}

// shardSpec is --shard i/n; n == 1 is the whole split.
type shardSpec struct{ i, n int }

func (s shardSpec) String() string { return fmt.Sprintf("%d/%d", s.i, s.n) }

// parseShard reads --shard i/n; "" is the whole split.
func parseShard(s string) (shardSpec, error) {
	if s == "" {
		return shardSpec{0, 1}, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(strings.TrimSpace(a))
	n, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return shardSpec{}, fmt.Errorf("--shard %q: write i/n with 0 ≤ i < n, e.g. --shard 0/8 for the first of 8 shards (omit it for the whole split)", s)
	}
	return shardSpec{i, n}, nil
}

// checkEvalFlags checks what can be checked without servers.
func checkEvalFlags(f evalFlags) (shardSpec, error) {
	if f.config == "" {
		return shardSpec{}, errors.New("--config is required: pass the harness file, e.g. --config harnesses/minimal/harness.yaml")
	}
	if !runName.MatchString(f.run) {
		return shardSpec{}, fmt.Errorf("--run %q: give a run name of letters, digits, '.', '_' or '-'", f.run)
	}
	if !runName.MatchString(f.tag) {
		return shardSpec{}, fmt.Errorf("--tag %q: give a tag of letters, digits, '.', '_' or '-', e.g. --tag sft_val", f.tag)
	}
	if valTag.MatchString(f.tag) {
		return shardSpec{}, fmt.Errorf("--tag %s is the shape of a training run's validation tags (val-r<R>): choose another tag", f.tag)
	}
	if f.initKey != valKey && f.initKey != finalKey {
		return shardSpec{}, fmt.Errorf("--init-key %q: use val_init_ids (validation) or eval_init_ids (final score)", f.initKey)
	}
	if f.initKey == finalKey && f.replaceTag {
		return shardSpec{}, errors.New("--replace-tag with --init-key eval_init_ids: a final score is never replaced; evaluate under a new --tag")
	}
	if f.weights == "" {
		return shardSpec{}, errors.New("--weights is required: a weights id of the run (w0, r1, …) or a local weights directory")
	}
	return parseShard(f.shard)
}

// localWeights says --weights names local files rather than a weights id
// of the run: it exists on disk or looks like a path.
func localWeights(w string) bool {
	if _, err := os.Stat(w); err == nil {
		return true
	}
	return strings.ContainsRune(w, os.PathSeparator) || strings.HasPrefix(w, ".")
}

func runEval(ctx context.Context, out io.Writer, e *connect.Endpoints, f evalFlags) error {
	// Check every input before touching anything, so a bad one starts nothing.
	sh, err := checkEvalFlags(f)
	if err != nil {
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
	var (
		files  []weights.File
		local  []schemas.WeightsFile
		digest string
		wid    = f.weights
	)
	if localWeights(f.weights) {
		if files, err = findWeights(f.weights, h.Model.WeightsFile); err != nil {
			return err
		}
		if local, err = weights.Describe(files); err != nil {
			return fmt.Errorf("--weights %s: %w", f.weights, err)
		}
		digest = schemas.WeightsDigest(local)
		// Named by content: the same files always get the same id, so a
		// rerun publishes nothing new and other files never overwrite them.
		wid = "ext-" + digest[:12]
	} else if !runName.MatchString(f.weights) {
		return fmt.Errorf("--weights %q is neither a local path nor a weights id: pass w0, r1, … or a weights directory", f.weights)
	}

	c, s, err := connectBoth(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()
	l := schemas.Layout{Run: f.run}
	var old schemas.Harness
	exists := true
	if err := getJSON(ctx, s, l.Harness(), &old); isNotFound(err) {
		exists = false
	} else if err != nil {
		return err
	}
	switch {
	case exists && old.Digest != h.Digest:
		return fmt.Errorf("run %s uses harness %s with config digest %s; --config %s gives %s (digest %s): pass the file and --var values the run used, or evaluate in a new --run", f.run, old.Name, old.Digest, f.config, h.Name, h.Digest)
	case !exists && files == nil:
		return fmt.Errorf("unknown run %s (no s3://%s/%s): name an existing run, or pass --weights DIR to evaluate local weights in a new run", f.run, s.Bucket, l.Harness())
	}
	if files == nil {
		man, err := weights.Read(ctx, s, l.Weights(wid))
		if isNotFound(err) {
			return fmt.Errorf("weights %s not found in run %s (it has %s): pass one of those or a local weights directory", wid, f.run, strings.Join(weightIDs(ctx, s, l), ", "))
		}
		if err != nil {
			return err
		}
		digest = schemas.WeightsDigest(man.Files)
	}

	id := api.EvalWorkflowID(f.run, f.tag, sh.i, sh.n)
	running, err := api.IsRunning(ctx, c, id)
	if err != nil {
		return err
	}
	if running {
		p, err := api.QueryEvalProgress(ctx, c, id)
		if err == nil && (p.WeightsID != wid || p.InitKey != f.initKey) {
			return fmt.Errorf("evaluation %s is running with weights %s on %s: wait for it, or use another --tag", id, p.WeightsID, p.InitKey)
		}
		fmt.Fprintf(out, "evaluation %s is already running; following it\n", id)
		return followEval(ctx, out, c, s, e, id, f.run, f.detach)
	}

	st, err := readTag(ctx, s, l, f.tag)
	if err != nil {
		return err
	}
	plan, err := planTag(st, tagSpec{shard: sh, initKey: f.initKey, weights: digest, config: h.Digest, replace: f.replaceTag})
	if err != nil {
		return err
	}

	// Every check passed: from here on the command writes.
	if err := api.RegisterSearchAttributes(ctx, c, e.Namespace); err != nil {
		return err
	}
	if plan.wipe {
		n := 0
		phase := api.EvalPhase(f.tag)
		for _, p := range []string{l.EvalDir(f.tag), l.EpisodesDir(0, phase), l.CallsDir(0, phase), l.OrphansDir(0, phase), l.ArtifactsDir(0, phase)} {
			k, err := s.DeletePrefix(ctx, p)
			n += k
			if err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "--replace-tag: deleted tag %s of run %s (%d objects)\n", f.tag, f.run, n)
	}
	for _, k := range plan.remove {
		if err := s.Delete(ctx, k); err != nil {
			return err
		}
		fmt.Fprintf(out, "--replace-tag: deleted s3://%s/%s\n", s.Bucket, k)
	}
	if files != nil {
		prefix := l.Weights(wid)
		if man, err := weights.Read(ctx, s, prefix); err != nil || !weights.Same(man.Files, local) {
			if _, err := weights.Publish(ctx, s, prefix, files, schemas.WeightsManifest{WeightsID: wid}); err != nil {
				return err
			}
			fmt.Fprintf(out, "published %s as weights %s of run %s\n", f.weights, wid, f.run)
		}
	}
	if !exists {
		if err := putJSON(ctx, s, l.Harness(), h); err != nil {
			return err
		}
		fmt.Fprintf(out, "created run %s for evaluation: harness %s (digest %s)\n", f.run, h.Name, h.Digest)
	}
	_, err = api.StartEval(ctx, c, api.EvalInput{Run: f.run, Harness: h, WeightsID: wid, Tag: f.tag, InitKey: f.initKey,
		Shard: sh.i, Shards: sh.n, Heartbeat: f.heartbeat})
	if err != nil {
		return fmt.Errorf("start workflow %s on %s: %w", id, e.Temporal, err)
	}
	fmt.Fprintf(out, "started evaluation %s: weights %s (digest %.12s) on %s, shard %s, harness %s\n", f.tag, wid, digest, f.initKey, sh, h.Name)
	return followEval(ctx, out, c, s, e, id, f.run, f.detach)
}

// weightIDs lists the run's weights ids, for messages.
func weightIDs(ctx context.Context, s *store.Store, l schemas.Layout) []string {
	objs, err := s.List(ctx, l.Prefix()+"weights/")
	if err != nil {
		return []string{"?"}
	}
	var ids []string
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, l.Prefix()+"weights/")
		if id, file, ok := strings.Cut(rest, "/"); ok && file == schemas.WeightsManifestFile {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return []string{"none"}
	}
	return ids
}

// shardFile is a stored shard report of a tag.
type shardFile struct {
	key  string
	i, n int
	rep  schemas.Report
}

// tagState is what a tag holds: its full report's key ("" if none) and
// its shard reports.
type tagState struct {
	run, tag string
	full     string
	shards   []shardFile
}

var shardName = regexp.MustCompile(`(^|/)([0-9]+)-of-([0-9]+)\.json$`)

// readTag lists what is stored under a tag.
func readTag(ctx context.Context, s *store.Store, l schemas.Layout, tag string) (tagState, error) {
	st := tagState{run: l.Run, tag: tag}
	ok, err := s.Exists(ctx, l.Report(tag))
	if err != nil {
		return st, err
	}
	if ok {
		st.full = l.Report(tag)
	}
	objs, err := s.List(ctx, l.ShardsDir(tag))
	if err != nil {
		return st, err
	}
	for _, o := range objs {
		m := shardName.FindStringSubmatch(o.Key)
		if m == nil {
			continue
		}
		f := shardFile{key: o.Key}
		f.i, _ = strconv.Atoi(m[2])
		f.n, _ = strconv.Atoi(m[3])
		if err := getJSON(ctx, s, o.Key, &f.rep); err != nil {
			return st, err
		}
		st.shards = append(st.shards, f)
	}
	return st, nil
}

// tagSpec is the evaluation a command wants to store under a tag.
type tagSpec struct {
	shard           shardSpec
	initKey         string
	weights, config string // weights and harness config digests
	replace         bool
}

// tagPlan is what a replace deletes first: the whole tag (wipe) or the
// listed reports.
type tagPlan struct {
	wipe   bool
	remove []string
}

// planTag decides whether an evaluation may write under a tag: a tag is
// never overwritten silently, and the shards of one tag must be of one
// evaluation (shard count, weights, init key, harness) to be merged. With
// replace, the reports in the way are removed instead: everything for a
// whole-split evaluation; for a shard, the full report (stale once a shard
// changes), its own earlier report and shards that can't merge with it.
func planTag(st tagState, want tagSpec) (tagPlan, error) {
	var p tagPlan
	fix := "choose a new --tag, or pass --replace-tag to overwrite it"
	if want.initKey == finalKey {
		fix = "a final score is never overwritten: choose a new --tag"
	}
	if want.shard.n == 1 {
		if st.full == "" && len(st.shards) == 0 {
			return p, nil
		}
		if !want.replace {
			what := st.full
			if what == "" {
				what = fmt.Sprintf("%d shard reports, e.g. %s", len(st.shards), st.shards[0].key)
			}
			return p, fmt.Errorf("tag %s of run %s exists (%s): %s", st.tag, st.run, what, fix)
		}
		p.wipe = true
		return p, nil
	}
	if st.full != "" {
		if !want.replace {
			return p, fmt.Errorf("tag %s of run %s has its full report already (%s): %s", st.tag, st.run, st.full, fix)
		}
		p.remove = append(p.remove, st.full)
	}
	for _, f := range st.shards {
		var problem string
		switch {
		case f.i == want.shard.i && f.n == want.shard.n:
			if !want.replace {
				return p, fmt.Errorf("shard %s of tag %s exists (%s): %s", want.shard, st.tag, f.key, fix)
			}
		case f.n != want.shard.n:
			problem = fmt.Sprintf("tag %s is split in %d shards (%s), not %d: pass --shard i/%d", st.tag, f.n, f.key, want.shard.n, f.n)
		case f.rep.WeightsDigest != want.weights:
			problem = fmt.Sprintf("tag %s holds shard %d/%d of other weights (%s, digest %.12s; --weights has %.12s): evaluate the same weights in every shard", st.tag, f.i, f.n, f.rep.WeightsID, f.rep.WeightsDigest, want.weights)
		case f.rep.InitKey != want.initKey:
			problem = fmt.Sprintf("tag %s holds shard %d/%d on %s, not %s: use the same --init-key in every shard", st.tag, f.i, f.n, f.rep.InitKey, want.initKey)
		case f.rep.Digest != want.config:
			problem = fmt.Sprintf("tag %s holds shard %d/%d of harness config %s, --config gives %s: use the same harness and vars in every shard", st.tag, f.i, f.n, f.rep.Digest, want.config)
		default:
			continue // a shard of the same evaluation: kept
		}
		if problem != "" && !want.replace {
			return p, fmt.Errorf("%s, or use a new --tag", problem)
		}
		p.remove = append(p.remove, f.key)
	}
	return p, nil
}

// followEval prints progress until the evaluation ends, then its report.
func followEval(ctx context.Context, out io.Writer, c client.Client, s *store.Store, e *connect.Endpoints, id, run string, detach bool) error {
	fmt.Fprintf(out, "Temporal UI: %s\nS3 prefix:   s3://%s/%s\n", uiURL(e, id), s.Bucket, schemas.Layout{Run: run}.Prefix())
	if detach {
		return nil
	}
	var rep schemas.Report
	err := followUntil(ctx, out, func(ctx context.Context) error { return c.GetWorkflow(ctx, id, "").Get(ctx, &rep) }, func() string {
		p, err := api.QueryEvalProgress(ctx, c, id)
		if err != nil {
			return ""
		}
		t := p.Episodes
		if p.Shards > 1 {
			return fmt.Sprintf("eval %s shard %d/%d %s: %d/%d episodes, %d successes", p.Tag, p.Shard, p.Shards, p.Phase, t.Done, t.Total, t.Successes)
		}
		return fmt.Sprintf("eval %s %s: %d/%d episodes, %d successes", p.Tag, p.Phase, t.Done, t.Total, t.Successes)
	})
	if err != nil {
		return fmt.Errorf("evaluation %s failed: %w (details in the Temporal UI; fix the cause, then rerun the same command: no report was written)", id, err)
	}
	fmt.Fprintln(out)
	printEvalReport(out, rep, s.Bucket)
	return nil
}

// printEvalReport prints a report's table and says what kind of score it is.
func printEvalReport(out io.Writer, rep schemas.Report, bucket string) {
	l := schemas.Layout{Run: rep.Run}
	key := l.Report(rep.Tag)
	if rep.IsShard() {
		key = l.ShardReport(rep.Tag, rep.Shard, rep.Shards)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "task\tname\tsuite\tepisodes\tvalid\tinvalid\tlost\tsuccesses\tsuccess rate\t")
	row := func(id, name, suite string, r schemas.TaskResult) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t\n", id, name, suite, r.Episodes, r.Valid, r.Invalid, r.Lost, r.Successes, 100*r.SuccessRate)
	}
	for _, t := range rep.Tasks {
		row(strconv.Itoa(int(t.Task)), t.Name, t.Suite, t)
	}
	for _, su := range rep.Suites {
		row("suite", "", su.Suite, su)
	}
	row("all", "", "", rep.Overall)
	tw.Flush()
	took := ""
	if rep.StartedAtMS > 0 && rep.FinishedAtMS >= rep.StartedAtMS {
		took = ", took " + (time.Duration(rep.FinishedAtMS-rep.StartedAtMS) * time.Millisecond).Round(time.Second).String()
	}
	fmt.Fprintf(out, "weights %s (digest %.12s), %s, harness %s (config %s)%s\nreport: s3://%s/%s\n",
		rep.WeightsID, rep.WeightsDigest, rep.InitKey, rep.Harness, rep.Digest, took, bucket, key)
	if rep.Overall.Lost > 0 {
		fmt.Fprintf(out, "%d cells have no episode record (lost episodes; listed as missing in the report)\n", rep.Overall.Lost)
	}
	switch {
	case rep.IsShard():
		fmt.Fprintf(out, "SHARD %d/%d of tag %s: not a score of the split. Once all %d shards are done: starter report merge --run %s --tag %s\n",
			rep.Shard, rep.Shards, rep.Tag, rep.Shards, rep.Run, rep.Tag)
	case rep.InitKey == finalKey:
		fmt.Fprintf(out, "final score (eval_init_ids, all %d tasks): %.1f%% over %d valid episodes\n", len(rep.Tasks), 100*rep.Overall.SuccessRate, rep.Overall.Valid)
	default:
		fmt.Fprintf(out, "validation score (%s): %.1f%% over %d valid episodes — for choosing weights, not a final score\n", rep.InitKey, 100*rep.Overall.SuccessRate, rep.Overall.Valid)
	}
}
