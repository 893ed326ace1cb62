package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/roundhouse-rl/roundhouse/internal/chart"
	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

type compareFlags struct {
	run, a, b                         string
	weightsA, weightsB, config, chart string
	initKey                           string
	tasks                             bool
	vars                              []string
	heartbeat                         time.Duration
}

func compareCmd(e *connect.Endpoints) *cobra.Command {
	var f compareFlags
	cmd := &cobra.Command{
		Use:   "compare",
		Short: "Paired comparison of two evaluations of a run on the same cells: per task, McNemar test, discordant episodes",
		Long: `Compare two evaluations of a run that cover the same cells (tasks and init
states) with the same harness configuration. Each cell valid under both is
a pair. Prints per task and overall both success rates, B's gain over A,
the exact McNemar p-value on the discordant pairs, and the discordant
episodes grouped by how the losing side ended, with their artifacts;
stores the comparison as runs/<run>/eval/compare-<a>-vs-<b>.json, and with
--chart draws it (SVG or PNG, by the file's extension).

Name two reports (--a, --b): validation reports (val-r<R>; the final
validation is val-r<N+1>) or evaluations (starter eval --tag). Or name two
weights (--weights-a, --weights-b, with --config): a report of the run
that covers those weights on every cell of --init-key with the same
harness configuration is reused; otherwise compare evaluates the weights
as starter eval does, under the tag cmp-<weights>-<val|eval>-<digest>.

To compare the demo's starting weights with its final ones:
  starter compare --run demo --a val-r1 --b val-r3
  starter compare --config harnesses/minimal/harness.yaml --run demo --weights-a w0 --weights-b r2`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkCompareFlags(f, cmd.Flags().Changed); err != nil {
				return err
			}
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			var (
				c   schemas.Comparison
				err error
			)
			if f.weightsA != "" {
				c, err = compareWeights(ctx, out, e, f)
			} else {
				var s *store.Store
				if s, err = connect.Store(ctx, *e); err != nil {
					return err
				}
				c, err = compare(ctx, out, s, f.run, f.a, f.b, f.tasks)
			}
			if err != nil || f.chart == "" {
				return err
			}
			b, err := chart.Comparison(f.chart, c)
			if err != nil {
				return err
			}
			return writeChart(out, f.chart, b)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.run, "run", "", "run name")
	fl.StringVar(&f.a, "a", "", "the first report's tag (the baseline), e.g. val-r1")
	fl.StringVar(&f.b, "b", "", "the second report's tag, e.g. val-r3")
	fl.StringVar(&f.weightsA, "weights-a", "", "instead of --a: the first weights (the baseline), a weights id of the run (w0, r1, …) or a local weights directory")
	fl.StringVar(&f.weightsB, "weights-b", "", "instead of --b: the second weights")
	fl.StringVar(&f.config, "config", "", "with --weights-a/--weights-b: the run's harness file, e.g. harnesses/minimal/harness.yaml")
	fl.StringVar(&f.initKey, "init-key", valKey, "with --weights-a/--weights-b: the split to compare on, val_init_ids or eval_init_ids")
	fl.StringArrayVar(&f.vars, "var", nil, "with --weights-a/--weights-b: a harness var the run used, --var name=value (repeatable)")
	fl.DurationVar(&f.heartbeat, "heartbeat-timeout", 30*time.Second, "with --weights-a/--weights-b: how long a silent rollout worker keeps an episode of an evaluation before it is retried elsewhere")
	fl.StringVar(&f.chart, "chart", "", "also draw the comparison into this file, .svg or .png")
	fl.BoolVar(&f.tasks, "tasks", false, "print every task and discordant cell, however many tasks (past 50, the 10 of lowest p and the groups' counts)")
	return cmd
}

// weightsOnly are the flags of comparing weights; with --a/--b they would
// be ignored, so they are refused.
var weightsOnly = []string{"config", "init-key", "var", "heartbeat-timeout"}

// checkCompareFlags checks what can be checked without servers: one of the
// two ways of naming what to compare, and each one complete. changed says
// whether a flag was given.
func checkCompareFlags(f compareFlags, changed func(string) bool) error {
	if !runName.MatchString(f.run) {
		return fmt.Errorf("--run %q: give the name of a run (see `starter status`)", f.run)
	}
	if f.chart != "" {
		if err := checkChartFile(f.chart); err != nil {
			return err
		}
	}
	tags, ws := f.a != "" || f.b != "", f.weightsA != "" || f.weightsB != ""
	switch {
	case tags && ws:
		return errors.New("--a/--b with --weights-a/--weights-b: compare two reports (--a val-r1 --b val-r3) or two weights (--config FILE --weights-a w0 --weights-b r2), not both")
	case !tags && !ws:
		return fmt.Errorf("nothing to compare in run %s: name two report tags (--a val-r1 --b val-r3) or two weights (--config FILE --weights-a w0 --weights-b r2)", f.run)
	case tags:
		if f.a == "" || f.b == "" || f.a == f.b {
			return fmt.Errorf("--a %q --b %q: name two different report tags of run %s, e.g. --a val-r1 --b val-r3, or two weights with --config FILE --weights-a w0 --weights-b r2", f.a, f.b, f.run)
		}
		for _, n := range weightsOnly {
			if changed(n) {
				return fmt.Errorf("--%s goes with --weights-a/--weights-b: the reports --a and --b name are made already; drop --%s", n, n)
			}
		}
		return nil
	}
	if f.weightsA == "" || f.weightsB == "" || f.weightsA == f.weightsB {
		return fmt.Errorf("--weights-a %q --weights-b %q: name two different weights, ids of run %s (w0, r1, …) or local weights directories", f.weightsA, f.weightsB, f.run)
	}
	for _, w := range []struct{ flag, v string }{{"weights-a", f.weightsA}, {"weights-b", f.weightsB}} {
		if !runs.LocalWeights(w.v) && !runName.MatchString(w.v) {
			return fmt.Errorf("--%s %q is neither a local path nor a weights id: pass w0, r1, … or a weights directory", w.flag, w.v)
		}
	}
	if f.config == "" {
		return errors.New("--config is required with --weights-a/--weights-b: pass the run's harness file, e.g. --config harnesses/minimal/harness.yaml")
	}
	if f.initKey != valKey && f.initKey != finalKey {
		return fmt.Errorf("--init-key %q: use val_init_ids (validation) or eval_init_ids (final score)", f.initKey)
	}
	return nil
}

