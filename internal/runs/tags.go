package runs

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Shard is shard I of N of a split's cells; N == 1 is the whole split.
type Shard struct{ I, N int }

func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.I, s.N) }

// ParseShard reads --shard i/n; "" is the whole split.
func ParseShard(s string) (Shard, error) {
	if s == "" {
		return Shard{I: 0, N: 1}, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(strings.TrimSpace(a))
	n, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return Shard{}, fmt.Errorf("--shard %q: write i/n with 0 ≤ i < n, e.g. --shard 0/8 for the first of 8 shards (omit it for the whole split)", s)
	}
	return Shard{I: i, N: n}, nil
}

// ShardFile is a stored shard report of a tag.
type ShardFile struct {
	Key  string
	I, N int
	Rep  schemas.Report
}

// TagState is what a tag holds: its full report's key ("" if none) and
// its shard reports.
type TagState struct {
	Run, Tag string
	Full     string
	// Stopped is the full report when its evaluation was stopped
	// (schemas.Report.Stopped): an incomplete report, which an evaluation
	// of the same weights under the tag finishes and replaces.
	Stopped *schemas.Report
	Shards  []ShardFile
}

var shardName = regexp.MustCompile(`(^|/)([0-9]+)-of-([0-9]+)\.json$`)

// ReadTag lists what is stored under a run's tag.
func ReadTag(ctx context.Context, s *store.Store, run, tag string) (TagState, error) {
	l := schemas.Layout{Run: run}
	st := TagState{Run: run, Tag: tag}
	ok, err := s.Exists(ctx, l.Report(tag))
	if err != nil {
		return st, err
	}
	if ok {
		st.Full = l.Report(tag)
		var rep schemas.Report
		if err := store.GetJSON(ctx, s, st.Full, &rep); err != nil {
			return st, err
		}
		if rep.Stopped != nil {
			st.Stopped = &rep
		}
	}
	objs, err := s.List(ctx, l.ShardsDir(tag))
	if err != nil {
		return st, err
	}
	for _, o := range objs {
		m := shardName.FindStringSubmatch(o.Key)
		if m == nil {
			continue
		}
		f := ShardFile{Key: o.Key}
		f.I, _ = strconv.Atoi(m[2])
		f.N, _ = strconv.Atoi(m[3])
		if err := store.GetJSON(ctx, s, o.Key, &f.Rep); err != nil {
			return st, err
		}
		st.Shards = append(st.Shards, f)
	}
	return st, nil
}

// Reports reads every full report of a run (eval/<tag>/report.json, not
// the shards), in the order of their keys.
func Reports(ctx context.Context, s *store.Store, run string) ([]schemas.Report, error) {
	l := schemas.Layout{Run: run}
	objs, err := s.List(ctx, l.Evals())
	if err != nil {
		return nil, err
	}
	var reps []schemas.Report
	for _, o := range objs {
		tag, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, l.Evals()), "/report.json")
		if !ok || strings.Contains(tag, "/") {
			continue
		}
		var rep schemas.Report
		if err := store.GetJSON(ctx, s, o.Key, &rep); err != nil {
			return nil, fmt.Errorf("reports of run %s: %w", run, err)
		}
		reps = append(reps, rep)
	}
	return reps, nil
}

// TagSpec is the evaluation a command wants to store under a tag.
type TagSpec struct {
	Shard           Shard
	InitKey         string
	Weights, Config string // weights and harness config digests
	Replace         bool
}

// TagPlan is what a replace deletes first: the whole tag (Wipe) or the
// listed reports.
type TagPlan struct {
	Wipe   bool
	Remove []string
}

