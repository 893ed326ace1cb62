package schemas

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func ptr(n int32) *int32 { return &n }

// A harness's tasks go through JSON (workflow inputs, harness.json) as
// written in its file: runs compact to range entries and expand back to
// the same tasks, single tasks and broken runs stay as they are.
func TestTaskListJSON(t *testing.T) {
	var l TaskList
	l = append(l, RangeTasks("libero_spatial", 0, []int32{0, 1, 2, 3, 4})...)
	l = append(l, Task{ID: 5, Name: "stack", Suite: "toy"})               // a single task
	l = append(l, RangeTasks("libero_goal", 6, []int32{7, 8, 10, 11})...) // numbers skip 9: two runs
	l = append(l, Task{ID: 10, Name: "libero_goal_12", Suite: "libero_goal", Number: ptr(12)})
	l = append(l, Task{ID: 11, Name: "odd", Suite: "libero_goal", Number: ptr(13)}) // named apart: not in a run
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"suite":"libero_spatial","numbers":"0-4","first_id":0},` +
		`{"id":5,"name":"stack","suite":"toy"},` +
		`{"suite":"libero_goal","numbers":"7-8","first_id":6},` +
		`{"suite":"libero_goal","numbers":"10-12","first_id":8},` +
		`{"id":11,"name":"odd","suite":"libero_goal","number":13}]`
	if string(b) != want {
		t.Fatalf("json\n%s\nwant\n%s", b, want)
	}
	var back TaskList
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, l) {
		t.Fatalf("round trip:\n%+v\nwant\n%+v", back, l)
	}
}

// 10,030 tasks in four suites, as LIBERO-Plus writes them, take four
// entries in a harness's JSON.
func TestTaskListJSONSize(t *testing.T) {
	h := Harness{Name: "plus"}
	first := int32(0)
	for _, s := range []struct {
		suite string
		n     int32
	}{{"libero_spatial", 2402}, {"libero_object", 2518}, {"libero_goal", 2591}, {"libero_10", 2519}} {
		nums := make([]int32, s.n)
		for i := range nums {
			nums[i] = int32(i)
		}
		h.Tasks = append(h.Tasks, RangeTasks(s.suite, first, nums)...)
		first += s.n
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"numbers"`); n != 4 || len(b) > 2000 {
		t.Fatalf("%d bytes, %d range entries: %s", len(b), n, b)
	}
	var back Harness
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Tasks) != 10030 || back.Tasks[10029].Name != "libero_10_2518" || back.Tasks[10029].ID != 10029 {
		t.Fatalf("%d tasks, last %+v", len(back.Tasks), back.Tasks[len(back.Tasks)-1])
	}
}

func TestTaskListJSONBadRange(t *testing.T) {
	for _, in := range []string{`[{"suite":"s","numbers":"3-1","first_id":0}]`, `[{"suite":"s","numbers":"0-2"}]`, `[{"suite":"s","numbers":"a","first_id":0}]`} {
		var l TaskList
		if err := json.Unmarshal([]byte(in), &l); err == nil {
			t.Errorf("%s: no error, got %+v", in, l)
		}
	}
}

// A report's copy in history drops the cell lists always, and the task
// rows of an evaluation past HistoryTaskRows, saying how many; a
// validation's rows stay for pool selection.
func TestReportForHistory(t *testing.T) {
	rep := Report{Tag: "plus-final", Cells: []string{"0:1"}, Missing: []string{"0:1"}, RequiredTasks: []int32{0}}
	for i := range HistoryTaskRows {
		rep.Tasks = append(rep.Tasks, TaskResult{Task: int32(i)})
	}
	if h := rep.ForHistory(); h.Cells != nil || h.Missing != nil || len(h.Tasks) != HistoryTaskRows || h.OmittedTasks != 0 || len(h.RequiredTasks) != 1 {
		t.Fatalf("at the limit: %d tasks, %d omitted, cells %v", len(h.Tasks), h.OmittedTasks, h.Cells)
	}
	rep.Tasks = append(rep.Tasks, TaskResult{Task: HistoryTaskRows})
	h := rep.ForHistory()
	if h.Tasks != nil || h.RequiredTasks != nil || h.OmittedTasks != HistoryTaskRows+1 {
		t.Fatalf("past the limit: %d tasks, %d omitted", len(h.Tasks), h.OmittedTasks)
	}
	if len(rep.Tasks) != HistoryTaskRows+1 || len(rep.Cells) != 1 {
		t.Fatal("ForHistory changed the report it was called on")
	}
	rep.Tag = ValTag(3)
	if h := rep.ForHistory(); len(h.Tasks) != HistoryTaskRows+1 || h.OmittedTasks != 0 {
		t.Fatalf("validation: %d tasks, %d omitted", len(h.Tasks), h.OmittedTasks)
	}
}
