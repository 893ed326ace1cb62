package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
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
				c, err = compare(ctx, out, s, f.run, f.a, f.b)
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
		if !localWeights(w.v) && !runName.MatchString(w.v) {
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

// cmpTag is the tag compare evaluates weights under: named by weights,
// split and harness digest, so a rerun finds (or joins) its own
// evaluation, and one under another harness configuration never collides
// with it.
func cmpTag(weightsID, initKey, config string) string {
	split := "val"
	if initKey == finalKey {
		split = "eval"
	}
	return fmt.Sprintf("cmp-%s-%s-%.8s", weightsID, split, config)
}

// compareWeights compares two weights on the cells of an init key: each
// side reuses a report of the run that stands for its evaluation, or is
// evaluated as `starter eval` does. Both evaluations run at once; then
// the two reports are compared as tags are.
func compareWeights(ctx context.Context, out io.Writer, e *connect.Endpoints, f compareFlags) (schemas.Comparison, error) {
	type side struct {
		name string
		t    evalTarget
		tag  string // the report compared; "" until known
		id   string // the evaluation workflow, when one runs
	}
	var sides [2]side
	for i, w := range []string{f.weightsA, f.weightsB} {
		t, err := resolveEval(evalFlags{config: f.config, run: f.run, weights: w, initKey: f.initKey, vars: f.vars, heartbeat: f.heartbeat}, runs.Shard{I: 0, N: 1})
		if err != nil {
			return schemas.Comparison{}, err
		}
		t.flag = []string{"--weights-a", "--weights-b"}[i]
		sides[i] = side{name: string(rune('A' + i)), t: t}
	}
	if a, b := sides[0].t.wid, sides[1].t.wid; a == b {
		return schemas.Comparison{}, fmt.Errorf("--weights-a %s and --weights-b %s are the same weights (%s): compare two different ones", f.weightsA, f.weightsB, a)
	}
	h := sides[0].t.h
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
	for i := range sides {
		if _, err := checkRun(ctx, s, &sides[i].t); err != nil {
			return schemas.Comparison{}, err
		}
	}
	reps, err := runs.Reports(ctx, s, f.run)
	if err != nil {
		return schemas.Comparison{}, err
	}
	for i := range sides {
		sd := &sides[i]
		rep, ok, why := report.Reusable(reps, report.Wanted{WeightsID: sd.t.wid, WeightsDigest: sd.t.digest, Config: h.Digest, InitKey: f.initKey, Cells: cells})
		if ok {
			sd.tag = rep.Tag
			fmt.Fprintf(out, "%s: weights %s — reusing report %s (%s, all %d cells, harness digest %s)\n", sd.name, sd.t.wid, rep.Tag, f.initKey, len(cells), h.Digest)
			continue
		}
		sd.t.f.tag = cmpTag(sd.t.wid, f.initKey, h.Digest)
		if why != "" {
			why = "; " + why
		}
		fmt.Fprintf(out, "%s: weights %s — no report covers its %d cells of %s with harness digest %s%s: evaluating under tag %s\n",
			sd.name, sd.t.wid, len(cells), f.initKey, h.Digest, why, sd.t.f.tag)
	}
	for i := range sides {
		if sd := &sides[i]; sd.tag == "" {
			if sd.id, err = startEval(ctx, out, c, s, e, &sd.t); err != nil {
				return schemas.Comparison{}, fmt.Errorf("evaluate weights %s (%s) for the comparison: %w", sd.t.wid, sd.name, err)
			}
		}
	}
	for i := range sides {
		sd := &sides[i]
		if sd.id == "" {
			continue
		}
		printEvalLinks(out, s, e, sd.id, f.run)
		rep, err := waitEval(ctx, out, c, sd.id)
		if err != nil {
			return schemas.Comparison{}, err
		}
		sd.tag = rep.Tag
		o := rep.Overall
		fmt.Fprintf(out, "%s: weights %s evaluated under tag %s: %s over %d valid of %d attempted episodes\n",
			sd.name, rep.WeightsID, rep.Tag, stats.Rate(o.Successes, o.Valid), o.Valid, o.Attempted())
		if report.OverInvalidLimit(rep) {
			fmt.Fprintf(out, "!! %s: %.1f%% of its episodes were invalid or lost (%s), over the limit of %.0f%% (collect.max_invalid_share): the pairs leave those cells out\n",
				rep.Tag, 100*o.InvalidShare(), report.Causes(o), 100*report.InvalidLimit(rep))
		}
	}
	fmt.Fprintln(out)
	return compare(ctx, out, s, f.run, sides[0].tag, sides[1].tag)
}

// compare pairs two reports of a run, prints and stores the comparison.
func compare(ctx context.Context, out io.Writer, s *store.Store, run, tagA, tagB string) (schemas.Comparison, error) {
	l := schemas.Layout{Run: run}
	load := func(tag string) (schemas.Report, []schemas.Episode, error) {
		var rep schemas.Report
		if err := store.GetJSON(ctx, s, l.Report(tag), &rep); err != nil {
			if store.IsNotFound(err) {
				return rep, nil, fmt.Errorf("run %s has no report %s (s3://%s/%s): see its reports with `starter report --run %s`, or evaluate with `starter eval --tag %s`",
					run, tag, s.Bucket, l.Report(tag), run, tag)
			}
			return rep, nil, err
		}
		if rep.IsShard() {
			return rep, nil, fmt.Errorf("report %s is one shard: merge the shards first (`starter report merge --run %s --tag %s`)", tag, run, tag)
		}
		eps, err := store.ReadTable(ctx, s, l.EpisodesDir(rep.Round, schemas.TagPhase(tag)), func(e schemas.Episode) string { return e.EpisodeID })
		if err != nil {
			return rep, nil, fmt.Errorf("episodes of report %s: %w", tag, err)
		}
		return rep, eps, nil
	}
	repA, epsA, err := load(tagA)
	if err != nil {
		return schemas.Comparison{}, err
	}
	repB, epsB, err := load(tagB)
	if err != nil {
		return schemas.Comparison{}, err
	}
	c, err := report.Compare(repA, repB, epsA, epsB)
	if err != nil {
		return c, err
	}
	printComparison(out, c)
	key := l.Comparison(tagA, tagB)
	if err := store.PutJSON(ctx, s, key, c); err != nil {
		return c, err
	}
	fmt.Fprintf(out, "\nstored: s3://%s/%s\n", s.Bucket, key)
	return c, nil
}

func printComparison(out io.Writer, c schemas.Comparison) {
	fmt.Fprintf(out, "A = %s (weights %s), B = %s (weights %s); pairs are cells valid under both (%d left out)\n\n",
		c.A, c.WeightsA, c.B, c.WeightsB, c.Unpaired)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "task\tname\tpairs\tA success [95% CI]\tB success [95% CI]\tB − A\tonly A\tonly B\tMcNemar p\t")
	row := func(r schemas.PairedResult, task, name string) {
		pct := func(k int) string { return fmt.Sprintf("%d: %s", k, stats.Rate(k, r.Pairs)) }
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%+.1f pp\t%d\t%d\t%.3g\t\n", task, name, r.Pairs, pct(r.SuccessA), pct(r.SuccessB),
			100*r.Difference, r.OnlyA, r.OnlyB, r.PValue)
	}
	for _, r := range c.Tasks {
		row(r, fmt.Sprint(r.Task), r.Name)
	}
	for _, r := range c.Suites {
		row(r, "suite", r.Suite)
	}
	row(c.Overall, "all", "")
	tw.Flush()
	if len(c.Discordant) == 0 {
		fmt.Fprintln(out, "\nno discordant cell: A and B succeeded on exactly the same pairs")
		return
	}
	// Grouped by how the losing side ended: where one weights fails and
	// the other does not is what a person looks at first.
	type group struct{ winner, termination string }
	groups := map[group][]schemas.DiscordantCell{}
	for _, d := range c.Discordant {
		loser := d.A
		if d.Winner == "a" {
			loser = d.B
		}
		g := group{d.Winner, loser.Termination}
		groups[g] = append(groups[g], d)
	}
	keys := make([]group, 0, len(groups))
	for g := range groups {
		keys = append(keys, g)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].winner != keys[j].winner {
			return keys[i].winner > keys[j].winner // B's wins first
		}
		return len(groups[keys[i]]) > len(groups[keys[j]])
	})
	fmt.Fprintf(out, "\ndiscordant cells: %d\n", len(c.Discordant))
	for _, g := range keys {
		won, lost := "B", "A"
		if g.winner == "a" {
			won, lost = "A", "B"
		}
		fmt.Fprintf(out, "\n%s solved, %s did not (%s ended: %s): %d\n", won, lost, lost, g.termination, len(groups[g]))
		for _, d := range groups[g] {
			fmt.Fprintf(out, "  task %d init %d  A %s %s\n                B %s %s\n", d.Task, d.InitID, d.A.EpisodeID, d.A.Artifacts, d.B.EpisodeID, d.B.Artifacts)
		}
	}
}
