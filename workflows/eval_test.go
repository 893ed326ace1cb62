package workflows

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// evalEnv is a test environment with the activities of an evaluation
// mocked: episodes (recorded in *eps) and the report (its input in *rin).
func evalEnv(t *testing.T, eps *[]activities.EpisodeInput, rin *activities.ReportInput, compacted *bool) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	env := mockEnv()
	var ro *activities.Rollout
	var rec *activities.Records
	var mu sync.Mutex
	env.OnActivity(ro.RunEpisode, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			*eps = append(*eps, in)
			return activities.EpisodeResult{Valid: true, Success: in.Task.ID == 1}, nil
		})
	env.OnActivity(rec.WriteReport, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ReportInput) (schemas.Report, error) {
			*rin = in
			return schemas.Report{Tag: in.Tag, Shard: in.Shard, Shards: in.Shards, Overall: schemas.TaskResult{Task: -1, SuccessRate: 0.5}, Stopped: in.Stopped}, nil
		})
	env.OnActivity(rec.Compact, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.CompactInput) (store.CompactStats, error) {
			*compacted = true
			return store.CompactStats{}, nil
		})
	return env
}

// TestEvalShard: shard 1 of 2 runs exactly the cells with odd index, each
// once, in round 0 of the tag's phase, and writes a shard report without
// compacting the partition other shards still write into.
func TestEvalShard(t *testing.T) {
	var eps []activities.EpisodeInput
	var rin activities.ReportInput
	var compacted bool
	env := evalEnv(t, &eps, &rin, &compacted)
	h := testHarness() // 3 tasks × val ids 45, 46: cells 0..5
	env.ExecuteWorkflow(Eval, api.EvalInput{Run: "r", Harness: h, WeightsID: "w0", Tag: "t", InitKey: "val_init_ids", Shard: 1, Shards: 2})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if len(eps) != 3 {
		t.Fatalf("shard 1/2 ran %d episodes, want 3 of 6 cells", len(eps))
	}
	seen := map[int32]bool{}
	for _, in := range eps {
		if in.Group%2 != 1 || seen[in.Group] {
			t.Errorf("episode of cell %d: not shard 1/2's, or twice", in.Group)
		}
		seen[in.Group] = true
		// Cell index = task position × 2 ids + id position; 45, 46 sorted.
		wantTask, wantInit := in.Group/2, int32(45+in.Group%2)
		if in.Task.ID != wantTask || in.InitID != wantInit {
			t.Errorf("cell %d is task %d init %d, want task %d init %d", in.Group, in.Task.ID, in.InitID, wantTask, wantInit)
		}
		if in.Round != 0 || in.Phase != "eval-t" || in.WeightsID != "w0" || in.Attempt != 0 {
			t.Errorf("episode input %+v", in)
		}
	}
	if rin.Shard != 1 || rin.Shards != 2 || rin.Phase != "eval-t" || rin.Tag != "t" || rin.InitKey != "val_init_ids" || rin.WeightsID != "w0" || rin.StartedAtMS <= 0 {
		t.Errorf("report input %+v", rin)
	}
	if compacted {
		t.Error("a shard compacted the tag's partition, which other shards may still write")
	}
	var rep schemas.Report
	if err := env.GetWorkflowResult(&rep); err != nil || rep.Shards != 2 || rep.Shard != 1 {
		t.Errorf("result %+v (%v)", rep, err)
	}
	v, err := env.QueryWorkflow(api.EvalProgressQuery)
	if err != nil {
		t.Fatal(err)
	}
	var p api.EvalProgress
	if err := v.Get(&p); err != nil {
		t.Fatal(err)
	}
	if p.Phase != "done" || p.Episodes.Done != 3 || p.Episodes.Total != 3 || p.Episodes.Successes != 1 || p.Shard != 1 || p.Shards != 2 {
		t.Errorf("progress %+v", p)
	}
}

