package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// reportMergeCmd is `starter report merge`: the full report of a sharded
// evaluation, from all its shard reports.
func reportMergeCmd(e *connect.Endpoints) *cobra.Command {
	var run, tag string
	cmd := &cobra.Command{
		Use:   "merge",
		Short: "Build a sharded evaluation's eval/<tag>/report.json from all its shard reports",
		Long: `Build a sharded evaluation's eval/<tag>/report.json from all its shard reports.

Refuses, naming what is missing or conflicting, unless all n shards of one
evaluation are stored (same weights, init key and harness; disjoint cells
covering the split). An existing report.json is never overwritten.`,
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
			return mergeReports(cmd.Context(), cmd.OutOrStdout(), s, run, tag)
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "run name")
	cmd.Flags().StringVar(&tag, "tag", "", "tag of the sharded evaluation")
	return cmd
}

// mergeReports checks the tag's shard reports and writes the merged
// report; nothing is written unless every check passes.
func mergeReports(ctx context.Context, out io.Writer, s *store.Store, run, tag string) error {
	l := schemas.Layout{Run: run}
	st, err := readTag(ctx, s, l, tag)
	if err != nil {
		return err
	}
	if len(st.shards) == 0 {
		ok, err := s.Exists(ctx, l.Harness())
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("unknown run %s (no s3://%s/%s): check --run and --bucket", run, s.Bucket, l.Harness())
		}
		return fmt.Errorf("tag %s of run %s has no shard reports under s3://%s/%s: evaluate with `starter eval --run %s --tag %s --shard i/n …` first", tag, run, s.Bucket, l.ShardsDir(tag), run, tag)
	}
	reps := make([]schemas.Report, len(st.shards))
	keys := make([]string, len(st.shards))
	for i, f := range st.shards {
		reps[i], keys[i] = f.rep, f.key
		if f.rep.Shard != f.i || f.rep.Shards != f.n || f.rep.Tag != tag {
			return fmt.Errorf("%s says it is shard %d/%d of tag %s: the file was moved or edited; rerun that shard with --replace-tag", f.key, f.rep.Shard, f.rep.Shards, f.rep.Tag)
		}
	}
	merged, err := report.MergeShards(reps, keys)
	if err != nil {
		return fmt.Errorf("merge tag %s of run %s: %w", tag, run, err)
	}
	if st.full != "" {
		var old schemas.Report
		if err := getJSON(ctx, s, st.full, &old); err != nil {
			return err
		}
		if sameSet(old.MergedFrom, merged.MergedFrom) && old.WeightsDigest == merged.WeightsDigest && old.Overall == merged.Overall {
			fmt.Fprintf(out, "tag %s of run %s is merged already\n\n", tag, run)
			printEvalReport(out, old, s.Bucket)
			return nil
		}
		return fmt.Errorf("s3://%s/%s exists and is not the merge of these shards: a report is never overwritten; evaluate under a new --tag", s.Bucket, st.full)
	}
	if err := putJSON(ctx, s, l.Report(tag), merged); err != nil {
		return err
	}
	fmt.Fprintf(out, "merged %d shards of tag %s (%s)\n\n", len(keys), tag, strings.Join(keys, ", "))
	printEvalReport(out, merged, s.Bucket)
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
