package workflows

import (
	"context"
	"sort"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// sweepEnv is a test environment with the Records activities registered
// and Eval mocked: each evaluation is recorded, its success rate taken
// from rates.
func sweepEnv(t *testing.T, rates map[string]float64) (*testsuite.TestWorkflowEnvironment, *[]api.EvalInput) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Records{})
	env.RegisterWorkflow(Eval)
	var evals []api.EvalInput
	env.OnWorkflow(Eval, mock.Anything, mock.Anything).Return(
		func(_ workflow.Context, in api.EvalInput) (schemas.Report, error) {
			evals = append(evals, in)
			return schemas.Report{Run: in.Run, Tag: in.Tag, WeightsID: in.WeightsID, InitKey: in.InitKey,
				Overall: schemas.TaskResult{Task: -1, Episodes: 10, Valid: 10, Successes: int(10 * rates[in.WeightsID]), SuccessRate: rates[in.WeightsID]}}, nil
		})
	return env, &evals
}

// TestSweepEvaluatesOnlyNewWeights: weights already on the leaderboard are
// skipped, the new ones are evaluated in the evaluation run under a tag
// derived from their id, and the last leaderboard write holds every entry.
func TestSweepEvaluatesOnlyNewWeights(t *testing.T) {
	env, evals := sweepEnv(t, map[string]float64{"r2": 0.7, "r3": 0.4})
	var rec *activities.Records
	var listed activities.SweepSource
	env.OnActivity(rec.ListSweepWeights, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.SweepSource) ([]activities.SweepWeights, error) {
			listed = in
			return []activities.SweepWeights{{ID: "w0"}, {ID: "r1"}, {ID: "r2"}, {ID: "r3"}}, nil
		})
	env.OnActivity(rec.ReadLeaderboard, mock.Anything, "nightly").Return(schemas.Leaderboard{
		Sweep: "nightly", Source: "demo", Run: "demo", InitKey: "val_init_ids", Entries: []schemas.LeaderboardEntry{
			{WeightsID: "w0", RunWeightsID: "w0", Tag: "sweep-nightly-w0", SuccessRate: 0.3, Valid: 10, Episodes: 10},
			{WeightsID: "r1", RunWeightsID: "r1", Tag: "sweep-nightly-r1", SuccessRate: 0.5, Valid: 10, Episodes: 10},
		}}, nil)
	env.OnActivity(rec.FindReport, mock.Anything, mock.Anything).Return(activities.FoundReport{}, nil)
	var writes []schemas.Leaderboard
	env.OnActivity(rec.WriteLeaderboard, mock.Anything, mock.Anything).Return(
		func(_ context.Context, lb schemas.Leaderboard) error {
			writes = append(writes, lb)
			return nil
		})
	env.OnActivity(rec.ImportWeights, mock.Anything, mock.Anything).Return(
		func(context.Context, activities.ImportInput) (schemas.WeightsManifest, error) {
			t.Error("weights of a run source were imported")
			return schemas.WeightsManifest{}, nil
		}).Maybe()

	h := testHarness()
	h.Digest = "d1"
	env.ExecuteWorkflow(Sweep, api.SweepInput{Name: "nightly", Source: "demo", Run: "demo", Harness: h})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res api.SweepResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if listed.Source != "demo" || listed.Run != "demo" || listed.HarnessDigest != "d1" {
		t.Errorf("listed %+v", listed)
	}
	var got []string
	for _, e := range *evals {
		got = append(got, e.WeightsID)
		if e.Run != "demo" || e.Tag != "sweep-nightly-"+e.WeightsID || e.InitKey != "val_init_ids" || e.Harness.Digest != "d1" {
			t.Errorf("eval input %+v", e)
		}
	}
	if len(got) != 2 || got[0] != "r2" || got[1] != "r3" {
		t.Fatalf("evaluated %v, want [r2 r3]", got)
	}
	if res.Skipped != 2 || len(res.Evaluated) != 2 || len(res.Failed) != 0 || res.Leaderboard != "sweeps/nightly/leaderboard.json" {
		t.Errorf("result %+v", res)
	}
	if len(writes) == 0 {
		t.Fatal("leaderboard never written")
	}
	last := writes[len(writes)-1]
	if last.Sweep != "nightly" || last.Source != "demo" || last.Run != "demo" || last.InitKey != "val_init_ids" {
		t.Errorf("leaderboard header %+v", last)
	}
	byID := map[string]schemas.LeaderboardEntry{}
	for _, e := range last.Entries {
		byID[e.WeightsID] = e
	}
	if len(last.Entries) != 4 || len(byID) != 4 {
		t.Fatalf("last leaderboard write has %d entries, want w0 r1 r2 r3 once each: %+v", len(last.Entries), last.Entries)
	}
	r2 := byID["r2"]
	if r2.SuccessRate != 0.7 || r2.Valid != 10 || r2.Episodes != 10 || r2.Tag != "sweep-nightly-r2" ||
		r2.ReportKey != "runs/demo/eval/sweep-nightly-r2/report.json" || r2.RunWeightsID != "r2" || r2.EvaluatedAtMS == 0 {
		t.Errorf("entry of r2 %+v", r2)
	}
	if byID["w0"].SuccessRate != 0.3 {
		t.Errorf("an earlier entry changed: %+v", byID["w0"])
	}
}

