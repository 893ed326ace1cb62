package main

import (
	"reflect"
	"testing"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/env"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
)

// TestCommittedWeights regenerates the initial weights with the default flags
// and compares them with the committed file, so a change to the environment's
// texts cannot leave weights/w0 stale. It also checks the prior's promise:
// tasks start at different success rates strictly between 0 and 1.
func TestCommittedWeights(t *testing.T) {
	if testing.Short() {
		t.Skip("tunes the prior by bisection")
	}
	p, err := build(1, 1.0, 2.0)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := policy.Load("../../weights/w0/policy.json")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.File, committed.File) {
		t.Fatal("weights/w0/policy.json differs from what minimal-init generates: rerun go run ./harnesses/minimal/cmd/minimal-init")
	}
	var sum float64
	rates := map[float64]bool{}
	for task := range env.NumTasks() {
		s, err := meanSuccess(committed, task)
		if err != nil {
			t.Fatal(err)
		}
		if s < 0.1 || s > 0.6 {
			t.Errorf("task %d starts at success %.3f, want within (0.1, 0.6)", task, s)
		}
		sum += s
		rates[float64(int(s*100))] = true
	}
	if mean := sum / float64(env.NumTasks()); mean < 0.25 || mean > 0.45 {
		t.Errorf("initial success %.3f, want 0.25–0.45", mean)
	}
	if len(rates) < 3 {
		t.Errorf("tasks start at too similar success rates %v", rates)
	}
}