// PlanTag decides whether an evaluation may write under a tag: a tag is
// never overwritten silently, and the shards of one tag must be of one
// evaluation (shard count, weights, init key, harness) to be merged. With
// Replace, the reports in the way are removed instead: everything for a
// whole-split evaluation; for a shard, the full report (stale once a shard
// changes), its own earlier report and shards that can't merge with it.
func PlanTag(st TagState, want TagSpec) (TagPlan, error) {
	var p TagPlan
	fix := "choose a new --tag, or pass --replace-tag to overwrite it"
	if want.InitKey == report.FinalKey {
		fix = "a final score is never overwritten: choose a new --tag"
	}
	if want.Shard.N == 1 {
		if st.Full == "" && len(st.Shards) == 0 {
			return p, nil
		}
		if r := st.Stopped; r != nil && len(st.Shards) == 0 && !want.Replace && sameEvaluation(*r, want) {
			// Resumed: the cells that ran are found recorded, the rest
			// run, and the new report replaces the incomplete one.
			return p, nil
		}
		if !want.Replace {
			what := st.Full
			if what == "" {
				what = fmt.Sprintf("%d shard reports, e.g. %s", len(st.Shards), st.Shards[0].Key)
			}
			return p, fmt.Errorf("tag %s of run %s exists (%s): %s", st.Tag, st.Run, what, fix)
		}
		p.Wipe = true
		return p, nil
	}
	if st.Full != "" {
		if !want.Replace {
			return p, fmt.Errorf("tag %s of run %s has its full report already (%s): %s", st.Tag, st.Run, st.Full, fix)
		}
		p.Remove = append(p.Remove, st.Full)
	}
	for _, f := range st.Shards {
		var problem string
		switch {
		case f.I == want.Shard.I && f.N == want.Shard.N:
			if f.Rep.Stopped != nil && !want.Replace && sameEvaluation(f.Rep, want) {
				continue // a stopped shard, finished by this evaluation
			}
			if !want.Replace {
				return p, fmt.Errorf("shard %s of tag %s exists (%s): %s", want.Shard, st.Tag, f.Key, fix)
			}
		case f.N != want.Shard.N:
			problem = fmt.Sprintf("tag %s is split in %d shards (%s), not %d: pass --shard i/%d", st.Tag, f.N, f.Key, want.Shard.N, f.N)
		case f.Rep.WeightsDigest != want.Weights:
			problem = fmt.Sprintf("tag %s holds shard %d/%d of other weights (%s, digest %.12s; --weights has %.12s): evaluate the same weights in every shard", st.Tag, f.I, f.N, f.Rep.WeightsID, f.Rep.WeightsDigest, want.Weights)
		case f.Rep.InitKey != want.InitKey:
			problem = fmt.Sprintf("tag %s holds shard %d/%d on %s, not %s: use the same --init-key in every shard", st.Tag, f.I, f.N, f.Rep.InitKey, want.InitKey)
		case f.Rep.Digest != want.Config:
			problem = fmt.Sprintf("tag %s holds shard %d/%d of harness config %s, --config gives %s: use the same harness and vars in every shard", st.Tag, f.I, f.N, f.Rep.Digest, want.Config)
		default:
			continue // a shard of the same evaluation: kept
		}
		if problem != "" && !want.Replace {
			return p, fmt.Errorf("%s, or use a new --tag", problem)
		}
		p.Remove = append(p.Remove, f.Key)
	}
	return p, nil
}

// sameEvaluation says rep is of the evaluation want describes: the same
// weights, split and harness config.
func sameEvaluation(rep schemas.Report, want TagSpec) bool {
	return rep.WeightsDigest == want.Weights && rep.InitKey == want.InitKey && rep.Digest == want.Config
}

