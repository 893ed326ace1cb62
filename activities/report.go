package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// ReportInput names the episodes a report covers.
type ReportInput struct {
	Run       string
	Round     int32
	Phase     string
	Tag       string
	WeightsID string
	InitKey   string
	// Shards > 1 makes the report one of a shard: only the cells with
	// index % Shards == Shard count, and it goes to Layout.ShardReport.
	Shard, Shards int
	StartedAtMS   int64
}

// EvalCell is one (task, init state) cell of a split. Index is its place
// in the split, task-major; it names the cell's episode and its shard.
type EvalCell struct {
	Index  int
	Task   schemas.Task
	InitID int32
}

// SplitCells lists the cells of shard `shard` of `shards` (0 or 1: the
// whole split) of every task × every init id of initKey, and how many
// cells the whole split has. The Eval workflow and its report share it, so
// the cells run are the cells counted.
func SplitCells(h schemas.Harness, initKey string, shard, shards int) ([]EvalCell, int, error) {
	if initKey != "val_init_ids" && initKey != "eval_init_ids" {
		return nil, 0, fmt.Errorf("init key %q: use val_init_ids or eval_init_ids", initKey)
	}
	ids, err := harness.IDs(h, initKey)
	if err != nil {
		return nil, 0, fmt.Errorf("harness %s %s: %w", h.Name, initKey, err)
	}
	shards = max(shards, 1)
	if shard < 0 || shard >= shards {
		return nil, 0, fmt.Errorf("shard %d/%d: the index must lie in 0..%d", shard, shards, shards-1)
	}
	var cells []EvalCell
	i := 0
	for _, t := range h.Tasks {
		for _, id := range ids {
			if i%shards == shard {
				cells = append(cells, EvalCell{Index: i, Task: t, InitID: id})
			}
			i++
		}
	}
	return cells, i, nil
}

