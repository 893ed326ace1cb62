package workflows

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// overlapRun runs a 3-round training run with η = eta on mocked
// activities that take time (episodes 1 s, training 20 s, in the test
// environment's clock), and returns what the activities saw. stale, when
// set, replaces the batch's staleness histogram.
type overlapSeen struct {
	mu        sync.Mutex
	collected map[int32]map[string]bool // round → weights its episodes ran on
	val       map[int32]string          // validation round → weights
	reported  map[string]time.Time      // validation tag → when its report was written (the test clock)
	trained   []activities.TrainInput
	batches   []activities.BatchInput
	demands   []api.DemandChange
}

func overlapRun(t *testing.T, eta int32, stale schemas.Staleness) (*overlapSeen, api.TrainResult, error) {
	return overlapRunWith(t, eta, stale, nil)
}

// overlapRunWith is overlapRun with more set up on the environment first.
func overlapRunWith(t *testing.T, eta int32, stale schemas.Staleness, more func(*testsuite.TestWorkflowEnvironment)) (*overlapSeen, api.TrainResult, error) {
	t.Helper()
	return overlapRunTimed(t, eta, stale, 20*time.Second, time.Second, more)
}

// overlapRunTimed is overlapRunWith with trainings of trainFor and
// validation episodes of valFor.
func overlapRunTimed(t *testing.T, eta int32, stale schemas.Staleness, trainFor, valFor time.Duration, more func(*testsuite.TestWorkflowEnvironment)) (*overlapSeen, api.TrainResult, error) {
	t.Helper()
	env := bareEnv()
	var rec0 *activities.Records
	seen := &overlapSeen{collected: map[int32]map[string]bool{}, val: map[int32]string{}, reported: map[string]time.Time{}}
	env.OnActivity(rec0.Demand, mock.Anything, mock.Anything).Return(func(_ context.Context, d api.DemandChange) error {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		seen.demands = append(seen.demands, d)
		return nil
	})
	if more != nil {
		more(env)
	}
	var ro *activities.Rollout
	var rec *activities.Records
	var tr *activities.Trainer
	episode := func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		if in.Phase == schemas.PhaseVal {
			seen.val[in.Round] = in.WeightsID
		} else {
			if seen.collected[in.Round] == nil {
				seen.collected[in.Round] = map[string]bool{}
			}
			seen.collected[in.Round][in.WeightsID] = true
		}
		return activities.EpisodeResult{Valid: true}, nil
	}
	isVal := func(in activities.EpisodeInput) bool { return in.Phase == schemas.PhaseVal }
	env.OnActivity(ro.RunEpisode, mock.Anything, mock.MatchedBy(isVal)).After(valFor).Return(episode)
	env.OnActivity(ro.RunEpisode, mock.Anything, mock.Anything).After(time.Second).Return(episode)
	env.OnActivity(rec.WriteReport, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ReportInput) (schemas.Report, error) {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		seen.reported[in.Tag] = env.Now()
		return schemas.Report{Tasks: []schemas.TaskResult{
			{Task: 0, Valid: 2, SuccessRate: 0}, {Task: 1, Valid: 2, SuccessRate: 0.5}, {Task: 2, Valid: 2, SuccessRate: 1},
		}, Overall: schemas.TaskResult{SuccessRate: 0.5}}, nil
	})
	// The batch counts staleness as BuildBatch does: the trainer's
	// version less that of the weights the round's episodes ran on.
	env.OnActivity(rec.BuildBatch, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.BatchInput) (schemas.BatchSummary, error) {
			seen.mu.Lock()
			defer seen.mu.Unlock()
			seen.batches = append(seen.batches, in)
			hist := schemas.Staleness{}
			top, err := schemas.WeightsVersion(in.TrainerWeightsID)
			if err != nil {
				return schemas.BatchSummary{}, err
			}
			for w := range seen.collected[in.Round] {
				v, err := schemas.WeightsVersion(w)
				if err != nil {
					return schemas.BatchSummary{}, err
				}
				hist[top-v] += 8
			}
			if stale != nil {
				hist = stale
			}
			return schemas.BatchSummary{Episodes: 8, Valid: 8, Successes: 4, Groups: 4, GroupsWithSignal: 3, Samples: 8,
				BatchKey: "b", Staleness: hist}, nil
		})
	env.OnActivity(tr.Train, mock.Anything, mock.Anything).After(trainFor).Return(
		func(_ context.Context, in activities.TrainInput) (schemas.TrainerMetrics, error) {
			seen.mu.Lock()
			defer seen.mu.Unlock()
			seen.trained = append(seen.trained, in)
			return schemas.TrainerMetrics{Steps: 1}, nil
		})
	env.OnActivity(rec.FinishRound, mock.Anything, mock.Anything).Return(nil)
	env.OnActivity(rec.Compact, mock.Anything, mock.Anything).Return(store.CompactStats{}, nil)
	env.ExecuteWorkflow(Train, api.TrainInput{Run: "r", Harness: testHarness(), WeightsID: "w0", InitialWeightsID: "w0",
		Rounds: 3, Groups: 4, Attempts: 2, Round: 1, MaxStaleness: eta})
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	var res api.TrainResult
	err := env.GetWorkflowError()
	if err == nil {
		err = env.GetWorkflowResult(&res)
	}
	return seen, res, err
}

