package main

import (
	"context"
	"fmt"
	"io"
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
	r, err := runs.ReadRounds(ctx, s, run)
	if err != nil {
		return err
	}
	if len(r.Summaries) > 0 {
		printDiagnostics(out, r.Summaries, r.State)
	} else {
		l := schemas.Layout{Run: run}
		fmt.Fprintf(out, "run %s has no finished round yet (no summary under s3://%s/%srounds/)\n", run, s.Bucket, l.Prefix())
	}
	if len(r.Success) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	printSuccess(out, r.Success, r.Final)
	if r.FinalVal != nil {
		if w := finalValWarning(*r.FinalVal, lastLimit(r.Summaries)); w != "" {
			fmt.Fprintln(out, w)
		}
	}
	b, err := chart.Success(chartFile, run, r.Success, r.Final)
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
		capture := "-"
		if r.Calls > 0 {
			capture = fmt.Sprintf("%.1f%%", 100*float64(r.Calls-r.UntrainableCalls)/float64(r.Calls))
		}
		// Distinct images the batch took to the trainer, and their uses.
		images := "-"
		if r.ImageRefs > 0 {
			images = fmt.Sprintf("%d (%d uses)", r.Images, r.ImageRefs)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\t%.2g\t%.2g\t%.1f%%\t%.4f\t%.3f\t%d\t\n", r.Round, r.Groups-r.GroupsWithSignal,
			report.CauseList(r.InvalidByCause), r.ZeroWeightSamples, capture, images, r.Trainer.LogprobMismatch, r.Trainer.LogprobMismatchMax,
			100*r.Trainer.DriftShare, r.Trainer.Loss, r.Trainer.ClipFraction, r.Trainer.Steps)
	}
	tw.Flush()
	// How the collection's task failures ended: a planner that loops to its
	// turn budget, one that claims success early and one that errors call
	// for different fixes.
	var reasons []string
	for _, r := range sums {
		if len(r.TaskFailuresByReason) > 0 {
			reasons = append(reasons, fmt.Sprintf("r%d %s", r.Round, report.CauseList(r.TaskFailuresByReason)))
		}
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
