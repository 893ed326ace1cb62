// Package report holds what Roundhouse's reports and leaderboards say,
// computed without I/O: the cells of a split (and of a shard), per-task
// and per-suite results, merging shard reports, checking a report chosen
// as a training pool, ordering and rendering a sweep's leaderboard, and
// the text forms of a report, a comparison and a run's rounds.
// Workflows, activities and the starter share it, so the cells an
// evaluation runs are the cells its report counts.
package report

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Init keys of the two evaluation splits; train_init_ids is training data.
const (
	ValKey   = "val_init_ids"
	FinalKey = "eval_init_ids"
)

// Cell is one (task, init state) cell of a split. Index is its place in
// the split, task-major; it names the cell's episode and its shard.
type Cell struct {
	Index  int
	Task   schemas.Task
	InitID int32
}

// SplitCells lists the cells of shard `shard` of `shards` (0 or 1: the
// whole split) of every task × every init id of initKey, and how many
// cells the whole split has. The Eval workflow and its report share it, so
// the cells run are the cells counted.
func SplitCells(h schemas.Harness, initKey string, shard, shards int) ([]Cell, int, error) {
	if initKey != ValKey && initKey != FinalKey {
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
	var cells []Cell
	i := 0
	for _, t := range h.Tasks {
		for _, id := range ids {
			if i%shards == shard {
				cells = append(cells, Cell{Index: i, Task: t, InitID: id})
			}
			i++
		}
	}
	return cells, i, nil
}

// EmptyResults lists a result per task and per suite (in the order the
// tasks first name them; tasks without a suite belong to none).
func EmptyResults(tasks []schemas.Task) ([]schemas.TaskResult, []schemas.TaskResult) {
	var ts, ss []schemas.TaskResult
	for _, t := range tasks {
		ts = append(ts, schemas.TaskResult{Task: t.ID, Name: t.Name, Suite: t.Suite})
		if t.Suite != "" && !slices.ContainsFunc(ss, func(r schemas.TaskResult) bool { return r.Suite == t.Suite }) {
			ss = append(ss, schemas.TaskResult{Task: -1, Suite: t.Suite})
		}
	}
	return ts, ss
}

// FinishRates sets every success rate of rep and its 95 % interval from
// the counts, and whether Overall's invalid share exceeds
// rep.MaxInvalidShare (when that is known).
func FinishRates(rep *schemas.Report) {
	rep.Overall.Task = -1
	all := append([]*schemas.TaskResult{&rep.Overall}, pointers(rep.Tasks)...)
	for _, r := range append(all, pointers(rep.Suites)...) {
		setRate(r)
	}
	rep.OverInvalidLimit = false
	if rep.MaxInvalidShare > 0 {
		rep.OverInvalidLimit = rep.Overall.InvalidShare() > rep.MaxInvalidShare
	}
}

// InvalidLimit is the limit rep is judged by: its own, or the default for
// reports written before the limit was recorded.
func InvalidLimit(rep schemas.Report) float64 {
	if rep.MaxInvalidShare > 0 {
		return rep.MaxInvalidShare
	}
	return schemas.DefaultMaxInvalidShare
}

// OverInvalidLimit says rep's invalid share (invalid and lost over
// attempted) exceeds its limit, for old reports too.
func OverInvalidLimit(rep schemas.Report) bool {
	return rep.Overall.InvalidShare() > InvalidLimit(rep)
}

// FinalScoreError refuses to call rep a final score when too many of its
// episodes did not count (the rate then speaks for the episodes that ran,
// not for the split) or when it does not cover its protocol: a required
// task without a valid episode, or fewer cells than the protocol's
// episodes. nil when rep may be called final.
func FinalScoreError(rep schemas.Report) error {
	if err := StoppedError(rep); err != nil {
		return err
	}
	if err := coverageError(rep); err != nil {
		return err
	}
	if !OverInvalidLimit(rep) {
		return nil
	}
	o := rep.Overall
	return fmt.Errorf("not a final score: %d of %d attempted episodes (%.1f%%) were invalid or lost, over the limit of %.0f%% (collect.max_invalid_share); fix the causes (invalid by cause: %s), then evaluate again under a new --tag",
		o.Invalid+o.Lost, o.Attempted(), 100*o.InvalidShare(), 100*InvalidLimit(rep), Causes(o))
}

// StoppedError refuses an incomplete report, whose evaluation was
// stopped, as a score of its split; nil when every cell ran.
func StoppedError(rep schemas.Report) error {
	if rep.Stopped == nil {
		return nil
	}
	return fmt.Errorf("not a score: the evaluation was stopped (%s) with %d of %d cells skipped; run the same `starter eval` (same --run and --tag) again to finish it",
		rep.Stopped.Reason, rep.Stopped.Skipped, max(rep.SplitCells, rep.Overall.Attempted()))
}

// coverageError says which required tasks rep does not cover. A task all
// of whose episodes were invalid or lost would silently leave the rate,
// which then scores an easier protocol than the one named.
func coverageError(rep schemas.Report) error {
	required := rep.RequiredTasks
	if len(required) == 0 {
		for _, t := range rep.Tasks {
			required = append(required, t.Task)
		}
	}
	byTask := map[int32]schemas.TaskResult{}
	for _, t := range rep.Tasks {
		byTask[t.Task] = t
	}
	var absent, empty []string
	cells := 0
	for _, id := range required {
		t, ok := byTask[id]
		switch {
		case !ok:
			absent = append(absent, fmt.Sprint(id))
		case t.Valid == 0:
			empty = append(empty, fmt.Sprintf("%d %s", id, t.Name))
		}
		cells += t.Attempted()
	}
	name := cmp.Or(rep.Protocol, "the harness's tasks")
	switch {
	case len(absent) > 0:
		return fmt.Errorf("not a final score of %s: the report has no result for required tasks %s; evaluate with the harness file that lists them, under a new --tag", name, clip(absent))
	case len(empty) > 0:
		return fmt.Errorf("not a final score of %s: %d required tasks have no valid episode (%s), so the rate would leave them out; fix their infrastructure failures (see the report's invalid by cause), then evaluate again under a new --tag",
			name, len(empty), clip(empty))
	case rep.ProtocolEpisodes > 0 && cells != rep.ProtocolEpisodes:
		return fmt.Errorf("not a final score of %s: its required tasks have %d cells, the protocol %d; evaluate with the harness file that declares it", name, cells, rep.ProtocolEpisodes)
	}
	return nil
}

// ProtocolResult sums rep's required tasks: the final score's counts. It
// is Overall when every task is required (or the report names none).
func ProtocolResult(rep schemas.Report) schemas.TaskResult {
	if len(rep.RequiredTasks) == 0 || len(rep.RequiredTasks) == len(rep.Tasks) {
		return rep.Overall
	}
	out := schemas.TaskResult{Task: -1, Name: rep.Protocol}
	for _, t := range rep.Tasks {
		if slices.Contains(rep.RequiredTasks, t.Task) {
			add(&out, t)
		}
	}
	setRate(&out)
	return out
}

// setRate sets r's success over valid and its 95 % interval from its
// counts (none without a valid episode).
func setRate(r *schemas.TaskResult) {
	r.SuccessRate, r.SuccessCI95 = 0, nil
	if r.Valid > 0 {
		r.SuccessRate = float64(r.Successes) / float64(r.Valid)
		iv := stats.Wilson(r.Successes, r.Valid)
		r.SuccessCI95 = []float64{iv.Lo, iv.Hi}
	}
}

// clip joins at most five items and says how many more there are.
func clip(items []string) string {
	if len(items) <= 5 {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:5], ", "), len(items)-5)
}