// TestOverlappedRounds: with η = 1 round 2 collects on the initial
// weights while round 1 trains, round 3 waits for r1 (on w0 it would be 2
// behind its trainer's r2); every trainer starts from the weights the
// round before left, and each round's record says what it collected on,
// what its pool came from and its staleness.
func TestOverlappedRounds(t *testing.T) {
	seen, res, err := overlapRun(t, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]string{1: "w0", 2: "w0", 3: "r1"}
	for k, w := range want {
		if len(seen.collected[k]) != 1 || !seen.collected[k][w] {
			t.Errorf("round %d collected on %v, want only %s", k, seen.collected[k], w)
		}
	}
	if len(seen.trained) != 3 {
		t.Fatalf("trained %d times, want 3", len(seen.trained))
	}
	for i, in := range seen.trained {
		from, to := schemas.TrainingWeightsID(int32(i)), schemas.TrainingWeightsID(int32(i+1))
		if in.Round != int32(i+1) || in.WeightsID != from || in.NewWeightsID != to {
			t.Errorf("training %d: round %d %s → %s, want round %d %s → %s", i, in.Round, in.WeightsID, in.NewWeightsID, i+1, from, to)
		}
	}
	for _, in := range seen.batches {
		if in.MaxStaleness != 1 || in.TrainerWeightsID != schemas.TrainingWeightsID(in.Round-1) {
			t.Errorf("batch of round %d: trainer %q, bound %d; want %s, 1", in.Round, in.TrainerWeightsID, in.MaxStaleness, schemas.TrainingWeightsID(in.Round-1))
		}
	}
	// Validations of new weights ran beside collection: r1 as round 2's,
	// r2 as round 3's.
	if seen.val[1] != "w0" || seen.val[2] != "r1" || seen.val[3] != "r2" {
		t.Errorf("validations %v, want round 1 of w0, 2 of r1, 3 of r2", seen.val)
	}
	if len(res.Summaries) != 3 || res.FinalWeightsID != "r3" {
		t.Fatalf("result: %d summaries, final weights %q; want 3, r3", len(res.Summaries), res.FinalWeightsID)
	}
	wantStale := []schemas.Staleness{{0: 8}, {1: 8}, {1: 8}}
	for i, s := range res.Summaries {
		if s.CollectedOn != want[s.Round] || s.MaxStaleness != 1 || s.Staleness.String() != wantStale[i].String() {
			t.Errorf("round %d: collected on %q, bound %d, staleness %v; want %s, 1, %v", s.Round, s.CollectedOn, s.MaxStaleness, s.Staleness, want[s.Round], wantStale[i])
		}
		if s.PoolFrom == "" || s.ValSuccess != 0.5 || s.Val == nil {
			t.Errorf("round %d: pool from %q, val %v; want a validation's tag and its success", s.Round, s.PoolFrom, s.ValSuccess)
		}
	}
	// Only round 1's validation, which its collection follows on the
	// same weights, asks the fleet to keep their server.
	for _, d := range seen.demands {
		if d.Done && d.Again && d.Demand.Weights != "r/w0" {
			t.Errorf("the fleet was told to keep %s's server for more (Again): only w0's validation is followed by a collection", d.Demand.Weights)
		}
	}
	if res.Summaries[0].PoolFrom != "val-r1" {
		t.Errorf("round 1's pool from %q, want val-r1", res.Summaries[0].PoolFrom)
	}
}

