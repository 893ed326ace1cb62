package report

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// plusSuites are LIBERO-Plus's four suites and their task counts
// (harnesses/rpent_libero/plus.yaml): 10,030 tasks, one cell each.
var plusSuites = []struct {
	name string
	n    int
}{{"libero_spatial", 2402}, {"libero_object", 2518}, {"libero_goal", 2591}, {"libero_10", 2519}}

// plusReport is a report of 10,030 tasks in plusSuites, each played once
// and solved, but for the tasks worst lists (in the order WorstTasks must
// give them) and every task whose id is 3 modulo 97 (failed once), and
// task 2 (1 of 2).
func plusReport() (rep schemas.Report, worst []int32) {
	special := map[int32]schemas.TaskResult{
		9000: {Episodes: 2, Invalid: 2, InvalidByCause: map[string]int{"infrastructure": 2}}, // no valid episode, 2 attempted
		7:    {Lost: 1},                                                                      // no valid episode, 1 attempted, lower id than 5000
		5000: {Episodes: 1, Invalid: 1, InvalidByCause: map[string]int{"timeout": 1}},
		100:  {Episodes: 3, Valid: 3},               // 0 of 3: more evidence than 0 of 2
		4000: {Episodes: 2, Valid: 2},               // 0 of 2
		2:    {Episodes: 2, Valid: 2, Successes: 1}, // 1 of 2: not among the worst
	}
	worst = []int32{9000, 7, 5000, 100, 4000, 3, 197, 294, 391, 488} // then the 0-of-1 tasks by id
	rep = schemas.Report{Run: "plus", Tag: "plus-val", WeightsID: "r6", InitKey: ValKey, Harness: "rpent_libero_plus", Scope: schemas.ScopeFull, Shards: 1}
	id := int32(0)
	for _, su := range plusSuites {
		suite := schemas.TaskResult{Task: -1, Suite: su.name}
		for range su.n {
			t, ok := special[id]
			if !ok {
				t = schemas.TaskResult{Episodes: 1, Valid: 1, Successes: 1}
				if id%97 == 3 {
					t.Successes = 0
				}
			}
			t.Task, t.Name, t.Suite = id, fmt.Sprintf("%s_%d", su.name, id), su.name
			rep.Tasks = append(rep.Tasks, t)
			for _, r := range []*schemas.TaskResult{&suite, &rep.Overall} {
				r.Episodes += t.Episodes
				r.Valid += t.Valid
				r.Invalid += t.Invalid
				r.Lost += t.Lost
				r.Successes += t.Successes
				for k, v := range t.InvalidByCause {
					if r.InvalidByCause == nil {
						r.InvalidByCause = map[string]int{}
					}
					r.InvalidByCause[k] += v
				}
			}
			id++
		}
		rep.Suites = append(rep.Suites, suite)
	}
	FinishRates(&rep)
	return rep, worst
}

// The first column of the rows of the table out starts with (task ids,
// "suite", "all"), up to its last row, "all".
func firstColumns(out string) []string {
	var col []string
	for _, l := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(l)
		if len(f) == 0 {
			break
		}
		if col = append(col, f[0]); f[0] == "all" {
			break
		}
	}
	return col
}

