package drill

import (
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestParsePart(t *testing.T) {
	for id, want := range map[string]partKey{
		"r2-train-g017-a03":     {2, "train"},
		"r3-val-g004-a00":       {3, "val"},
		"r0-eval-my-tag-g12-a0": {0, ""}, // round 0 is an evaluation, never a training round
	} {
		got, ok := parsePart(id)
		if want.phase == "" {
			if ok {
				t.Errorf("parsePart(%q) = %v, want refused", id, got)
			}
			continue
		}
		if !ok || got != want {
			t.Errorf("parsePart(%q) = %v %v, want %v", id, got, ok, want)
		}
	}
	if _, ok := parsePart("nonsense"); ok {
		t.Error("parsePart accepted nonsense")
	}
}

// TestPlan: the episodes planned follow the Train workflow's rules, and
// only for rounds that started.
func TestPlan(t *testing.T) {
	h := schemas.Harness{Tasks: []schemas.Task{{ID: 0}, {ID: 2}}}
	h.Splits.Val = "45-46"
	h.Collect.ValidateEveryRound, h.Collect.FinalValidation = true, true
	spec := schemas.RunSpec{Rounds: 2, Groups: 4, Attempts: 4}
	count := func(p map[string]partKey, phase string) int {
		n := 0
		for _, k := range p {
			if k.phase == phase {
				n++
			}
		}
		return n
	}
	p, err := plan(spec, h, Accepted{Rounds: map[int32]bool{1: true, 2: true}, Completed: true})
	if err != nil {
		t.Fatal(err)
	}
	if count(p, "train") != 32 || count(p, "val") != 12 {
		t.Errorf("complete run: %d train, %d val planned; want 32, 12", count(p, "train"), count(p, "val"))
	}
	if _, ok := p["r3-val-g003-a00"]; !ok {
		t.Error("the final validation (round 3) is not planned")
	}
	// Stopped in round 1, started with a pool report, no validation every round.
	spec.PoolReport = "runs/x/pool-report.json"
	h.Collect.ValidateEveryRound = false
	p, err = plan(spec, h, Accepted{Rounds: map[int32]bool{1: true}})
	if err != nil {
		t.Fatal(err)
	}
	if count(p, "train") != 16 || count(p, "val") != 0 {
		t.Errorf("stopped run: %d train, %d val planned; want 16, 0", count(p, "train"), count(p, "val"))
	}
}