// TestSideValidationsInOrder: with trainings shorter than a validation
// (1 s against 5 s),
// the validations of r1 and r2 would overlap; the second starts only
// once the first's report is written, so each round's pool comes from a
// report that keeps advancing: reports come a validation's length apart.
func TestSideValidationsInOrder(t *testing.T) {
	seen, res, err := overlapRunTimed(t, 1, nil, time.Second, 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := int32(2); k <= 3; k++ {
		prev, this := seen.reported[schemas.ValTag(k-1)], seen.reported[schemas.ValTag(k)]
		if prev.IsZero() || this.Sub(prev) < 5*time.Second {
			t.Errorf("%s's report %v after %s's: want at least a validation's 5 s (%v)", schemas.ValTag(k), this.Sub(prev), schemas.ValTag(k-1), seen.reported)
		}
	}
	if len(res.Summaries) != 3 {
		t.Fatalf("%d summaries, want 3", len(res.Summaries))
	}
}

// TestSynchronousStaysSynchronous: η = 0 collects every round on the
// weights its trainer starts from.
func TestSynchronousStaysSynchronous(t *testing.T) {
	seen, _, err := overlapRun(t, 0, nil)
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("want the synchronous loop's continue-as-new after round 1, got %v", err)
	}
	if len(seen.collected[1]) != 1 || !seen.collected[1]["w0"] || len(seen.collected[2]) != 0 {
		t.Errorf("round 1 collected on %v and round 2 on %v; want w0, then nothing before continue-as-new", seen.collected[1], seen.collected[2])
	}
}

// TestStaleSampleRefused: a batch with a sample beyond the bound never
// reaches a trainer; the run fails naming the bound.
func TestStaleSampleRefused(t *testing.T) {
	seen, _, err := overlapRun(t, 1, schemas.Staleness{0: 4, 2: 1})
	if err == nil || !strings.Contains(err.Error(), "beyond collect.max_staleness 1") {
		t.Fatalf("want the run refused for a sample 2 versions behind, got %v", err)
	}
	if len(seen.trained) != 0 {
		t.Errorf("%d trainings ran on a batch beyond the bound", len(seen.trained))
	}
}

// TestOverlappedStop: a stop while round 1 trains and round 2 has been
// collected lets the training finish and records round 1; round 2 is not
// trained, and the saved state resumes at round 2 from r1.
func TestOverlappedStop(t *testing.T) {
	var saved []schemas.State
	seen, res, err := overlapRunWith(t, 1, nil, func(env *testsuite.TestWorkflowEnvironment) {
		var rec *activities.Records
		env.OnActivity(rec.MarkStop, mock.Anything, mock.Anything, mock.Anything).Return(nil)
		env.OnActivity(rec.SaveState, mock.Anything, mock.Anything).Return(func(_ context.Context, st schemas.State) error {
			saved = append(saved, st)
			return nil
		})
		// Validation and collection take about 2 s, training 20 s: 10 s in,
		// round 1 trains and round 2 is collected.
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(api.StopSignal, "test") }, 10*time.Second)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen.trained) != 1 || seen.trained[0].Round != 1 {
		t.Fatalf("trained %+v, want round 1 only", seen.trained)
	}
	if !seen.collected[2]["w0"] {
		t.Errorf("round 2 was not collected before the stop (on %v): the test stopped too early to show anything", seen.collected[2])
	}
	if !res.Stopped || res.StoppedRound != 2 || len(res.Summaries) != 1 {
		t.Errorf("result: stopped %v in round %d with %d summaries; want stopped in round 2 with round 1's", res.Stopped, res.StoppedRound, len(res.Summaries))
	}
	if len(saved) != 1 || saved[0].RoundsDone != 1 || saved[0].WeightsID != "r1" || !saved[0].Stopped {
		t.Errorf("saved state %+v; want 1 round done, weights r1, stopped", saved)
	}
}