// A report of 10,030 tasks prints under 60 lines: the worst ten tasks in
// order, the four suites, the overall, and where every task's row is.
func TestWriteTableLarge(t *testing.T) {
	rep, worst := plusReport()
	if len(rep.Tasks) != 10030 {
		t.Fatalf("synthetic report has %d tasks, want 10030", len(rep.Tasks))
	}
	var out bytes.Buffer
	if err := WriteTable(&out, rep, "b"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	// `starter eval` must print under 60 lines for 10,030 cells: besides
	// this, 5 lines before the evaluation starts and at most 13 of progress
	// off a terminal (api.TestProgressLog), so the report gets under 40.
	if n := strings.Count(got, "\n"); n >= 40 {
		t.Errorf("10,030 tasks printed %d lines, want under 40:\n%s", n, got)
	}
	var want []string
	for _, id := range worst {
		want = append(want, strconv.Itoa(int(id)))
	}
	want = append(want, "suite", "suite", "suite", "suite", "all")
	if col := firstColumns(got); !slices.Equal(col, want) {
		t.Errorf("rows %v, want the worst tasks in order, the suites and all: %v\n%s", col, want, got)
	}
	// Columns collapsed to one space each.
	var lines []string
	for _, l := range strings.Split(got, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	flat := strings.Join(lines, "\n")
	for _, s := range []string{"suite libero_spatial 2405 2404 0 1 2376", "suite libero_object 2519", "suite libero_goal 2591", "suite libero_10 2520",
		"9000 libero_10_9000 libero_10 2 0 2 0 0 – 0.0% [0–66] infrastructure:2", "100 libero_spatial_100 libero_spatial 3 3 0 0 0 0.0% [0–57]",
		"10 of 10030 tasks shown", "s3://b/runs/plus/eval/plus-val/tasks.csv", "s3://b/runs/plus/eval/plus-val/report.txt",
		"starter report show --run plus --tag plus-val --tasks", "validation score (val_init_ids)"} {
		if !strings.Contains(flat, s) {
			t.Errorf("short table lacks %q:\n%s", s, got)
		}
	}

	// --tasks: every task's row.
	out.Reset()
	if err := WriteFullTable(&out, rep, "b"); err != nil {
		t.Fatal(err)
	}
	if col := firstColumns(out.String()); len(col) != 10030+4+1 || strings.Contains(out.String(), "tasks shown") {
		t.Errorf("full table: %d rows, want 10035 and no short-form line", len(col))
	}

	// A shard has no files beside it: the line names the command.
	rep.Scope, rep.Shard, rep.Shards = schemas.ScopeShard, 3, 16
	out.Reset()
	_ = WriteTable(&out, rep, "b")
	if s := out.String(); !strings.Contains(s, "every task: starter report show --run plus --tag plus-val --shard 3/16 --tasks") || strings.Contains(s, "tasks.csv") {
		t.Errorf("shard's short table:\n%s", s)
	}
}

// A short report prints every task, as before the short form.
func TestWriteTableShort(t *testing.T) {
	rep := schemas.Report{Run: "demo", Tag: "v", InitKey: ValKey}
	for i := range 7 {
		r := schemas.TaskResult{Task: int32(i), Name: fmt.Sprintf("t%d", i), Episodes: 5, Valid: 5, Successes: i % 6}
		rep.Tasks = append(rep.Tasks, r)
		rep.Overall.Episodes += 5
		rep.Overall.Valid += 5
		rep.Overall.Successes += r.Successes
	}
	FinishRates(&rep)
	var out bytes.Buffer
	if err := WriteTable(&out, rep, "b"); err != nil {
		t.Fatal(err)
	}
	if col := firstColumns(out.String()); !slices.Equal(col, []string{"0", "1", "2", "3", "4", "5", "6", "all"}) || strings.Contains(out.String(), "tasks shown") {
		t.Errorf("7 tasks: rows %v, want all 7 in order then all:\n%s", col, out.String())
	}
}

// ReportFiles: report.txt is the full table, tasks.csv one row per task
// under its header, an empty rate where no episode was valid.
func TestReportFiles(t *testing.T) {
	rep, _ := plusReport()
	files, err := ReportFiles(rep, "b")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0].Key != "runs/plus/eval/plus-val/report.txt" || files[1].Key != "runs/plus/eval/plus-val/tasks.csv" {
		t.Fatalf("files %v", files)
	}
	if col := firstColumns(string(files[0].Body)); len(col) != 10035 {
		t.Errorf("report.txt has %d rows, want 10035", len(col))
	}
	recs, err := csv.NewReader(bytes.NewReader(files[1].Body)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 10031 || !slices.Equal(recs[0], TasksCSVHeader) {
		t.Fatalf("tasks.csv: %d records, header %v", len(recs), recs[0])
	}
	if r := recs[1+9000]; !slices.Equal(r, []string{"9000", "libero_10_9000", "libero_10", "2", "0", "2", "0", "0", "", "", "", "0.0000", "infrastructure:2"}) {
		t.Errorf("task 9000's row %q", r)
	}
	if r := recs[1+2]; r[8] != "0.5000" || r[11] != "0.5000" || r[12] != "" {
		t.Errorf("task 2's row %q", r)
	}
	rep.Scope = schemas.ScopeShard
	if fs, _ := ReportFiles(rep, "b"); fs != nil {
		t.Errorf("a shard got files %v", fs)
	}
}

// A comparison of 10,030 tasks lists the ten of lowest p and the groups'
// counts, not their cells.
func TestWriteComparisonLarge(t *testing.T) {
	c := schemas.Comparison{Run: "plus", A: "a", B: "b"}
	for i := range 10030 {
		c.Tasks = append(c.Tasks, schemas.PairedResult{Task: int32(i), Pairs: 1, PValue: 1})
		c.Discordant = append(c.Discordant, schemas.DiscordantCell{Task: int32(i), Winner: "b", A: schemas.EpisodeLink{Termination: "max_turns"}})
	}
	c.Tasks[42].PValue, c.Tasks[17].PValue, c.Tasks[18].PValue = 0.01, 0.02, 0.02
	c.Tasks[18].Difference = -0.5 // larger than 17's 0: first among equal p
	var out bytes.Buffer
	WriteComparison(&out, c)
	got := out.String()
	if n := strings.Count(got, "\n"); n >= 60 {
		t.Errorf("%d lines:\n%s", n, got)
	}
	col := firstColumns(got[strings.Index(got, "\n\n")+2:])
	if want := []string{"42", "18", "17", "0", "1", "2", "3", "4", "5", "6", "all"}; !slices.Equal(col, want) {
		t.Errorf("rows %v, want %v", col, want)
	}
	if !strings.Contains(got, "B solved, A did not (A ended: max_turns): 10030") || strings.Contains(got, "  task 0 init") {
		t.Errorf("discordant part:\n%s", got)
	}
	out.Reset()
	WriteFullComparison(&out, c)
	if n := strings.Count(out.String(), "  task "); n != 10030+1 {
		t.Errorf("full comparison lists %d discordant cells, want 10030 and the header", n)
	}
}
