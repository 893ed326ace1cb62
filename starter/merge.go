package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/store"
)

// reportMergeCmd is `starter report merge`: the full report of a sharded
// evaluation, from all its shard reports.
func reportMergeCmd(e *connect.Endpoints) *cobra.Command {
	var run, tag string
	var tasks bool
	cmd := &cobra.Command{
		Use:   "merge",
		Short: "Build a sharded evaluation's eval/<tag>/report.json from all its shard reports",
		Long: `Build a sharded evaluation's eval/<tag>/report.json from all its shard reports.

Refuses, naming what is missing or conflicting, unless all n shards of one
evaluation are stored (same weights, init key and harness; disjoint cells
covering the split). An existing report.json is never overwritten. Beside
it go report.txt and tasks.csv, every task's row.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !runName.MatchString(run) {
				return fmt.Errorf("--run %q: give the name of a run", run)
			}
			if !runName.MatchString(tag) {
				return fmt.Errorf("--tag %q: give the tag of a sharded evaluation", tag)
			}
			s, err := connect.Store(cmd.Context(), *e)
			if err != nil {
				return err
			}
			return mergeReports(cmd.Context(), cmd.OutOrStdout(), s, run, tag, tasks)
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "run name")
	cmd.Flags().StringVar(&tag, "tag", "", "tag of the sharded evaluation")
	cmd.Flags().BoolVar(&tasks, "tasks", false, "print every task's row, however many tasks")
	return cmd
}

// mergeReports merges the tag's shard reports (runs.MergeTag) and prints
// the merged report (every task's row with tasks).
func mergeReports(ctx context.Context, out io.Writer, s *store.Store, run, tag string, tasks bool) error {
	m, err := runs.MergeTag(ctx, s, run, tag)
	if err != nil {
		return err
	}
	if m.Already {
		fmt.Fprintf(out, "tag %s of run %s is merged already\n\n", tag, run)
	} else {
		fmt.Fprintf(out, "merged %d shards of tag %s (%s)\n\n", len(m.Keys), tag, strings.Join(m.Keys, ", "))
	}
	return writeReport(out, m.Report, s.Bucket, tasks)
}
