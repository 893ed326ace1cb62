package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/roundhouse-rl/roundhouse/internal/chart"
	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func reportCmd(e *connect.Endpoints) *cobra.Command {
	var run, chartFile string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Per-round diagnostics of a run and a success-per-round chart, from its data in S3",
		Long: `Per-round diagnostics of a run, from its round summaries in S3, and its
success per round counted from the episode Parquet files: the collection's
success rate and the validation's (val-r<R>, and the final validation after
the last round), as a table and a chart (SVG or PNG, by the file's extension).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !runName.MatchString(run) {
				return fmt.Errorf("--run %q: give the name of a run (see `starter status`)", run)
			}
			if chartFile == "" {
				chartFile = "runs-" + run + "-success.svg"
			}
			if err := checkChartFile(chartFile); err != nil {
				return err
			}
			ro := *e
			ro.ReadOnly = true // a report only reads
			s, err := connect.Store(cmd.Context(), ro)
			if err != nil {
				return err
			}
			return showReport(cmd.Context(), cmd.OutOrStdout(), s, run, chartFile)
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "run name")
	cmd.Flags().StringVar(&chartFile, "chart", "", "where to write the success chart, .svg or .png (default runs-<run>-success.svg)")
	cmd.AddCommand(reportMergeCmd(e))
	return cmd
}

func showReport(ctx context.Context, out io.Writer, s *store.Store, run, chartFile string) error {
	l := schemas.Layout{Run: run}
	hist, err := runs.ReadHistory(ctx, s, run)
	if err != nil {
		return err
	}
	sums, st := hist.Summaries, hist.State
	rs, err := runs.Success(ctx, s, run)
	if err != nil {
		return err
	}
	if len(sums) == 0 && len(rs) == 0 {
		return fmt.Errorf("run %s has no finished round and no episode yet under s3://%s/%s: wait for its first episodes (`starter status --run %s`)", run, s.Bucket, l.Prefix(), run)
	}
	if len(sums) > 0 {
		printDiagnostics(out, sums, st)
	} else {
		fmt.Fprintf(out, "run %s has no finished round yet (no summary under s3://%s/%srounds/)\n", run, s.Bucket, l.Prefix())
	}
	if len(rs) == 0 {
		return nil
	}
	// Round N+1 holds the final validation once the run has done its N rounds.
	var final int32
	if st.Rounds > 0 && st.RoundsDone == st.Rounds {
		final = st.Rounds + 1
	}
	vals := valResults(ctx, s, run, rs, sums)
	addLost(rs, sums, vals)
	fmt.Fprintln(out)
	printSuccess(out, rs, final)
	if v, ok := vals[final]; ok && final > 0 {
		if w := finalValWarning(v, lastLimit(sums)); w != "" {
			fmt.Fprintln(out, w)
		}
	}
	b, err := chart.Success(chartFile, run, rs, final)
	if err != nil {
		return err
	}
	return writeChart(out, chartFile, b)
}

// printDiagnostics is the table a user reads when training does or does
// not move: signal, validity, selection, token capture, trainer.
func printDiagnostics(out io.Writer, sums []schemas.RoundSummary, st schemas.State) {
	printSummaries(out, sums)
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tgroups w/o signal\tinvalid by cause\tzero-weight\ttoken capture\timages\tlogprob Δ mean\tmax\tdrift share\tloss\tclip frac\tsteps\t")
	for _, r := range sums {
		causes := "-"
		if len(r.InvalidByCause) > 0 {
			var parts []string
			for k, v := range r.InvalidByCause {
				parts = append(parts, fmt.Sprintf("%s:%d", k, v))
			}
			sort.Strings(parts)
			causes = strings.Join(parts, " ")
		}
		capture := "-"
		if r.Calls > 0 {
			capture = fmt.Sprintf("%.1f%%", 100*float64(r.Calls-r.UntrainableCalls)/float64(r.Calls))
		}
		// Distinct images the batch took to the trainer, and their uses.
		images := "-"
		if r.ImageRefs > 0 {
			images = fmt.Sprintf("%d (%d uses)", r.Images, r.ImageRefs)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\t%.2g\t%.2g\t%.1f%%\t%.4f\t%.3f\t%d\t\n", r.Round, r.Groups-r.GroupsWithSignal, causes,
			r.ZeroWeightSamples, capture, images, r.Trainer.LogprobMismatch, r.Trainer.LogprobMismatchMax, 100*r.Trainer.DriftShare,
			r.Trainer.Loss, r.Trainer.ClipFraction, r.Trainer.Steps)
	}
	tw.Flush()
	// How the collection's task failures ended: a planner that loops to its
	// turn budget, one that claims success early and one that errors call
	// for different fixes.
	var reasons []string
	for _, r := range sums {
		if len(r.TaskFailuresByReason) == 0 {
			continue
		}
		var parts []string
		for k, v := range r.TaskFailuresByReason {
			parts = append(parts, fmt.Sprintf("%s:%d", k, v))
		}
		sort.Strings(parts)
		reasons = append(reasons, fmt.Sprintf("r%d %s", r.Round, strings.Join(parts, " ")))
	}
	if len(reasons) > 0 {
		fmt.Fprintf(out, "\ntask failures by reason: %s\n", strings.Join(reasons, " · "))
	}
	var trend []string
	for _, r := range sums {
		if r.ValSuccess >= 0 {
			trend = append(trend, fmt.Sprintf("%.1f%%", 100*r.ValSuccess))
		}
	}
	if st.FinalValSuccess >= 0 && st.RoundsDone == st.Rounds && st.Rounds > 0 {
		trend = append(trend, fmt.Sprintf("%.1f%% (final)", 100*st.FinalValSuccess))
	}
	if len(trend) > 0 {
		fmt.Fprintf(out, "\nvalidation success: %s\n", strings.Join(trend, " → "))
	}
}

// valResults is each validation's overall result, from the round's
// summary or else its report (val-r<R>, as for the final validation);
// rounds with neither are left out: their lost episodes stay unknown.
func valResults(ctx context.Context, s *store.Store, run string, rs []runs.RoundSuccess, sums []schemas.RoundSummary) map[int32]schemas.TaskResult {
	out := map[int32]schemas.TaskResult{}
	for _, r := range sums {
		if r.Val != nil {
			out[r.Round] = *r.Val
		}
	}
	l := schemas.Layout{Run: run}
	for _, r := range rs {
		if _, ok := out[r.Round]; ok || r.Val.Episodes == 0 {
			continue
		}
		var rep schemas.Report
		if err := store.GetJSON(ctx, s, l.Report(schemas.ValTag(r.Round)), &rep); err == nil {
			out[r.Round] = rep.Overall
		}
	}
	return out
}

// addLost adds the lost episodes, which have no row to count, to the
// success counts: the collection's from the round summaries, the
// validations' from their results.
func addLost(rs []runs.RoundSuccess, sums []schemas.RoundSummary, vals map[int32]schemas.TaskResult) {
	lost := map[int32]int{}
	for _, r := range sums {
		lost[r.Round] = r.InvalidByCause["lost"]
	}
	for i := range rs {
		rs[i].Train.Lost = lost[rs[i].Round]
		rs[i].Val.Lost = vals[rs[i].Round].Lost
	}
}

// lastLimit is the invalid limit of the run's last round (0: unknown).
func lastLimit(sums []schemas.RoundSummary) float64 {
	if len(sums) == 0 {
		return 0
	}
	return sums[len(sums)-1].MaxInvalidShare
}

// finalValWarning is the loud line for a final validation whose invalid
// and lost episodes exceed the limit (0: the default), "" otherwise. The
// final validation has no round summary to carry it.
func finalValWarning(v schemas.TaskResult, limit float64) string {
	rep := schemas.Report{Overall: v, MaxInvalidShare: limit}
	if !report.OverInvalidLimit(rep) {
		return ""
	}
	return fmt.Sprintf("!! final validation: %d of %d attempted episodes invalid or lost (%s), over the limit of %.0f%% (collect.max_invalid_share): its success speaks for the episodes that ran, not for the tasks",
		v.Invalid+v.Lost, v.Attempted(), report.Causes(v), 100*report.InvalidLimit(rep))
}
