package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// The eval table shows both denominators with intervals and the invalid
// causes; over the invalid limit it says so, and on eval_init_ids refuses
// to call the rate a final score.
func TestWriteTable(t *testing.T) {
	task := schemas.TaskResult{Task: 0, Name: "stack", Episodes: 29, Valid: 27, Invalid: 2, Lost: 1, Successes: 19,
		InvalidByCause: map[string]int{"timeout": 2}}
	rep := schemas.Report{Run: "demo", Tag: "v1", WeightsID: "r3", InitKey: "val_init_ids", Harness: "minimal", MaxInvalidShare: 0.2,
		Tasks: []schemas.TaskResult{task}, Overall: task}
	rep.Overall.Task = -1
	var out bytes.Buffer
	if err := WriteTable(&out, rep, "b"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"success / valid [95% CI]", "success / attempted", "70.4% [51–85]", "63.3% [45–79]",
		"invalid by cause: lost:1 timeout:2 (10.0% of 30 attempted", "validation score (val_init_ids): 70.4% [51–85] over 27 valid of 30 attempted"} {
		if !strings.Contains(got, want) {
			t.Errorf("eval report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "TOO MANY INVALID") {
		t.Errorf("10%% invalid under a 20%% limit flagged:\n%s", got)
	}

	// The same on eval_init_ids is a final score; with 8 more timeouts
	// (10 of 38 attempted) it is over the limit and refused.
	rep.InitKey = FinalKey
	out.Reset()
	if err := WriteTable(&out, rep, "b"); err != nil || !strings.Contains(out.String(), "final score (eval_init_ids, all 1 tasks): 70.4% [51–85]") {
		t.Errorf("final score: %v\n%s", err, out.String())
	}
	rep.Overall.Episodes += 8
	rep.Overall.Invalid += 8
	rep.Overall.InvalidByCause = map[string]int{"timeout": 10}
	out.Reset()
	err := WriteTable(&out, rep, "b")
	if err == nil || !strings.Contains(err.Error(), "not a final score") || !strings.Contains(err.Error(), "limit of 20%") || !strings.Contains(err.Error(), "tag v1 of run demo") {
		t.Errorf("over the limit on eval_init_ids: error %v", err)
	}
	if got := out.String(); !strings.Contains(got, "!! TOO MANY INVALID: 28.9% of attempted episodes") || strings.Contains(got, "final score (") {
		t.Errorf("over the limit, the output:\n%s", got)
	}
}

// Under a protocol, the final score is over its required tasks only and
// names the protocol; a required task without a valid episode refuses it.
func TestWriteTableProtocolFinalScore(t *testing.T) {
	res := func(id int32, suite string, valid, succ int, causes map[string]int) schemas.TaskResult {
		inv := 0
		for _, n := range causes {
			inv += n
		}
		return schemas.TaskResult{Task: id, Name: fmt.Sprintf("%s_%d", suite, id), Suite: suite, Episodes: valid + inv, Valid: valid, Invalid: inv, Successes: succ, InvalidByCause: causes}
	}
	rep := schemas.Report{Run: "pro", Tag: "final", InitKey: FinalKey, Protocol: "LIBERO-PRO", ProtocolEpisodes: 20, RequiredTasks: []int32{0, 1},
		Tasks: []schemas.TaskResult{res(0, "libero_object_swap", 9, 6, map[string]int{"infra": 1}), res(1, "libero_goal_swap", 10, 9, nil), res(2, "extra", 10, 0, nil)}}
	for _, t := range rep.Tasks {
		rep.Overall.Episodes += t.Episodes
		rep.Overall.Valid += t.Valid
		rep.Overall.Invalid += t.Invalid
		rep.Overall.Successes += t.Successes
	}
	var out bytes.Buffer
	if err := WriteTable(&out, rep, "b"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"final score (eval_init_ids, LIBERO-PRO: 2 required tasks): 78.9% [56–92] over 19 valid of 20 attempted", "infra:1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	rep.Tasks[1] = res(1, "libero_goal_swap", 0, 0, map[string]int{"infra": 10})
	out.Reset()
	if err := WriteTable(&out, rep, "b"); err == nil || !strings.Contains(err.Error(), "1 required tasks have no valid episode (1 libero_goal_swap_1)") {
		t.Errorf("uncovered required task: %v", err)
	}
}

// The diagnostics table: groups without signal, invalid causes, token
// capture, images, the trainer's numbers, task failures by reason and the
// validation trend with the final validation.
func TestWriteDiagnostics(t *testing.T) {
	sums := []schemas.RoundSummary{
		{Round: 1, WeightsID: "w0", NewWeightsID: "r1", ValSuccess: 0.3,
			BatchSummary: schemas.BatchSummary{Episodes: 36, Valid: 34, Invalid: 2, InvalidByCause: map[string]int{"timeout": 1, "infrastructure": 1},
				Successes: 20, Groups: 6, GroupsWithSignal: 4, Calls: 200, UntrainableCalls: 10, Samples: 90, Images: 12, ImageRefs: 90,
				TaskFailuresByReason: map[string]int{"max_turns": 3, "finish_claimed": 7},
				UntrainableByReason:  map[string]int{"failed": 2, "temperature_raw": 8}},
			Trainer: schemas.TrainerMetrics{Loss: 0.0123, LogprobMismatch: 1e-8, LogprobMismatchMax: 3.5e-7, DriftShare: 0.25, Steps: 2}},
		// Round 2: 4 timeouts and 2 lost of 20 attempted (30 %) is over the
		// 20 % limit; its validation has counts, so an interval.
		{Round: 2, WeightsID: "r1", NewWeightsID: "r2", ValSuccess: 0.5, Val: &schemas.TaskResult{Episodes: 30, Valid: 30, Successes: 15},
			BatchSummary: schemas.BatchSummary{Episodes: 18, Valid: 14, Invalid: 4, Successes: 7, InvalidByCause: map[string]int{"timeout": 4, "lost": 2}}},
	}
	var out bytes.Buffer
	WriteDiagnostics(&out, sums, schemas.State{Rounds: 2, RoundsDone: 2, FinalValSuccess: 0.7})
	got := out.String()
	for _, want := range []string{"95.0%", "infrastructure:1 timeout:1", "0.0123", "30.0% → 50.0% → 70.0% (final)", "logprob Δ mean", "3.5e-07", "25.0%", "12 (90 uses)", "task failures by reason: r1 finish_claimed:7 max_turns:3",
		"untrainable calls by reason: r1 failed:2 temperature_raw:8\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("diagnostics lack %q:\n%s", want, got)
		}
	}
	// Round 1 had 2 groups without signal.
	found := false
	for _, l := range strings.Split(got, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == "1" && f[1] == "2" && strings.Contains(l, "timeout") {
			found = true
		}
	}
	if !found {
		t.Errorf("no diagnostics row for round 1 with 2 groups without signal:\n%s", got)
	}
	// Before the last round is done, the final validation is not in the trend.
	out.Reset()
	WriteDiagnostics(&out, sums, schemas.State{Rounds: 3, RoundsDone: 2, FinalValSuccess: 0.7})
	if strings.Contains(out.String(), "(final)") {
		t.Errorf("an unfinished run's trend has a final validation:\n%s", out.String())
	}
}

func TestFinalValWarning(t *testing.T) {
	v := schemas.TaskResult{Episodes: 28, Valid: 24, Invalid: 4, Lost: 2, Successes: 20, InvalidByCause: map[string]int{"timeout": 4}}
	// 6 of 30 attempted is 20 %: at the default limit, not over it.
	if w := FinalValWarning(v, 0); w != "" {
		t.Errorf("20%% at a 20%% limit warned: %s", w)
	}
	if w := FinalValWarning(v, 0.1); !strings.Contains(w, "6 of 30 attempted episodes invalid or lost (lost:2 timeout:4), over the limit of 10%") {
		t.Errorf("20%% over a 10%% limit: %q", w)
	}
}
