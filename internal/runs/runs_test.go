package runs_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestMain(m *testing.M) {
	code := m.Run()
	itest.Cleanup()
	os.Exit(code)
}

// A new run's prefix, as `starter train` prepares it, resumes with what
// it was created with and is wiped whole by a replace.
func TestCreateLoadWipe(t *testing.T) {
	stack := itest.Start(t)
	ctx, s := context.Background(), stack.Store
	h, err := harness.Load("../../harnesses/minimal/harness.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := runs.ParseWeights("../../harnesses/minimal/weights/w0", h.Model.WeightsFile)
	if err != nil {
		t.Fatal(err)
	}
	l := schemas.Layout{Run: "r"}
	spec := schemas.RunSpec{Run: "r", Rounds: 3, Groups: 2, Attempts: 4, PoolReport: l.PoolReport()}
	if err := runs.Create(ctx, s, spec, w, []byte(`{"tasks":[]}`)); err != nil {
		t.Fatal(err)
	}
	if ok, err := runs.Exists(ctx, s, "r"); err != nil || ok {
		t.Fatalf("a run without harness.json exists: %v %v", ok, err)
	}
	if err := runs.PutHarness(ctx, s, "r", h); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := runs.ReadHarness(ctx, s, "r"); err != nil || !ok || got.Digest != h.Digest {
		t.Fatalf("harness read back: %v %v %v", got.Digest, ok, err)
	}
	if _, ok, err := runs.ReadHarness(ctx, s, "nope"); err != nil || ok {
		t.Fatalf("unknown run's harness: %v %v", ok, err)
	}
	got, st, err := runs.Load(ctx, s, "r")
	if err != nil || got.Rounds != 3 || got.Attempts != 4 || st.WeightsID != "w0" || st.RoundsDone != 0 || st.FinalValSuccess != -1 {
		t.Fatalf("loaded %+v %+v %v", got, st, err)
	}
	if _, _, err := runs.Load(ctx, s, "nope"); err == nil || !strings.Contains(err.Error(), "--replace") {
		t.Errorf("run without run.json: %v", err)
	}
	if same, err := runs.SameWeights(ctx, s, l.Weights("w0"), w); err != nil || !same {
		t.Errorf("w0 is not the weights it was published from: %v %v", same, err)
	}
	if ids := runs.WeightIDs(ctx, s, "r"); fmt.Sprint(ids) != "[w0]" {
		t.Errorf("weights ids %v", ids)
	}
	desc, err := w.Describe(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := runs.PublishedDigest(ctx, s, "r", "w0"); err != nil || d != schemas.WeightsDigest(desc) {
		t.Errorf("digest of w0 %q, %v", d, err)
	}
	if _, err := runs.PublishedDigest(ctx, s, "r", "r9"); err == nil || !strings.Contains(err.Error(), "it has w0") {
		t.Errorf("absent weights: %v", err)
	}
	if _, err := s.Get(ctx, l.PoolReport()); err != nil {
		t.Errorf("pool report not stored: %v", err)
	}
	if err := s.Put(ctx, l.Stop(), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := runs.ClearStop(ctx, s, "r"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Exists(ctx, l.Stop()); ok {
		t.Error("stop marker left")
	}
	n, err := runs.Wipe(ctx, s, "r")
	if err != nil || n < 4 {
		t.Fatalf("wiped %d objects: %v", n, err)
	}
	if objs, _ := s.List(ctx, l.Prefix()); len(objs) != 0 {
		t.Errorf("%d objects left after wipe", len(objs))
	}
}

// Local weights are published once under their content id.
func TestPublishLocal(t *testing.T) {
	stack := itest.Start(t)
	ctx, s := context.Background(), stack.Store
	files, err := weights.Dir("../../harnesses/minimal/weights/w0")
	if err != nil {
		t.Fatal(err)
	}
	desc, err := weights.Describe(files)
	if err != nil {
		t.Fatal(err)
	}
	id := runs.ExternalID(schemas.WeightsDigest(desc))
	if !strings.HasPrefix(id, "ext-") || len(id) != 16 {
		t.Fatalf("external id %q", id)
	}
	for i, want := range []bool{true, false} {
		published, err := runs.PublishLocal(ctx, s, "e", id, files, desc)
		if err != nil || published != want {
			t.Errorf("publish %d: %v %v, want %v", i, published, err, want)
		}
	}
}

// A tag's shard reports merge into its full report once; a second merge
// finds it; wiping the tag removes reports and records.
func TestMergeAndWipeTag(t *testing.T) {
	stack := itest.Start(t)
	ctx, s := context.Background(), stack.Store
	l := schemas.Layout{Run: "r"}
	if err := runs.PutHarness(ctx, s, "r", schemas.Harness{Name: "h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := runs.MergeTag(ctx, s, "r", "t"); err == nil || !strings.Contains(err.Error(), "no shard reports") {
		t.Fatalf("merge without shards: %v", err)
	}
	for i := range 2 {
		r := schemas.Report{Run: "r", Tag: "t", WeightsID: "w0", InitKey: "val_init_ids", Harness: "h", Digest: "cfg", WeightsDigest: "wd",
			Scope: schemas.ScopeShard, Shard: i, Shards: 2, SplitCells: 2, Cells: []string{schemas.CellID(0, int32(i))},
			Tasks: []schemas.TaskResult{{Task: 0, Episodes: 1, Valid: 1, Successes: i}}, Overall: schemas.TaskResult{Episodes: 1, Valid: 1, Successes: i}}
		if err := store.PutJSON(ctx, s, l.ShardReport("t", i, 2), r); err != nil {
			t.Fatal(err)
		}
	}
	st, err := runs.ReadTag(ctx, s, "r", "t")
	if err != nil || st.Full != "" || len(st.Shards) != 2 {
		t.Fatalf("tag holds %+v, %v", st, err)
	}
	m, err := runs.MergeTag(ctx, s, "r", "t")
	if err != nil || m.Already || len(m.Keys) != 2 || m.Report.Overall.Episodes != 2 || m.Report.Overall.SuccessRate != 0.5 {
		t.Fatalf("merged %+v, %v", m, err)
	}
	// Beside it every task's row; a second merge finds the report and puts
	// back a file a first merge cut short did not write.
	csv, err := s.Get(ctx, l.ReportTasks("t"))
	if want := "task,name,suite,attempted,valid,invalid,lost,successes,success_rate,ci95_low,ci95_high,success_over_attempted,invalid_by_cause\n" +
		"0,,,2,2,0,0,1,0.5000,0.0945,0.9055,0.5000,\n"; err != nil || string(csv) != want {
		t.Errorf("merged tasks.csv %q, %v; want %q", csv, err, want)
	}
	if err := s.Delete(ctx, l.ReportTasks("t")); err != nil {
		t.Fatal(err)
	}
	if m, err := runs.MergeTag(ctx, s, "r", "t"); err != nil || !m.Already {
		t.Errorf("second merge: %+v, %v", m, err)
	}
	for _, k := range []string{l.ReportText("t"), l.ReportTasks("t")} {
		if ok, err := s.Exists(ctx, k); !ok || err != nil {
			t.Errorf("after the second merge %s exists: %v, %v", k, ok, err)
		}
	}
	// The run's reports are the merged one: not its shards, not a comparison.
	if err := store.PutJSON(ctx, s, l.Comparison("t", "u"), schemas.Comparison{Run: "r", A: "t", B: "u"}); err != nil {
		t.Fatal(err)
	}
	if reps, err := runs.Reports(ctx, s, "r"); err != nil || len(reps) != 1 || reps[0].Tag != "t" || reps[0].IsShard() || len(reps[0].Cells) != 2 {
		t.Errorf("reports of the run: %+v, %v; want the merged report of t only", reps, err)
	}
	for _, k := range []string{l.Episodes(0, "eval-t", "e1"), l.Staged(0, "eval-t", "e2", "try0-x") + "calls.parquet", l.Staged(0, "eval-other", "e2", "try0-x") + "calls.parquet"} {
		if err := s.Put(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	n, err := runs.WipeTag(ctx, s, "r", "t", "eval-t")
	if err != nil || n != 7 {
		t.Errorf("wiped %d objects, want 2 shard reports, the report, report.txt, tasks.csv, an episode and a staged try: %v", n, err)
	}
	if objs, err := s.List(ctx, l.Prefix()+"staged/"); err != nil || len(objs) != 1 || !strings.Contains(objs[0].Key, "phase=eval-other/") {
		t.Errorf("staged after the wipe: %v, %v; want only the other tag's try", objs, err)
	}
	if st, err := runs.ReadTag(ctx, s, "r", "t"); err != nil || st.Full != "" || len(st.Shards) != 0 {
		t.Errorf("after wipe the tag holds %+v, %v", st, err)
	}
}