// Causes lists a result's invalid episodes by cause ("timeout:2 lost:1"),
// lost cells included; "-" when there is none.
func Causes(r schemas.TaskResult) string {
	by := map[string]int{}
	for k, v := range r.InvalidByCause {
		by[k] += v
	}
	if r.Lost > 0 {
		by["lost"] += r.Lost
	}
	if n := r.Invalid - sum(r.InvalidByCause); n > 0 {
		by["unknown"] += n // reports from before causes were counted
	}
	return CauseList(by)
}

// CauseList formats counts by cause sorted by name: "lost:1 timeout:2".
func CauseList(by map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		if by[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", k, by[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func pointers(ts []schemas.TaskResult) []*schemas.TaskResult {
	out := make([]*schemas.TaskResult, len(ts))
	for i := range ts {
		out[i] = &ts[i]
	}
	return out
}

// RoundWarning is the loud line for a round whose collection or
// validation had more invalid and lost episodes than its limit allows, ""
// when neither had.
func RoundWarning(r schemas.RoundSummary) string {
	what := r.OverLimit()
	if what == "" {
		return ""
	}
	var parts []string
	if r.InvalidShare() > r.InvalidLimit() {
		parts = append(parts, fmt.Sprintf("collection %d of %d (%s)", r.Attempted()-r.Valid, r.Attempted(), CauseList(r.InvalidByCause)))
	}
	if v := r.Val; v != nil && v.InvalidShare() > r.InvalidLimit() {
		parts = append(parts, fmt.Sprintf("validation %d of %d (%s)", v.Invalid+v.Lost, v.Attempted(), Causes(*v)))
	}
	return fmt.Sprintf("round %d: too many invalid or lost episodes, over the limit of %.0f%% (collect.max_invalid_share): %s; its %s success speaks for the episodes that ran, not for the tasks",
		r.Round, 100*r.InvalidLimit(), strings.Join(parts, ", "), what)
}

// FinalValWarning is the loud line for a final validation whose invalid
// and lost episodes exceed the limit (0: the default), "" otherwise. The
// final validation has no round summary to carry it.
func FinalValWarning(v schemas.TaskResult, limit float64) string {
	rep := schemas.Report{Overall: v, MaxInvalidShare: limit}
	if !OverInvalidLimit(rep) {
		return ""
	}
	return fmt.Sprintf("!! final validation: %d of %d attempted episodes invalid or lost (%s), over the limit of %.0f%% (collect.max_invalid_share): its success speaks for the episodes that ran, not for the tasks",
		v.Invalid+v.Lost, v.Attempted(), Causes(v), 100*InvalidLimit(rep))
}

// LastLimit is the invalid limit of a run's last round (0: unknown), the
// one its final validation is held to.
func LastLimit(sums []schemas.RoundSummary) float64 {
	if len(sums) == 0 {
		return 0
	}
	return sums[len(sums)-1].MaxInvalidShare
}

// ValRate is the validation success of a round as "63.3% [45–79]", from
// its counts when the summary has them, else its bare rate; "-" when the
// round did not validate.
func ValRate(r schemas.RoundSummary) string {
	switch {
	case r.Val != nil:
		return stats.Rate(r.Val.Successes, r.Val.Valid)
	case r.ValSuccess >= 0:
		return fmt.Sprintf("%.1f%%", 100*r.ValSuccess)
	}
	return "-"
}
