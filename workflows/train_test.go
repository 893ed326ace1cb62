package workflows

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// mockEnv is a workflow test environment with every activity and the
// Episodes workflow registered, for tests to mock what they use.
func mockEnv() *testsuite.TestWorkflowEnvironment {
	env := bareEnv()
	var rec *activities.Records
	env.OnActivity(rec.Demand, mock.Anything, mock.Anything).Return(nil).Maybe()
	return env
}

// bareEnv is mockEnv without the fleet's Demand mocked, for tests that
// follow it.
func bareEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivityWithOptions(&activities.Rollout{}, activity.RegisterOptions{SkipInvalidStructFunctions: true})
	env.RegisterActivity(&activities.Records{})
	env.RegisterActivity(&activities.Trainer{})
	env.RegisterWorkflow(Episodes)
	return env
}

func testHarness() schemas.Harness {
	return schemas.Harness{
		Name:   "t",
		Tasks:  []schemas.Task{{ID: 0, Name: "a"}, {ID: 1, Name: "b"}, {ID: 2, Name: "c"}},
		Splits: schemas.Splits{Train: "11-14", Val: "45-46", Eval: "1-2"},
		Collect: schemas.Collect{Groups: 4, Attempts: 2, MaxCallsPerEpisode: 16, InfraRetries: 1, Seed: 1,
			PoolBand: [2]float64{0, 1}, ValidateEveryRound: true},
	}
}

// TestRoundFlow checks one round's order and inputs: validation of every
// (task, val id), a pool of the tasks with mixed outcomes only, groups ×
// attempts episodes on the pool, the batch, training, then continue-as-new.
func TestRoundFlow(t *testing.T) {
	env := mockEnv()
	var ro *activities.Rollout
	var rec *activities.Records
	var tr *activities.Trainer

	var val, collect []activities.EpisodeInput
	env.OnActivity(ro.RunEpisode, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
			if in.Phase == schemas.PhaseVal {
				val = append(val, in)
			} else {
				collect = append(collect, in)
			}
			return activities.EpisodeResult{Valid: true}, nil
		})
	// Task 1 has mixed outcomes, task 0 always fails and task 2 always succeeds.
	env.OnActivity(rec.WriteReport, mock.Anything, mock.Anything).Return(schemas.Report{Tasks: []schemas.TaskResult{
		{Task: 0, Valid: 2, SuccessRate: 0}, {Task: 1, Valid: 2, SuccessRate: 0.5}, {Task: 2, Valid: 2, SuccessRate: 1},
	}, Overall: schemas.TaskResult{SuccessRate: 0.5}}, nil)
	env.OnActivity(rec.BuildBatch, mock.Anything, mock.Anything).Return(schemas.BatchSummary{
		Episodes: 8, Valid: 8, Successes: 4, Groups: 4, GroupsWithSignal: 3, Samples: 20, BatchKey: "b"}, nil)
	var trained activities.TrainInput
	env.OnActivity(tr.Train, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.TrainInput) (schemas.TrainerMetrics, error) {
			trained = in
			return schemas.TrainerMetrics{Steps: 1}, nil
		})
	env.OnActivity(rec.FinishRound, mock.Anything, mock.Anything).Return(nil)
	env.OnActivity(rec.Compact, mock.Anything, mock.Anything).Return(store.CompactStats{}, nil)

	env.ExecuteWorkflow(Train, api.TrainInput{Run: "r", Harness: testHarness(), WeightsID: "w0", InitialWeightsID: "w0",
		Rounds: 2, Groups: 4, Attempts: 2, Round: 1})
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("want continue-as-new after round 1 of 2, got %v", err)
	}
	if len(val) != 6 {
		t.Errorf("validation ran %d episodes, want 3 tasks × 2 val ids = 6", len(val))
	}
	if len(collect) != 8 {
		t.Fatalf("collection ran %d episodes, want 4 groups × 2 attempts", len(collect))
	}
	for _, in := range collect {
		if in.Task.ID != 1 {
			t.Errorf("collected on task %d, outside the pool [1]", in.Task.ID)
		}
		if in.InitID < 11 || in.InitID > 14 {
			t.Errorf("collected on init id %d, outside train_init_ids", in.InitID)
		}
		if in.WeightsID != "w0" || in.InfraTries != 2 {
			t.Errorf("episode input %+v", in)
		}
	}
	if trained.WeightsID != "w0" || trained.NewWeightsID != "r1" || trained.BatchKey != "b" {
		t.Errorf("train input %+v", trained)
	}
}

// TestEpisodeLossDoesNotAbortRound: an episode whose activity fails for
// good is counted as lost and the round still trains.
func TestEpisodeLossDoesNotAbortRound(t *testing.T) {
	env := mockEnv()
	var ro *activities.Rollout
	var rec *activities.Records
	env.OnActivity(ro.RunEpisode, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
			if in.Phase == schemas.PhaseTrain && in.Group == 0 && in.Attempt == 0 {
				return activities.EpisodeResult{}, errors.New("host on fire")
			}
			return activities.EpisodeResult{Valid: true}, nil
		})
	env.OnActivity(rec.WriteReport, mock.Anything, mock.Anything).Return(schemas.Report{}, nil)
	env.OnActivity(rec.BuildBatch, mock.Anything, mock.Anything).Return(schemas.BatchSummary{Episodes: 7, Samples: 0}, nil)
	env.OnActivity(rec.FinishRound, mock.Anything, mock.Anything).Return(nil)
	env.OnActivity(rec.Compact, mock.Anything, mock.Anything).Return(store.CompactStats{}, nil)
	env.ExecuteWorkflow(Train, api.TrainInput{Run: "r", Harness: testHarness(), WeightsID: "w0", Rounds: 1, Groups: 4, Attempts: 2, Round: 1})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("round aborted: %v", err)
	}
	var res api.TrainResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	s0 := res.Summaries[0]
	if s0.InvalidByCause["lost"] != 1 {
		t.Errorf("lost episodes = %v, want 1", s0.InvalidByCause)
	}
	if s0.NewWeightsID != "w0" {
		t.Errorf("no samples must leave weights unchanged, got %q", s0.NewWeightsID)
	}
	// No valid collection episode of 8 attempted: over the default limit,
	// and the summary says so; the validation's counts are kept.
	if s0.OverInvalidLimit != "collection" || s0.MaxInvalidShare != schemas.DefaultMaxInvalidShare || s0.Val == nil {
		t.Errorf("summary: over limit %q, limit %v, val %v; want collection, the default, and the validation's result", s0.OverInvalidLimit, s0.MaxInvalidShare, s0.Val)
	}
}
