package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// reportShowCmd is `starter report show`: a stored report, printed as
// `starter eval` printed it, or with every task's row (--tasks).
func reportShowCmd(e *connect.Endpoints) *cobra.Command {
	var run, tag, shard string
	var tasks bool
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print a stored evaluation report (eval/<tag>/report.json, or a shard's); --tasks prints every task's row",
		Long: `Print a stored evaluation report as starter eval printed it: past 50 tasks,
the 10 worst tasks, the suites and the overall, and where every task's row
is (report.txt and tasks.csv beside report.json). --tasks prints every
task's row instead, however many.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !runName.MatchString(run) {
				return fmt.Errorf("--run %q: give the name of a run (see `starter status`)", run)
			}
			if !runName.MatchString(tag) {
				return fmt.Errorf("--tag %q: give a report's tag, e.g. --tag val-r1", tag)
			}
			sh, err := runs.ParseShard(shard)
			if err != nil {
				return err
			}
			ro := *e
			ro.ReadOnly = true // showing a report only reads
			s, err := connect.Store(cmd.Context(), ro)
			if err != nil {
				return err
			}
			return showStoredReport(cmd.Context(), cmd.OutOrStdout(), s, run, tag, sh, tasks)
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "run name")
	cmd.Flags().StringVar(&tag, "tag", "", "the report's tag, e.g. val-r1 or a starter eval --tag")
	cmd.Flags().StringVar(&shard, "shard", "", "a shard's report, i/n, instead of the full one")
	cmd.Flags().BoolVar(&tasks, "tasks", false, "print every task's row, however many tasks")
	return cmd
}

// showStoredReport prints the tag's full report, or shard sh's when it
// names one of several; a tag without that report is an error saying
// what the tag does hold.
func showStoredReport(ctx context.Context, out io.Writer, s *store.Store, run, tag string, sh runs.Shard, tasks bool) error {
	l := schemas.Layout{Run: run}
	key := l.Report(tag)
	if sh.N > 1 {
		key = l.ShardReport(tag, sh.I, sh.N)
	}
	ok, err := s.Exists(ctx, key)
	if err != nil {
		return err
	}
	if !ok {
		st, err := runs.ReadTag(ctx, s, run, tag)
		if err != nil {
			return err
		}
		switch {
		case sh.N == 1 && len(st.Shards) > 0:
			return fmt.Errorf("tag %s of run %s has %d shard reports and no merged report (s3://%s/%s): `starter report merge --run %s --tag %s` once all are done, or --shard %d/%d for one",
				tag, run, len(st.Shards), s.Bucket, key, run, tag, st.Shards[0].I, st.Shards[0].N)
		case st.Full != "":
			return fmt.Errorf("no s3://%s/%s: tag %s of run %s is not sharded; drop --shard", s.Bucket, key, tag, run)
		}
		return fmt.Errorf("no report s3://%s/%s: check --run and --tag (a run's tags are under s3://%s/%s)", s.Bucket, key, s.Bucket, l.Evals())
	}
	var rep schemas.Report
	if err := store.GetJSON(ctx, s, key, &rep); err != nil {
		return err
	}
	return writeReport(out, rep, s.Bucket, tasks)
}

// writeReport prints a report by the rule of report.WriteTable, or with
// every task's row (tasks).
func writeReport(out io.Writer, rep schemas.Report, bucket string, tasks bool) error {
	if tasks {
		return report.WriteFullTable(out, rep, bucket)
	}
	return report.WriteTable(out, rep, bucket)
}
