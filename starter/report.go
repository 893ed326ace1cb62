package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func reportCmd(e *connect.Endpoints) *cobra.Command {
	var run string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Per-round diagnostics of a run, from its summaries in S3",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !runName.MatchString(run) {
				return fmt.Errorf("--run %q: give the name of a run", run)
			}
			s, err := connect.Store(cmd.Context(), *e)
			if err != nil {
				return err
			}
			l := schemas.Layout{Run: run}
			objs, err := s.List(cmd.Context(), l.Prefix()+"rounds/")
			if err != nil {
				return err
			}
			var sums []schemas.RoundSummary
			for _, o := range objs {
				if !strings.HasSuffix(o.Key, "/summary.json") {
					continue
				}
				b, err := s.Get(cmd.Context(), o.Key)
				if err != nil {
					return err
				}
				var r schemas.RoundSummary
				if err := json.Unmarshal(b, &r); err != nil {
					return fmt.Errorf("%s: %w", o.Key, err)
				}
				sums = append(sums, r)
			}
			if len(sums) == 0 {
				return fmt.Errorf("run %s has no finished round under s3://%s/%srounds/", run, s.Bucket, l.Prefix())
			}
			sort.Slice(sums, func(i, j int) bool { return sums[i].Round < sums[j].Round })
			var st schemas.State
			if b, err := s.Get(cmd.Context(), l.State()); err == nil {
				_ = json.Unmarshal(b, &st)
			}
			printDiagnostics(cmd.OutOrStdout(), sums, st)
			return nil
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "run name")
	return cmd
}

// printDiagnostics is the table a user reads when training does or does
// not move: signal, validity, selection, token capture, trainer.
func printDiagnostics(out io.Writer, sums []schemas.RoundSummary, st schemas.State) {
	printSummaries(out, sums)
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tgroups w/o signal\tinvalid by cause\tzero-weight\ttoken capture\tlogprob mismatch\tloss\tclip frac\tsteps\t")
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
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%.2g\t%.4f\t%.3f\t%d\t\n", r.Round, r.Groups-r.GroupsWithSignal, causes,
			r.ZeroWeightSamples, capture, r.Trainer.LogprobMismatch, r.Trainer.Loss, r.Trainer.ClipFraction, r.Trainer.Steps)
	}
	tw.Flush()
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
