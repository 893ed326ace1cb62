package report

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// MergeShards builds the full report of a sharded evaluation from its
// shard reports (keys name them, for MergedFrom and messages). It refuses,
// naming what is wrong, unless all n shards of one evaluation are there:
// the same tag, run, init key, harness digest and weights digest, each
// index once, and cells that are disjoint and cover the whole split, each
// counted by exactly one episode or as lost.
func MergeShards(shards []schemas.Report, keys []string) (schemas.Report, error) {
	if err := checkShards(shards, keys); err != nil {
		return schemas.Report{}, err
	}
	out := mergedHeader(shards[0])
	order := inShardOrder(shards)
	if err := joinCells(&out, shards, keys, order); err != nil {
		return schemas.Report{}, err
	}
	sumCounts(&out, shards, order)
	sortCells(&out)
	FinishRates(&out)
	return out, nil
}

// checkShards refuses shard reports that are not all n shards of one
// evaluation, each once; the first report is the one the others must
// agree with.
func checkShards(shards []schemas.Report, keys []string) error {
	if len(shards) == 0 {
		return fmt.Errorf("no shard reports to merge")
	}
	if len(keys) != len(shards) {
		return fmt.Errorf("%d shard reports but %d keys", len(shards), len(keys))
	}
	first := shards[0]
	n := first.Shards
	if !first.IsShard() || n < 2 {
		return fmt.Errorf("%s is not a shard report (scope %q, %d shards)", keys[0], first.Scope, n)
	}
	byIndex := map[int]string{}
	for i, r := range shards {
		if err := checkShard(r, keys[i], first, keys[0], byIndex); err != nil {
			return err
		}
		byIndex[r.Shard] = keys[i]
	}
	var missing []string
	for i := range n {
		if _, ok := byIndex[i]; !ok {
			missing = append(missing, fmt.Sprintf("%d/%d", i, n))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("shard %s of tag %s missing (have %d of %d): run `starter eval … --tag %s --shard %s` for each, then merge again",
			strings.Join(missing, ", "), first.Tag, len(byIndex), n, first.Tag, missing[0])
	}
	return nil
}

// checkShard refuses shard report r, stored at k, unless it is a shard
// of first's evaluation (stored at firstKey) with an index not in
// byIndex (the indices seen so far), a weights digest, and one count
// per cell.
func checkShard(r schemas.Report, k string, first schemas.Report, firstKey string, byIndex map[int]string) error {
	n := first.Shards
	if !r.IsShard() {
		return fmt.Errorf("%s is not a shard report (scope %q)", k, r.Scope)
	}
	if r.Stopped != nil {
		return fmt.Errorf("%s is incomplete: shard %d/%d was stopped (%s) with %d cells skipped; run the same `starter eval --tag %s --shard %d/%d` again to finish it, then merge",
			k, r.Shard, r.Shards, r.Stopped.Reason, r.Stopped.Skipped, r.Tag, r.Shard, r.Shards)
	}
	for _, c := range []struct{ what, a, b string }{
		{"shard count", strconv.Itoa(r.Shards), strconv.Itoa(n)},
		{"run", r.Run, first.Run},
		{"tag", r.Tag, first.Tag},
		{"init key", r.InitKey, first.InitKey},
		{"harness config digest", r.Digest, first.Digest},
		{"weights digest", r.WeightsDigest, first.WeightsDigest},
	} {
		if c.a != c.b {
			return fmt.Errorf("shards disagree on the %s: %s has %q, %s has %q; rerun the odd shard with --replace-tag, or evaluate under a new tag", c.what, k, c.a, firstKey, c.b)
		}
	}
	if r.WeightsDigest == "" {
		return fmt.Errorf("%s has no weights digest, so its weights cannot be checked: rerun it", k)
	}
	if r.Shard < 0 || r.Shard >= n {
		return fmt.Errorf("%s is shard %d, outside 0..%d", k, r.Shard, n-1)
	}
	if other, dup := byIndex[r.Shard]; dup {
		return fmt.Errorf("shard %d/%d twice: %s and %s", r.Shard, n, other, k)
	}
	if r.SplitCells != first.SplitCells {
		return fmt.Errorf("shards disagree on the split's size: %s says %d cells, %s says %d", k, r.SplitCells, firstKey, first.SplitCells)
	}
	if got := r.Overall.Episodes + r.Overall.Lost; got != len(r.Cells) {
		return fmt.Errorf("%s counts %d episodes and %d lost for %d cells: a cell was counted twice or not at all; rerun the shard with --replace-tag", k, r.Overall.Episodes, r.Overall.Lost, len(r.Cells))
	}
	return nil
}

// mergedHeader is the full report's identity, taken from a shard that
// agrees with all the others, with nothing counted yet.
func mergedHeader(first schemas.Report) schemas.Report {
	return schemas.Report{Run: first.Run, Tag: first.Tag, WeightsID: first.WeightsID, InitKey: first.InitKey,
		Harness: first.Harness, Digest: first.Digest, Round: first.Round, WeightsDigest: first.WeightsDigest,
		Scope: schemas.ScopeFull, Shards: 1, SplitCells: first.SplitCells, MaxInvalidShare: first.MaxInvalidShare,
		Protocol: first.Protocol, ProtocolEpisodes: first.ProtocolEpisodes, RequiredTasks: first.RequiredTasks}
}

// inShardOrder is the indices of shards by shard index: they merge in
// shard order, whatever order the files came in.
func inShardOrder(shards []schemas.Report) []int {
	order := make([]int, len(shards))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return shards[order[a]].Shard < shards[order[b]].Shard })
	return order
}