// TestSweepImportsPrefixWeights: weights of an s3 prefix are imported into
// the evaluation run under a content-named id before their evaluation; a
// report an earlier sweep wrote for the same weights is reused; a failed
// evaluation fails the sweep after the leaderboard has the others.
func TestSweepImportsPrefixWeights(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Records{})
	env.RegisterWorkflow(Eval)
	var rec *activities.Records
	const src = "s3://roundhouse/ckpts/"
	env.OnActivity(rec.ListSweepWeights, mock.Anything, mock.Anything).Return([]activities.SweepWeights{
		{ID: "a", Prefix: "ckpts/a/", Digest: "aaaaaaaaaaaaaaaa"},
		{ID: "b", Prefix: "ckpts/b/", Digest: "bbbbbbbbbbbbbbbb"},
		{ID: "c", Prefix: "ckpts/c/", Digest: "cccccccccccccccc"},
	}, nil)
	env.OnActivity(rec.ReadLeaderboard, mock.Anything, mock.Anything).Return(schemas.Leaderboard{Sweep: "ext"}, nil)
	var imports []activities.ImportInput
	env.OnActivity(rec.ImportWeights, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ImportInput) (schemas.WeightsManifest, error) {
			imports = append(imports, in)
			return schemas.WeightsManifest{WeightsID: in.Target}, nil
		})
	// b was evaluated before, but the sweep stopped before its leaderboard update.
	env.OnActivity(rec.FindReport, mock.Anything, mock.Anything).Return(
		func(_ context.Context, key string) (activities.FoundReport, error) {
			if key == "runs/sweep-ext/eval/sweep-ext-b/report.json" {
				return activities.FoundReport{Found: true, Report: schemas.Report{WeightsID: "b-bbbbbbbbbbbb", InitKey: "val_init_ids",
					Overall: schemas.TaskResult{Episodes: 4, Valid: 4, Successes: 1, SuccessRate: 0.25}}}, nil
			}
			return activities.FoundReport{}, nil
		})
	var evals []string
	env.OnWorkflow(Eval, mock.Anything, mock.Anything).Return(
		func(_ workflow.Context, in api.EvalInput) (schemas.Report, error) {
			evals = append(evals, in.WeightsID)
			if in.WeightsID == "c-cccccccccccc" {
				return schemas.Report{}, context.DeadlineExceeded
			}
			return schemas.Report{WeightsID: in.WeightsID, Overall: schemas.TaskResult{Episodes: 4, Valid: 4, Successes: 3, SuccessRate: 0.75}}, nil
		})
	var last schemas.Leaderboard
	env.OnActivity(rec.WriteLeaderboard, mock.Anything, mock.Anything).Return(
		func(_ context.Context, lb schemas.Leaderboard) error { last = lb; return nil })

	env.ExecuteWorkflow(Sweep, api.SweepInput{Name: "ext", Source: src, Run: schemas.SweepRun("ext"), Harness: testHarness(), Parallel: 2})
	if err := env.GetWorkflowError(); err == nil {
		t.Fatal("a failed evaluation did not fail the sweep")
	}
	if len(imports) != 3 {
		t.Fatalf("imports %+v", imports)
	}
	sort.Slice(imports, func(i, j int) bool { return imports[i].Target < imports[j].Target })
	if imports[0] != (activities.ImportInput{From: "ckpts/a/", Run: "sweep-ext", Target: "a-aaaaaaaaaaaa", Digest: "aaaaaaaaaaaaaaaa"}) {
		t.Errorf("import %+v", imports[0])
	}
	sort.Strings(evals)
	if len(evals) != 2 || evals[0] != "a-aaaaaaaaaaaa" || evals[1] != "c-cccccccccccc" {
		t.Errorf("evaluated %v, want a and c (b's report exists)", evals)
	}
	rates := map[string]float64{}
	for _, e := range last.Entries {
		rates[e.WeightsID] = e.SuccessRate
	}
	if len(last.Entries) != 2 || rates["a"] != 0.75 || rates["b"] != 0.25 || last.Source != src {
		t.Errorf("last leaderboard %+v", last)
	}
}
