package schemas

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// TaskList is a harness's tasks, one entry per task once loaded. In JSON —
// workflow inputs, the run's harness.json — a run of tasks that a range
// entry would write ({suite, numbers: "a-b", first_id}) is written as that
// entry, so a harness's size in workflow history follows its file, not its
// task count: LIBERO-Plus's 10,030 tasks are 4 entries, not 750 KB
// (docs/design.md §2). Decoding expands them again; entries of one task
// each, as written before, decode as they are.
type TaskList []Task

// RangeTasks is the tasks a range entry stands for: ids firstID.. in the
// order of nums, numbers nums, named <suite>_<number>.
func RangeTasks(suite string, firstID int32, nums []int32) []Task {
	out := make([]Task, len(nums))
	for k, n := range nums {
		out[k] = Task{ID: firstID + int32(k), Name: fmt.Sprintf("%s_%d", suite, n), Suite: suite, Number: &n}
	}
	return out
}

// rangeNamed says whether t is named as a range entry names its tasks.
func rangeNamed(t Task) bool {
	return t.Number != nil && t.Suite != "" && t.Name == fmt.Sprintf("%s_%d", t.Suite, *t.Number)
}

// inRange says whether t is the task after prev in a range entry.
func inRange(prev, t Task) bool {
	return rangeNamed(t) && prev.Number != nil && t.Suite == prev.Suite && t.ID == prev.ID+1 && *t.Number == *prev.Number+1
}

// MarshalJSON writes runs of two or more range-named tasks as range entries.
func (l TaskList) MarshalJSON() ([]byte, error) {
	type rangeEntry struct {
		Suite   string `json:"suite"`
		Numbers string `json:"numbers"`
		FirstID int32  `json:"first_id"`
	}
	out := make([]any, 0, len(l))
	for i := 0; i < len(l); {
		t := l[i]
		j := i + 1
		if rangeNamed(t) {
			for j < len(l) && inRange(l[j-1], l[j]) {
				j++
			}
		}
		if j-i < 2 {
			out = append(out, t)
			i++
			continue
		}
		out = append(out, rangeEntry{Suite: t.Suite, Numbers: fmt.Sprintf("%d-%d", *t.Number, *l[j-1].Number), FirstID: t.ID})
		i = j
	}
	return json.Marshal(out)
}

// UnmarshalJSON expands range entries ("a-b" or "a").
func (l *TaskList) UnmarshalJSON(b []byte) error {
	var in []Task
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	out := make(TaskList, 0, len(in))
	for _, t := range in {
		if t.Numbers == "" {
			out = append(out, t)
			continue
		}
		if t.FirstID == nil {
			return fmt.Errorf("tasks: range entry %q of suite %s has no first_id", t.Numbers, t.Suite)
		}
		lo, hi, ok := strings.Cut(t.Numbers, "-")
		if !ok {
			hi = lo
		}
		a, err1 := strconv.ParseInt(lo, 10, 32)
		z, err2 := strconv.ParseInt(hi, 10, 32)
		if err1 != nil || err2 != nil || z < a {
			return fmt.Errorf("tasks: range entry numbers %q of suite %s: want \"a-b\" with a ≤ b", t.Numbers, t.Suite)
		}
		nums := make([]int32, 0, z-a+1)
		for n := a; n <= z; n++ {
			nums = append(nums, int32(n))
		}
		out = append(out, RangeTasks(t.Suite, *t.FirstID, nums)...)
	}
	*l = out
	return nil
}