// joinCells adds each shard's cells, lost cells, tasks and suites (not
// yet counted) and time span to out, refusing cells two shards hold or
// cells that are not the whole split.
func joinCells(out *schemas.Report, shards []schemas.Report, keys []string, order []int) error {
	owner := map[string]string{}
	tasks := map[int32]bool{}
	suites := map[string]bool{}
	for _, i := range order {
		r, k := shards[i], keys[i]
		out.MergedFrom = append(out.MergedFrom, k)
		for _, c := range r.Cells {
			if other, dup := owner[c]; dup {
				return fmt.Errorf("cell %s (task:init) is in %s and in %s: shards overlap; rerun one with --replace-tag", c, other, k)
			}
			owner[c] = k
			out.Cells = append(out.Cells, c)
		}
		out.Missing = append(out.Missing, r.Missing...)
		for _, t := range r.Tasks {
			if !tasks[t.Task] {
				out.Tasks = append(out.Tasks, schemas.TaskResult{Task: t.Task, Name: t.Name, Suite: t.Suite})
				tasks[t.Task] = true
			}
		}
		for _, s := range r.Suites {
			if !suites[s.Suite] {
				out.Suites = append(out.Suites, schemas.TaskResult{Task: -1, Suite: s.Suite})
				suites[s.Suite] = true
			}
		}
		if out.StartedAtMS == 0 || (r.StartedAtMS > 0 && r.StartedAtMS < out.StartedAtMS) {
			out.StartedAtMS = r.StartedAtMS
		}
		out.FinishedAtMS = max(out.FinishedAtMS, r.FinishedAtMS)
	}
	if len(owner) != out.SplitCells {
		return fmt.Errorf("the shards cover %d cells, the split has %d: a shard ran on another split or harness; rerun the shards under a new tag", len(owner), out.SplitCells)
	}
	return nil
}

// sumCounts adds each shard's counts per task, per suite and overall
// into out, whose tasks and suites joinCells listed.
func sumCounts(out *schemas.Report, shards []schemas.Report, order []int) {
	tasks := map[int32]*schemas.TaskResult{}
	for i := range out.Tasks {
		tasks[out.Tasks[i].Task] = &out.Tasks[i]
	}
	suites := map[string]*schemas.TaskResult{}
	for i := range out.Suites {
		suites[out.Suites[i].Suite] = &out.Suites[i]
	}
	for _, i := range order {
		r := shards[i]
		for _, t := range r.Tasks {
			add(tasks[t.Task], t)
		}
		for _, s := range r.Suites {
			add(suites[s.Suite], s)
		}
		add(&out.Overall, r.Overall)
	}
}

// sortCells puts out's cells and lost cells in split order: task-major
// in the harness's task order, then init id.
func sortCells(out *schemas.Report) {
	pos := map[int32]int{}
	for i, t := range out.Tasks {
		pos[t.Task] = i
	}
	cellKey := func(c string) (int, int) {
		a, b, _ := strings.Cut(c, ":")
		task, _ := strconv.Atoi(a)
		init, _ := strconv.Atoi(b)
		return pos[int32(task)], init
	}
	for _, l := range [][]string{out.Cells, out.Missing} {
		sort.SliceStable(l, func(i, j int) bool {
			t1, i1 := cellKey(l[i])
			t2, i2 := cellKey(l[j])
			return t1 < t2 || (t1 == t2 && i1 < i2)
		})
	}
}

// add sums b's counts into a.
func add(a *schemas.TaskResult, b schemas.TaskResult) {
	a.Episodes += b.Episodes
	a.Valid += b.Valid
	a.Invalid += b.Invalid
	a.Successes += b.Successes
	a.Lost += b.Lost
	for k, v := range b.InvalidByCause {
		if a.InvalidByCause == nil {
			a.InvalidByCause = map[string]int{}
		}
		a.InvalidByCause[k] += v
	}
}
