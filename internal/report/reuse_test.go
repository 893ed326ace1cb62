package report

import (
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestSplitCellIDs(t *testing.T) {
	h := schemas.Harness{Name: "h", Tasks: []schemas.Task{{ID: 3}, {ID: 7}},
		Splits: schemas.Splits{Val: "45-46", Eval: "1-3"}}
	got, err := SplitCellIDs(h, ValKey)
	if err != nil {
		t.Fatal(err)
	}
	if want := "3:45 3:46 7:45 7:46"; strings.Join(got, " ") != want {
		t.Errorf("cells %v, want %s", got, want)
	}
	if _, err := SplitCellIDs(h, "train_init_ids"); err == nil {
		t.Error("train_init_ids accepted")
	}
}

func TestReusable(t *testing.T) {
	w := Wanted{WeightsID: "r2", WeightsDigest: "dw", Config: "dc", InitKey: ValKey, Cells: []string{"0:45", "0:46", "1:45", "1:46"}}
	good := schemas.Report{Tag: "val-r3", WeightsID: "r2", WeightsDigest: "dw", Digest: "dc", InitKey: ValKey,
		Cells: []string{"1:46", "0:45", "1:45", "0:46"}, Scope: schemas.ScopeFull, Shards: 1, FinishedAtMS: 10}
	if m := w.Mismatch(good); m != "" {
		t.Errorf("the same evaluation (cells in another order) is not reused: %s", m)
	}
	// A report from before weights digests is reused by its id.
	old := good
	old.WeightsDigest = ""
	if m := w.Mismatch(old); m != "" {
		t.Errorf("a report without weights digest is not reused: %s", m)
	}
	for _, c := range []struct {
		edit func(*schemas.Report)
		want string
	}{
		{func(r *schemas.Report) { r.Digest = "other" }, "harness digest other, not dc"},
		{func(r *schemas.Report) { r.Cells = r.Cells[:3] }, "other cells (only in the first: none; only in the second: 1, first 0:46)"},
		{func(r *schemas.Report) { r.Cells = append(r.Cells, "2:45") }, "other cells (only in the first: 1, first 2:45"},
		{func(r *schemas.Report) { r.Cells = nil }, "no cell list"},
		{func(r *schemas.Report) { r.WeightsID = "r1" }, "weights r1, not r2"},
		{func(r *schemas.Report) { r.WeightsDigest = "dx" }, "weights digest dx"},
		{func(r *schemas.Report) { r.InitKey = FinalKey }, "init key eval_init_ids"},
		{func(r *schemas.Report) { r.Scope, r.Shard, r.Shards = schemas.ScopeShard, 1, 2 }, "shard 1/2 only"},
	} {
		r := good
		r.Cells = append([]string(nil), good.Cells...)
		c.edit(&r)
		if m := w.Mismatch(r); !strings.Contains(m, c.want) {
			t.Errorf("mismatch %q, want %q", m, c.want)
		}
		if _, ok, why := Reusable([]schemas.Report{r}, w); ok || (r.WeightsID == w.WeightsID && !strings.Contains(why, "report val-r3 has "+c.want)) {
			t.Errorf("%q: reused %v, why %q", c.want, ok, why)
		}
	}

	// Of two that stand for it, the later one; no other weights' report is named.
	later := good
	later.Tag, later.FinishedAtMS = "cmp-r2-val-dc", 20
	other := good
	other.Tag, other.WeightsID = "val-r1", "w0"
	rep, ok, why := Reusable([]schemas.Report{other, good, later}, w)
	if !ok || rep.Tag != "cmp-r2-val-dc" || why != "" {
		t.Errorf("reused %v %s (%q), want cmp-r2-val-dc", ok, rep.Tag, why)
	}
	if _, ok, why := Reusable([]schemas.Report{other}, w); ok || why != "" {
		t.Errorf("only another weights' report: reused %v, why %q", ok, why)
	}
}
