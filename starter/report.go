package main

import (
	"context"
	"fmt"
	"io"

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
	cmd.AddCommand(reportMergeCmd(e), reportShowCmd(e))
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
	runs.WriteSuccess(out, r.Success, r.Final)
	if r.FinalVal != nil {
		if w := report.FinalValWarning(*r.FinalVal, report.LastLimit(r.Summaries)); w != "" {
			fmt.Fprintln(out, w)
		}
	}
	b, err := chart.Success(chartFile, run, r.Success, r.Final)
	if err != nil {
		return err
	}
	return writeChart(out, chartFile, b)
}

// printDiagnostics is the rounds' table (as `starter status --run` prints
// it), then what a user reads when training does or does not move.
func printDiagnostics(out io.Writer, sums []schemas.RoundSummary, st schemas.State) {
	report.WriteRounds(out, sums)
	fmt.Fprintln(out)
	report.WriteDiagnostics(out, sums, st)
}