// WipeTag deletes a tag's reports and the records of its evaluation
// phase (episodes, calls, staged tries, orphans, artifacts) and returns
// how many objects it deleted.
func WipeTag(ctx context.Context, s *store.Store, run, tag, phase string) (int, error) {
	l := schemas.Layout{Run: run}
	n := 0
	for _, p := range []string{l.EvalDir(tag), l.EpisodesDir(0, phase), l.CallsDir(0, phase), l.StagedDir(0, phase), l.OrphansDir(0, phase), l.ArtifactsDir(0, phase)} {
		k, err := s.DeletePrefix(ctx, p)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Merged is the outcome of MergeTag: the tag's full report, the shard
// reports it came from, and whether it was stored already.
type Merged struct {
	Report  schemas.Report
	Keys    []string
	Already bool
}

// MergeTag checks a tag's shard reports and writes their merged full
// report; nothing is written unless every check passes. A full report
// that is the merge of the same shards is kept as it is (Already); any
// other is never overwritten.
func MergeTag(ctx context.Context, s *store.Store, run, tag string) (Merged, error) {
	l := schemas.Layout{Run: run}
	var m Merged
	st, err := ReadTag(ctx, s, run, tag)
	if err != nil {
		return m, err
	}
	if len(st.Shards) == 0 {
		ok, err := s.Exists(ctx, l.Harness())
		if err != nil {
			return m, err
		}
		if !ok {
			return m, fmt.Errorf("unknown run %s (no s3://%s/%s): check --run and --bucket", run, s.Bucket, l.Harness())
		}
		return m, fmt.Errorf("tag %s of run %s has no shard reports under s3://%s/%s: evaluate with `starter eval --run %s --tag %s --shard i/n …` first", tag, run, s.Bucket, l.ShardsDir(tag), run, tag)
	}
	reps := make([]schemas.Report, len(st.Shards))
	m.Keys = make([]string, len(st.Shards))
	for i, f := range st.Shards {
		reps[i], m.Keys[i] = f.Rep, f.Key
		if f.Rep.Shard != f.I || f.Rep.Shards != f.N || f.Rep.Tag != tag {
			return m, fmt.Errorf("%s says it is shard %d/%d of tag %s: the file was moved or edited; rerun that shard with --replace-tag", f.Key, f.Rep.Shard, f.Rep.Shards, f.Rep.Tag)
		}
	}
	merged, err := report.MergeShards(reps, m.Keys)
	if err != nil {
		return m, fmt.Errorf("merge tag %s of run %s: %w", tag, run, err)
	}
	if st.Full != "" {
		var old schemas.Report
		if err := store.GetJSON(ctx, s, st.Full, &old); err != nil {
			return m, err
		}
		if sameSet(old.MergedFrom, merged.MergedFrom) && old.WeightsDigest == merged.WeightsDigest && sameCounts(old.Overall, merged.Overall) {
			m.Report, m.Already = old, true
			// A merge cut short after report.json finishes here.
			return m, putReportFiles(ctx, s, old)
		}
		return m, fmt.Errorf("s3://%s/%s exists and is not the merge of these shards: a report is never overwritten; evaluate under a new --tag", s.Bucket, st.Full)
	}
	if err := store.PutJSON(ctx, s, l.Report(tag), merged); err != nil {
		return m, err
	}
	m.Report = merged
	return m, putReportFiles(ctx, s, merged)
}

// putReportFiles writes every task's row beside a full report
// (report.ReportFiles: report.txt, tasks.csv); the same report gives the
// same bytes, so writing them again is harmless.
func putReportFiles(ctx context.Context, s *store.Store, rep schemas.Report) error {
	files, err := report.ReportFiles(rep, s.Bucket)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := s.Put(ctx, f.Key, f.Body); err != nil {
			return fmt.Errorf("report %s of run %s: %w", rep.Tag, rep.Run, err)
		}
	}
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// RemoveReports deletes the reports a TagPlan lists.
func RemoveReports(ctx context.Context, s *store.Store, keys []string) error {
	for _, k := range keys {
		if err := s.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// sameCounts compares the outcome counts of two results; the derived
// fields (rates, intervals, causes) may be missing from older reports.
func sameCounts(a, b schemas.TaskResult) bool {
	return a.Episodes == b.Episodes && a.Valid == b.Valid && a.Invalid == b.Invalid && a.Successes == b.Successes && a.Lost == b.Lost
}