// WeightsDigest hashes a manifest's files (name, size, SHA-256, in name
// order): two weights ids with the same files have the same digest.
// Reports carry it so they compare weights by content, not by id.
func WeightsDigest(files []schemas.WeightsFile) string {
	fs := slices.Clone(files)
	sort.Slice(fs, func(i, j int) bool { return fs[i].Name < fs[j].Name })
	h := sha256.New()
	for _, f := range fs {
		fmt.Fprintf(h, "%s\x00%d\x00%s\n", f.Name, f.Size, f.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// WriteReport aggregates a phase's episodes per task and suite into
// eval/<tag>/report.json, or a shard's report. When the init key names a
// split, only episodes of the report's cells and of its weights count, and
// cells without a record are listed as missing (lost episodes).
func (c *Control) WriteReport(ctx context.Context, in ReportInput) (schemas.Report, error) {
	h, err := c.harnesses.get(ctx, c.Store, in.Run)
	if err != nil {
		return schemas.Report{}, err
	}
	eps, err := c.readEpisodes(ctx, in.Run, in.Round, in.Phase)
	if err != nil {
		return schemas.Report{}, err
	}
	l := schemas.Layout{Run: in.Run}
	rep := schemas.Report{Run: in.Run, Tag: in.Tag, WeightsID: in.WeightsID, InitKey: in.InitKey,
		Harness: h.Name, Digest: h.Digest, Round: in.Round, Scope: schemas.ScopeFull, Shards: 1, StartedAtMS: in.StartedAtMS}
	key := l.Report(in.Tag)
	if in.Shards > 1 {
		rep.Scope, rep.Shard, rep.Shards = schemas.ScopeShard, in.Shard, in.Shards
		key = l.ShardReport(in.Tag, in.Shard, in.Shards)
	}
	if in.WeightsID != "" {
		man, err := weights.Read(ctx, c.Store, l.Weights(in.WeightsID))
		if err != nil {
			return rep, fmt.Errorf("report %s: %w", in.Tag, err)
		}
		rep.WeightsDigest = WeightsDigest(man.Files)
	}
	type cellKey struct{ task, init int32 }
	var want map[cellKey]bool // nil: every episode of the phase counts
	cells, total, cellErr := SplitCells(h, in.InitKey, in.Shard, in.Shards)
	if cellErr == nil {
		want = make(map[cellKey]bool, len(cells))
		rep.SplitCells = total
		for _, cl := range cells {
			want[cellKey{cl.Task.ID, cl.InitID}] = true
			rep.Cells = append(rep.Cells, schemas.CellID(cl.Task.ID, cl.InitID))
		}
	} else if in.Shards > 1 {
		return rep, fmt.Errorf("report %s: %w", in.Tag, cellErr)
	}
	rep.Tasks, rep.Suites = emptyResults(h.Tasks)
	byTask := map[int32]*schemas.TaskResult{}
	for i := range rep.Tasks {
		byTask[rep.Tasks[i].Task] = &rep.Tasks[i]
	}
	bySuite := map[string]*schemas.TaskResult{}
	for i := range rep.Suites {
		bySuite[rep.Suites[i].Suite] = &rep.Suites[i]
	}
	seen := map[cellKey]bool{}
	for _, e := range eps {
		k := cellKey{e.Task, e.InitID}
		// Other shards' cells share the phase; rows of other weights are a
		// replaced evaluation's leftovers.
		if want != nil && (!want[k] || e.WeightsID != in.WeightsID) {
			continue
		}
		t := byTask[e.Task]
		if t == nil {
			return rep, fmt.Errorf("episode %s has task %d, which harness %s does not list", e.EpisodeID, e.Task, h.Name)
		}
		seen[k] = true
		for _, r := range []*schemas.TaskResult{t, bySuite[t.Suite], &rep.Overall} {
			if r == nil {
				continue
			}
			r.Episodes++
			if !e.Valid {
				r.Invalid++
				continue
			}
			r.Valid++
			if e.Success {
				r.Successes++
			}
		}
	}
	for _, cl := range cells {
		if cellErr != nil || seen[cellKey{cl.Task.ID, cl.InitID}] {
			continue
		}
		rep.Missing = append(rep.Missing, schemas.CellID(cl.Task.ID, cl.InitID))
		for _, r := range []*schemas.TaskResult{byTask[cl.Task.ID], bySuite[cl.Task.Suite], &rep.Overall} {
			if r != nil {
				r.Lost++
			}
		}
	}
	finishRates(&rep)
	if rep.Scope == schemas.ScopeFull && rep.Overall.Valid > 0 {
		instr.RoundSuccess(ctx, in.Run, in.Round, in.Phase, rep.Overall.SuccessRate)
	}
	rep.FinishedAtMS = time.Now().UnixMilli()
	if err := putJSON(ctx, c.Store, key, rep); err != nil {
		return rep, err
	}
	// The cell lists stay in S3: workflow history gets the counts only.
	rep.Cells, rep.Missing = nil, nil
	return rep, nil
}

// emptyResults lists a result per task and per suite (in the order the
// tasks first name them; tasks without a suite belong to none).
func emptyResults(tasks []schemas.Task) ([]schemas.TaskResult, []schemas.TaskResult) {
	var ts, ss []schemas.TaskResult
	for _, t := range tasks {
		ts = append(ts, schemas.TaskResult{Task: t.ID, Name: t.Name, Suite: t.Suite})
		if t.Suite != "" && !slices.ContainsFunc(ss, func(r schemas.TaskResult) bool { return r.Suite == t.Suite }) {
			ss = append(ss, schemas.TaskResult{Task: -1, Suite: t.Suite})
		}
	}
	return ts, ss
}

// finishRates sets every success rate from its counts.
func finishRates(rep *schemas.Report) {
	rep.Overall.Task = -1
	all := append([]*schemas.TaskResult{&rep.Overall}, pointers(rep.Tasks)...)
	for _, r := range append(all, pointers(rep.Suites)...) {
		r.SuccessRate = 0
		if r.Valid > 0 {
			r.SuccessRate = float64(r.Successes) / float64(r.Valid)
		}
	}
}

func pointers(ts []schemas.TaskResult) []*schemas.TaskResult {
	out := make([]*schemas.TaskResult, len(ts))
	for i := range ts {
		out[i] = &ts[i]
	}
	return out
}

// MergeShards builds the full report of a sharded evaluation from its
// shard reports (keys name them, for MergedFrom and messages). It refuses,
// naming what is wrong, unless all n shards of one evaluation are there:
// the same tag, run, init key, harness digest and weights digest, each
// index once, and cells that are disjoint and cover the whole split, each
// counted by exactly one episode or as lost.
func MergeShards(shards []schemas.Report, keys []string) (schemas.Report, error) {
	if len(shards) == 0 {
		return schemas.Report{}, fmt.Errorf("no shard reports to merge")
	}
	if len(keys) != len(shards) {
		return schemas.Report{}, fmt.Errorf("%d shard reports but %d keys", len(shards), len(keys))
	}
	first := shards[0]
	n := first.Shards
	if !first.IsShard() || n < 2 {
		return schemas.Report{}, fmt.Errorf("%s is not a shard report (scope %q, %d shards)", keys[0], first.Scope, n)
	}
	byIndex := map[int]string{}
	for i, r := range shards {
		k := keys[i]
		if !r.IsShard() {
			return schemas.Report{}, fmt.Errorf("%s is not a shard report (scope %q)", k, r.Scope)
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
				return schemas.Report{}, fmt.Errorf("shards disagree on the %s: %s has %q, %s has %q; rerun the odd shard with --replace-tag, or evaluate under a new tag", c.what, k, c.a, keys[0], c.b)
			}
		}
		if r.WeightsDigest == "" {
			return schemas.Report{}, fmt.Errorf("%s has no weights digest, so its weights cannot be checked: rerun it", k)
		}
		if r.Shard < 0 || r.Shard >= n {
			return schemas.Report{}, fmt.Errorf("%s is shard %d, outside 0..%d", k, r.Shard, n-1)
		}
		if other, dup := byIndex[r.Shard]; dup {
			return schemas.Report{}, fmt.Errorf("shard %d/%d twice: %s and %s", r.Shard, n, other, k)
		}
		byIndex[r.Shard] = k
		if r.SplitCells != first.SplitCells {
			return schemas.Report{}, fmt.Errorf("shards disagree on the split's size: %s says %d cells, %s says %d", k, r.SplitCells, keys[0], first.SplitCells)
		}
		if got := r.Overall.Episodes + r.Overall.Lost; got != len(r.Cells) {
			return schemas.Report{}, fmt.Errorf("%s counts %d episodes and %d lost for %d cells: a cell was counted twice or not at all; rerun the shard with --replace-tag", k, r.Overall.Episodes, r.Overall.Lost, len(r.Cells))
		}
	}
	var missing []string
	for i := range n {
		if _, ok := byIndex[i]; !ok {
			missing = append(missing, fmt.Sprintf("%d/%d", i, n))
		}
	}
	if len(missing) > 0 {
		return schemas.Report{}, fmt.Errorf("shard %s of tag %s missing (have %d of %d): run `starter eval … --tag %s --shard %s` for each, then merge again",
			strings.Join(missing, ", "), first.Tag, len(byIndex), n, first.Tag, missing[0])
	}

	out := schemas.Report{Run: first.Run, Tag: first.Tag, WeightsID: first.WeightsID, InitKey: first.InitKey,
		Harness: first.Harness, Digest: first.Digest, Round: first.Round, WeightsDigest: first.WeightsDigest,
		Scope: schemas.ScopeFull, Shards: 1, SplitCells: first.SplitCells}
	order := make([]int, len(shards)) // merge in shard order, whatever order the files came in
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return shards[order[a]].Shard < shards[order[b]].Shard })
	owner := map[string]string{}
	tasks := map[int32]*schemas.TaskResult{}
	suites := map[string]*schemas.TaskResult{}
	for _, i := range order {
		r, k := shards[i], keys[i]
		out.MergedFrom = append(out.MergedFrom, k)
		for _, c := range r.Cells {
			if other, dup := owner[c]; dup {
				return schemas.Report{}, fmt.Errorf("cell %s (task:init) is in %s and in %s: shards overlap; rerun one with --replace-tag", c, other, k)
			}
			owner[c] = k
			out.Cells = append(out.Cells, c)
		}
		out.Missing = append(out.Missing, r.Missing...)
		for _, t := range r.Tasks {
			if _, ok := tasks[t.Task]; !ok {
				out.Tasks = append(out.Tasks, schemas.TaskResult{Task: t.Task, Name: t.Name, Suite: t.Suite})
				tasks[t.Task] = nil // pointers are taken below, once out.Tasks stops growing
			}
		}
		for _, s := range r.Suites {
			if _, ok := suites[s.Suite]; !ok {
				out.Suites = append(out.Suites, schemas.TaskResult{Task: -1, Suite: s.Suite})
				suites[s.Suite] = nil
			}
		}
		if out.StartedAtMS == 0 || (r.StartedAtMS > 0 && r.StartedAtMS < out.StartedAtMS) {
			out.StartedAtMS = r.StartedAtMS
		}
		out.FinishedAtMS = max(out.FinishedAtMS, r.FinishedAtMS)
	}
	if len(owner) != out.SplitCells {
		return schemas.Report{}, fmt.Errorf("the shards cover %d cells, the split has %d: a shard ran on another split or harness; rerun the shards under a new tag", len(owner), out.SplitCells)
	}
	for i := range out.Tasks {
		tasks[out.Tasks[i].Task] = &out.Tasks[i]
	}
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
	// Cells in split order: task-major in the harness's task order, then init id.
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
	finishRates(&out)
	return out, nil
}

// add sums b's counts into a.
func add(a *schemas.TaskResult, b schemas.TaskResult) {
	a.Episodes += b.Episodes
	a.Valid += b.Valid
	a.Invalid += b.Invalid
	a.Successes += b.Successes
	a.Lost += b.Lost
}