// compareWeights compares two weights on the cells of an init key: each
// side reuses a report of the run that stands for its evaluation, or is
// evaluated as `starter eval` does. Both evaluations run at once; then
// the two reports are compared as tags are.
func compareWeights(ctx context.Context, out io.Writer, e *connect.Endpoints, f compareFlags) (schemas.Comparison, error) {
	var ts [2]evalTarget
	names := [2]string{"A", "B"}
	for i, w := range []string{f.weightsA, f.weightsB} {
		t, err := resolveEval(evalFlags{config: f.config, run: f.run, weights: w, initKey: f.initKey, vars: f.vars, heartbeat: f.heartbeat}, runs.Shard{I: 0, N: 1})
		if err != nil {
			return schemas.Comparison{}, err
		}
		t.Flag = []string{"--weights-a", "--weights-b"}[i]
		ts[i] = t
	}
	if a, b := ts[0].WeightsID, ts[1].WeightsID; a == b {
		return schemas.Comparison{}, fmt.Errorf("--weights-a %s and --weights-b %s are the same weights (%s): compare two different ones", f.weightsA, f.weightsB, a)
	}
	h := ts[0].Harness
	cells, err := report.SplitCellIDs(h, f.initKey)
	if err != nil {
		return schemas.Comparison{}, err
	}

	c, s, err := connectBoth(ctx, e)
	if err != nil {
		return schemas.Comparison{}, err
	}
	defer c.Close()
	// Both sides are checked against the run before either evaluation starts.
	want := make([]report.Wanted, len(ts))
	for i := range ts {
		if _, err := checkRun(ctx, s, &ts[i]); err != nil {
			return schemas.Comparison{}, err
		}
		want[i] = report.Wanted{WeightsID: ts[i].WeightsID, WeightsDigest: ts[i].Digest, Config: h.Digest, InitKey: f.initKey, Cells: cells}
	}
	reuse, err := runs.ReuseReports(ctx, s, f.run, want)
	if err != nil {
		return schemas.Comparison{}, err
	}
	var tags, ids [2]string // the reports compared; the evaluations run for them
	for i, r := range reuse {
		name, wid := names[i], ts[i].WeightsID
		if r.Tag != "" {
			tags[i] = r.Tag
			fmt.Fprintf(out, "%s: weights %s — reusing report %s (%s, all %d cells, harness digest %s)\n", name, wid, r.Tag, f.initKey, len(cells), h.Digest)
			continue
		}
		ts[i].Tag = runs.CompareTag(wid, f.initKey, h.Digest)
		why := r.Why
		if why != "" {
			why = "; " + why
		}
		fmt.Fprintf(out, "%s: weights %s — no report covers its %d cells of %s with harness digest %s%s: evaluating under tag %s\n",
			name, wid, len(cells), f.initKey, h.Digest, why, ts[i].Tag)
	}
	for i := range ts {
		if tags[i] == "" {
			if ids[i], err = startEval(ctx, out, c, s, e, &ts[i]); err != nil {
				return schemas.Comparison{}, fmt.Errorf("evaluate weights %s (%s) for the comparison: %w", ts[i].WeightsID, names[i], err)
			}
		}
	}
	for i, id := range ids {
		if id == "" {
			continue
		}
		printEvalLinks(out, s, e, id, f.run)
		rep, err := waitEval(ctx, out, c, id)
		if err != nil {
			return schemas.Comparison{}, err
		}
		tags[i] = rep.Tag
		o := rep.Overall
		fmt.Fprintf(out, "%s: weights %s evaluated under tag %s: %s over %d valid of %d attempted episodes\n",
			names[i], rep.WeightsID, rep.Tag, stats.Rate(o.Successes, o.Valid), o.Valid, o.Attempted())
		if report.OverInvalidLimit(rep) {
			fmt.Fprintf(out, "!! %s: %.1f%% of its episodes were invalid or lost (%s), over the limit of %.0f%% (collect.max_invalid_share): the pairs leave those cells out\n",
				rep.Tag, 100*o.InvalidShare(), report.Causes(o), 100*report.InvalidLimit(rep))
		}
	}
	fmt.Fprintln(out)
	return compare(ctx, out, s, f.run, tags[0], tags[1], f.tasks)
}

// compare pairs two reports of a run, prints and stores the comparison;
// past report.ShortTasks tasks, every task and discordant cell only with
// tasks.
func compare(ctx context.Context, out io.Writer, s *store.Store, run, tagA, tagB string, tasks bool) (schemas.Comparison, error) {
	c, err := runs.Compare(ctx, s, run, tagA, tagB)
	if err != nil {
		return c, err
	}
	if tasks {
		report.WriteFullComparison(out, c)
	} else {
		report.WriteComparison(out, c)
	}
	key, err := runs.PutComparison(ctx, s, run, tagA, tagB, c)
	if err != nil {
		return c, err
	}
	fmt.Fprintf(out, "\nstored: s3://%s/%s\n", s.Bucket, key)
	return c, nil
}
