package report

import (
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestCheckPool(t *testing.T) {
	h, err := harness.Load("../../harnesses/minimal/harness.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	files, err := weights.Dir("../../harnesses/minimal/weights/w0")
	if err != nil {
		t.Fatal(err)
	}
	desc, err := weights.Describe(files)
	if err != nil {
		t.Fatal(err)
	}
	good := schemas.Report{Run: "sft", Tag: "sft_val", WeightsID: "w0", InitKey: ValKey, Harness: h.Name, Digest: h.Digest,
		WeightsDigest: schemas.WeightsDigest(desc), Scope: schemas.ScopeFull, Shards: 1, Tasks: []schemas.TaskResult{{Task: 0}}}
	if err := CheckPool(good, desc, h, false); err != nil {
		t.Fatalf("a validation of the same weights and harness refused: %v", err)
	}
	with := func(change func(*schemas.Report)) schemas.Report { r := good; change(&r); return r }
	for _, c := range []struct {
		name       string
		rep        schemas.Report
		anyWeights bool
		want       string // "" when accepted
	}{
		{"other weights", with(func(r *schemas.Report) { r.WeightsDigest = "0123456789abcdef" }), false, "stale"},
		{"other weights, overridden", with(func(r *schemas.Report) { r.WeightsDigest = "0123456789abcdef" }), true, ""},
		{"no weights digest", with(func(r *schemas.Report) { r.WeightsDigest = "" }), false, "--pool-report-any-weights"},
		{"final-test split", with(func(r *schemas.Report) { r.InitKey = FinalKey }), false, "final-test"},
		{"final-test split, overridden", with(func(r *schemas.Report) { r.InitKey = FinalKey }), true, "final-test"},
		{"a shard", with(func(r *schemas.Report) { r.Scope, r.Shard, r.Shards = schemas.ScopeShard, 1, 4 }), false, "report merge"},
		{"other harness", with(func(r *schemas.Report) { r.Digest = "feedfeedfeedfeed" }), false, "config digest"},
		{"other harness, overridden", with(func(r *schemas.Report) { r.Digest = "feedfeedfeedfeed" }), true, "config digest"},
		{"hand-written", schemas.Report{Tasks: []schemas.TaskResult{{Task: 0}}}, false, "hand-written"},
		{"hand-written, overridden", schemas.Report{Tasks: []schemas.TaskResult{{Task: 0}}}, true, ""},
	} {
		err := CheckPool(c.rep, desc, h, c.anyWeights)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}
