package runs

import (
	"context"
	"fmt"

	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Compare pairs two full reports of a run (report.Compare), reading each
// report and its episodes, which lie in the phase its tag names.
func Compare(ctx context.Context, s *store.Store, run, tagA, tagB string) (schemas.Comparison, error) {
	repA, epsA, err := readCompared(ctx, s, run, tagA)
	if err != nil {
		return schemas.Comparison{}, err
	}
	repB, epsB, err := readCompared(ctx, s, run, tagB)
	if err != nil {
		return schemas.Comparison{}, err
	}
	return report.Compare(repA, repB, epsA, epsB)
}

// readCompared reads one side of a comparison: a full report, never a
// shard, and the episodes it counted.
func readCompared(ctx context.Context, s *store.Store, run, tag string) (schemas.Report, []schemas.Episode, error) {
	l := schemas.Layout{Run: run}
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

// PutComparison stores the comparison of tags a and b of a run next to
// its reports and returns the key.
func PutComparison(ctx context.Context, s *store.Store, run, a, b string, c schemas.Comparison) (string, error) {
	key := schemas.Layout{Run: run}.Comparison(a, b)
	return key, store.PutJSON(ctx, s, key, c)
}

// Reuse is what stands for one evaluation a comparison of weights needs:
// the tag of a stored report, or "" and why no report of those weights
// would do ("" when there is none).
type Reuse struct{ Tag, Why string }

// ReuseReports finds, for each evaluation wanted, a full report of the
// run that stands for it (report.Reusable), so compare evaluates only the
// weights no report covers.
func ReuseReports(ctx context.Context, s *store.Store, run string, want []report.Wanted) ([]Reuse, error) {
	reps, err := Reports(ctx, s, run)
	if err != nil {
		return nil, err
	}
	out := make([]Reuse, len(want))
	for i, w := range want {
		rep, ok, why := report.Reusable(reps, w)
		if ok {
			out[i].Tag = rep.Tag
		} else {
			out[i].Why = why
		}
	}
	return out, nil
}

// CompareTag is the tag compare evaluates weights under: named by
// weights, split and harness digest, so a rerun finds (or joins) its own
// evaluation, and one under another harness configuration never collides
// with it.
func CompareTag(weightsID, initKey, config string) string {
	split := "val"
	if initKey == report.FinalKey {
		split = "eval"
	}
	return fmt.Sprintf("cmp-%s-%s-%.8s", weightsID, split, config)
}
