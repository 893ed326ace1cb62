package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

func compareCmd(e *connect.Endpoints) *cobra.Command {
	var run, a, b string
	cmd := &cobra.Command{
		Use:   "compare",
		Short: "Paired comparison of two evaluations of a run on the same cells: per task, McNemar test, discordant episodes",
		Long: `Compare two reports of a run that cover the same cells (tasks and init
states) with the same harness configuration: validation reports (val-r<R>;
the final validation is val-r<N+1>) or evaluations (starter eval --tag).
Each cell valid under both is a pair. Prints per task and overall both
success rates, B's gain over A, the exact McNemar p-value on the discordant
pairs, and the discordant episodes grouped by how the losing side ended,
with their artifacts; stores the comparison as
runs/<run>/eval/compare-<a>-vs-<b>.json.

To compare the demo's starting weights with its final ones:
  starter compare --run demo --a val-r1 --b val-r3`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !runName.MatchString(run) {
				return fmt.Errorf("--run %q: give the name of a run (see `starter status`)", run)
			}
			if a == "" || b == "" || a == b {
				return fmt.Errorf("--a %q --b %q: name two different report tags of run %s, e.g. --a val-r1 --b val-r3", a, b, run)
			}
			s, err := connect.Store(cmd.Context(), *e)
			if err != nil {
				return err
			}
			return compare(cmd.Context(), cmd.OutOrStdout(), s, run, a, b)
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "run name")
	cmd.Flags().StringVar(&a, "a", "", "the first report's tag (the baseline), e.g. val-r1")
	cmd.Flags().StringVar(&b, "b", "", "the second report's tag, e.g. val-r3")
	return cmd
}

func compare(ctx context.Context, out io.Writer, s *store.Store, run, tagA, tagB string) error {
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
		phase := api.EvalPhase(tag)
		if strings.HasPrefix(tag, "val-r") {
			phase = schemas.PhaseVal
		}
		eps, err := store.ReadTable(ctx, s, l.EpisodesDir(rep.Round, phase), func(e schemas.Episode) string { return e.EpisodeID })
		if err != nil {
			return rep, nil, fmt.Errorf("episodes of report %s: %w", tag, err)
		}
		return rep, eps, nil
	}
	repA, epsA, err := load(tagA)
	if err != nil {
		return err
	}
	repB, epsB, err := load(tagB)
	if err != nil {
		return err
	}
	c, err := report.Compare(repA, repB, epsA, epsB)
	if err != nil {
		return err
	}
	printComparison(out, c)
	key := l.Comparison(tagA, tagB)
	if err := store.PutJSON(ctx, s, key, c); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nstored: s3://%s/%s\n", s.Bucket, key)
	return nil
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
