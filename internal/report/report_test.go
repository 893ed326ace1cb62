package report

import (
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// A merge keeps the causes and the limit: 2 invalid + 1 lost of 8
// attempted cells is 37.5 %, over a 20 % limit, so the final score is
// refused naming the share, the limit and the fix; under a 50 % limit it
// stands.
func TestInvalidShareOfMerge(t *testing.T) {
	reps, keys := shardReports(2)
	for i := range reps {
		reps[i].MaxInvalidShare = 0.2
		reps[i].InitKey = FinalKey
	}
	// Shard 0: one episode of task 0 timed out; shard 1: one crashed, and a
	// cell has no record.
	invalid := func(r *schemas.Report, task int, cause string, lost bool) {
		for _, res := range []*schemas.TaskResult{&r.Tasks[task], &r.Suites[0], &r.Overall} {
			res.Valid--
			if lost {
				res.Episodes--
				res.Lost++
				continue
			}
			res.Invalid++
			if res.InvalidByCause == nil {
				res.InvalidByCause = map[string]int{}
			}
			res.InvalidByCause[cause]++
		}
	}
	invalid(&reps[0], 0, "timeout", false)
	invalid(&reps[1], 0, "crash", false)
	invalid(&reps[1], 0, "", true)
	m, err := MergeShards(reps, keys)
	if err != nil {
		t.Fatal(err)
	}
	o := m.Overall
	if o.Attempted() != 8 || o.InvalidShare() != 3.0/8 || Causes(o) != "crash:1 lost:1 timeout:1" {
		t.Errorf("merged overall %+v: attempted %d, share %v, causes %q", o, o.Attempted(), o.InvalidShare(), Causes(o))
	}
	if !m.OverInvalidLimit || m.MaxInvalidShare != 0.2 {
		t.Errorf("merged report: over limit %v, limit %v; want over 0.2", m.OverInvalidLimit, m.MaxInvalidShare)
	}
	if len(o.SuccessCI95) != 2 || o.SuccessCI95[0] >= o.SuccessRate || o.SuccessCI95[1] <= o.SuccessRate {
		t.Errorf("overall interval %v around %v", o.SuccessCI95, o.SuccessRate)
	}
	err = FinalScoreError(m)
	for _, want := range []string{"not a final score", "3 of 8", "37.5%", "limit of 20%", "collect.max_invalid_share", "crash:1 lost:1 timeout:1", "new --tag"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("final score error %v lacks %q", err, want)
		}
	}
	m.MaxInvalidShare = 0.5
	FinishRates(&m)
	if m.OverInvalidLimit || FinalScoreError(m) != nil {
		t.Errorf("37.5%% invalid under a 50%% limit was refused")
	}
	// A report from before limits were recorded is judged by the default.
	old := schemas.Report{Overall: schemas.TaskResult{Episodes: 10, Valid: 7, Invalid: 3}}
	if !OverInvalidLimit(old) || Causes(old.Overall) != "unknown:3" {
		t.Errorf("old report, 30%% invalid: over %v, causes %q", OverInvalidLimit(old), Causes(old.Overall))
	}
}

// A final score covers its protocol: a required task with no valid
// episode, or a required task absent from the report, refuses it even
// under the invalid limit; a task outside the protocol does not count in
// the score.
func TestFinalScoreCoversTheProtocol(t *testing.T) {
	res := func(id int32, suite string, valid, succ, invalid int) schemas.TaskResult {
		return schemas.TaskResult{Task: id, Name: suite + "_x", Suite: suite, Episodes: valid + invalid, Valid: valid, Invalid: invalid, Successes: succ}
	}
	rep := schemas.Report{InitKey: FinalKey, Protocol: "P", ProtocolEpisodes: 30, RequiredTasks: []int32{0, 1, 2}, MaxInvalidShare: 0.5,
		Tasks: []schemas.TaskResult{res(0, "a", 10, 5, 0), res(1, "a", 10, 4, 0), res(2, "b", 10, 9, 0), res(9, "train", 10, 0, 0)}}
	for _, t := range rep.Tasks {
		add(&rep.Overall, t)
	}
	FinishRates(&rep)
	if err := FinalScoreError(rep); err != nil {
		t.Fatalf("a covered protocol was refused: %v", err)
	}
	if p := ProtocolResult(rep); p.Valid != 30 || p.Successes != 18 || len(p.SuccessCI95) != 2 {
		t.Errorf("protocol result %+v: want the three required tasks only (18/30)", p)
	}

	empty := rep
	empty.Tasks = append([]schemas.TaskResult{}, rep.Tasks...)
	empty.Tasks[2] = res(2, "b", 0, 0, 10) // every episode of task 2 invalid
	err := FinalScoreError(empty)
	for _, want := range []string{"not a final score of P", "1 required tasks have no valid episode", "2 b_x"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("task without a valid episode: %v lacks %q", err, want)
		}
	}

	absent := rep
	absent.RequiredTasks = []int32{0, 1, 2, 3}
	if err := FinalScoreError(absent); err == nil || !strings.Contains(err.Error(), "no result for required tasks 3") {
		t.Errorf("absent task: %v", err)
	}

	short := rep
	short.ProtocolEpisodes = 800
	if err := FinalScoreError(short); err == nil || !strings.Contains(err.Error(), "30 cells, the protocol 800") {
		t.Errorf("cell count: %v", err)
	}

	// Reports without a protocol require every task they list.
	old := schemas.Report{InitKey: FinalKey, Tasks: []schemas.TaskResult{res(0, "", 5, 1, 0), res(1, "", 0, 0, 5)}}
	if err := FinalScoreError(old); err == nil || !strings.Contains(err.Error(), "the harness's tasks") {
		t.Errorf("old report with an uncovered task: %v", err)
	}
}