// TestEvalWhole: without shards every cell of eval_init_ids runs once; the
// report is the full one and the partition is compacted.
func TestEvalWhole(t *testing.T) {
	var eps []activities.EpisodeInput
	var rin activities.ReportInput
	var compacted bool
	env := evalEnv(t, &eps, &rin, &compacted)
	env.ExecuteWorkflow(Eval, api.EvalInput{Run: "r", Harness: testHarness(), WeightsID: "r2", Tag: "final", InitKey: "eval_init_ids"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if len(eps) != 6 {
		t.Fatalf("ran %d episodes, want 3 tasks × 2 eval ids", len(eps))
	}
	cells := map[[2]int32]bool{}
	for _, in := range eps {
		if in.InitID < 1 || in.InitID > 2 {
			t.Errorf("init id %d outside eval_init_ids 1-2", in.InitID)
		}
		cells[[2]int32{in.Task.ID, in.InitID}] = true
	}
	if len(cells) != 6 {
		t.Errorf("%d distinct cells, want 6", len(cells))
	}
	if rin.Shards != 1 || rin.Shard != 0 {
		t.Errorf("report input %+v, want the whole split", rin)
	}
	if !compacted {
		t.Error("a whole evaluation did not compact its partition")
	}
}

// TestEvalSkippedIsIncomplete: every episode gets the evaluation's own
// stop marker; episodes that skipped themselves make the report
// incomplete, and an incomplete evaluation does not compact.
func TestEvalSkippedIsIncomplete(t *testing.T) {
	env := mockEnv()
	var ro *activities.Rollout
	var rec *activities.Records
	var mu sync.Mutex
	keys := map[string]bool{}
	env.OnActivity(ro.RunEpisode, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			keys[in.StopKey] = true
			// Task 2's episodes start after the stop.
			return activities.EpisodeResult{Valid: in.Task.ID != 2, Skipped: in.Task.ID == 2}, nil
		})
	var rin activities.ReportInput
	env.OnActivity(rec.WriteReport, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ReportInput) (schemas.Report, error) {
			rin = in
			return schemas.Report{Tag: in.Tag, Stopped: in.Stopped}, nil
		})
	compacted := false
	env.OnActivity(rec.Compact, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.CompactInput) (store.CompactStats, error) {
			compacted = true
			return store.CompactStats{}, nil
		})
	env.ExecuteWorkflow(Eval, api.EvalInput{Run: "r", Harness: testHarness(), WeightsID: "r2", Tag: "t1", InitKey: "eval_init_ids"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Fatalf("stop keys %v, want one for all episodes", keys)
	}
	for k := range keys {
		if !strings.HasPrefix(k, schemas.Layout{Run: "r"}.EvalDir("t1")+"STOP-") {
			t.Errorf("stop key %q, want the evaluation's own under eval/t1/", k)
		}
	}
	if rin.Stopped == nil || rin.Stopped.Skipped != 2 || rin.Stopped.Reason == "" {
		t.Errorf("report input stopped %+v, want 2 skipped (task 2 × 2 eval ids) and a reason", rin.Stopped)
	}
	if compacted {
		t.Error("an incomplete evaluation compacted its partition")
	}
}

// TestEvalBadInput: a split that is not an evaluation split, or a shard
// outside its count, fails before any episode.
func TestEvalBadInput(t *testing.T) {
	for _, c := range []struct {
		in   api.EvalInput
		want string
	}{
		{api.EvalInput{InitKey: "train_init_ids"}, "val_init_ids or eval_init_ids"},
		{api.EvalInput{InitKey: "val_init_ids", Shard: 2, Shards: 2}, "0..1"},
	} {
		var eps []activities.EpisodeInput
		var rin activities.ReportInput
		var compacted bool
		env := evalEnv(t, &eps, &rin, &compacted)
		c.in.Run, c.in.Harness, c.in.Tag, c.in.WeightsID = "r", testHarness(), "t", "w0"
		env.ExecuteWorkflow(Eval, c.in)
		err := env.GetWorkflowError()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.in, err, c.want)
		}
		if len(eps) != 0 {
			t.Errorf("%+v ran %d episodes", c.in, len(eps))
		}
	}
}

// An episode whose model server ignores call seeds (SeedsIgnored) stops
// the evaluation with that cause, beside another episode lost otherwise,
// and no report is written.
func TestEvalStopsOnIgnoredSeeds(t *testing.T) {
	env := mockEnv()
	var ro *activities.Rollout
	var rec *activities.Records
	env.OnActivity(ro.RunEpisode, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
			if in.Group == 2 {
				return activities.EpisodeResult{}, temporal.NewNonRetryableApplicationError(
					"episode r0-eval-t-g002-a00: model server x ignores the per-request seed", activities.SeedsIgnored, nil)
			}
			if in.Group == 3 {
				return activities.EpisodeResult{}, temporal.NewNonRetryableApplicationError("something else", "Other", nil)
			}
			return activities.EpisodeResult{Valid: true}, nil
		})
	reported := false
	env.OnActivity(rec.WriteReport, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ReportInput) (schemas.Report, error) {
			reported = true
			return schemas.Report{Tag: in.Tag}, nil
		})
	env.OnActivity(rec.Compact, mock.Anything, mock.Anything).Return(store.CompactStats{}, nil)
	env.ExecuteWorkflow(Eval, api.EvalInput{Run: "r", Harness: testHarness(), WeightsID: "w0", Tag: "t", InitKey: "val_init_ids"})
	err := env.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), "eval t: SeedsIgnored: episode r0-eval-t-g002-a00: model server x ignores") || reported {
		t.Errorf("eval with a server ignoring seeds: %v, report written %v; want it stopped with SeedsIgnored and no report", err, reported)
	}
}
