package activities_test

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/npz"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// TestBuildBatch stores a round's records in the real S3 server and checks
// the batch: leave-one-out advantages per group over valid episodes only,
// groups without diversity dropped, untrainable calls never selected, at
// most N calls per episode each weighing 1/selected, token arrays intact.
func TestBuildBatch(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	l := schemas.Layout{Run: "b"}
	put := func(e schemas.Episode, calls []schemas.Call) {
		t.Helper()
		e.Run, e.Round, e.Phase = "b", 1, schemas.PhaseTrain
		e.EpisodeID = schemas.EpisodeID(1, schemas.PhaseTrain, e.Group, e.Attempt)
		for i := range calls {
			calls[i].EpisodeID, calls[i].CallIndex = e.EpisodeID, int32(i)
		}
		if _, err := store.WriteParquet(ctx, s, l.Calls(1, schemas.PhaseTrain, e.EpisodeID), calls); err != nil {
			t.Fatal(err)
		}
		if _, err := store.WriteParquet(ctx, s, l.Episodes(1, schemas.PhaseTrain, e.EpisodeID), []schemas.Episode{e}); err != nil {
			t.Fatal(err)
		}
	}
	call := func(prompt, compl int32) schemas.Call {
		return schemas.Call{Trainable: true, PromptTokenIDs: []int32{prompt, prompt + 1}, CompletionTokenIDs: []int32{compl, 2},
			CompletionLogprobs: []float32{-float32(compl) / 10, 0}, PromptTokens: 2, CompletionTokens: 2}
	}
	// Group 0: rewards 1, 0, 0 plus one invalid episode (excluded, not a zero).
	put(schemas.Episode{Group: 0, Attempt: 0, Valid: true, Success: true, Reward: 1}, []schemas.Call{call(10, 5), call(11, 6)})
	put(schemas.Episode{Group: 0, Attempt: 1, Valid: true, Reward: 0, Reason: "max_turns"}, []schemas.Call{call(20, 7), {Trainable: false, PromptTokenIDs: []int32{1}}})
	put(schemas.Episode{Group: 0, Attempt: 2, Valid: true, Reward: 0, Reason: "out_of_time"}, []schemas.Call{call(30, 8), call(31, 9), call(32, 3)})
	put(schemas.Episode{Group: 0, Attempt: 3, Valid: false, FailureClass: schemas.FailureInfra}, []schemas.Call{call(40, 4)})
	// Group 1: all failed: no signal.
	put(schemas.Episode{Group: 1, Attempt: 0, Valid: true}, []schemas.Call{call(50, 5)})
	put(schemas.Episode{Group: 1, Attempt: 1, Valid: true}, []schemas.Call{call(60, 5)})

	aenv := recordsEnv(s)
	var rec *activities.Records
	v, err := aenv.ExecuteActivity(rec.BuildBatch, activities.BatchInput{Run: "b", Round: 1, MaxCallsPerEpisode: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var sum schemas.BatchSummary
	if err := v.Get(&sum); err != nil {
		t.Fatal(err)
	}
	if sum.Episodes != 6 || sum.Valid != 5 || sum.Invalid != 1 || sum.InvalidByCause[schemas.FailureInfra] != 1 {
		t.Errorf("episode counts %+v", sum)
	}
	// Task failures by reason: the two above, group 1's two rows have none
	// recorded (written before reasons existed).
	if want := map[string]int{"max_turns": 1, "out_of_time": 1, "unrecorded": 2}; !reflect.DeepEqual(sum.TaskFailuresByReason, want) {
		t.Errorf("task failures by reason %v, want %v", sum.TaskFailuresByReason, want)
	}
	if sum.Groups != 2 || sum.GroupsWithSignal != 1 {
		t.Errorf("groups %d with signal %d, want 2 and 1", sum.Groups, sum.GroupsWithSignal)
	}
	// Group 0: 2 + 1 + 2 (capped from 3) selected; one untrainable call counted.
	if sum.Samples != 5 || sum.UntrainableCalls != 1 || sum.Calls != 7 {
		t.Errorf("samples %d untrainable %d calls %d, want 5, 1, 7", sum.Samples, sum.UntrainableCalls, sum.Calls)
	}
	samples, err := store.ReadParquet[schemas.Sample](ctx, s, l.Samples(1))
	if err != nil {
		t.Fatal(err)
	}
	wsum := map[string]float64{}
	for _, x := range samples {
		wsum[x.EpisodeID] += x.Weight
		want := map[int32]float64{0: 1, 1: -0.5, 2: -0.5}[attemptOf(x.EpisodeID)]
		if math.Abs(x.Advantage-want) > 1e-9 {
			t.Errorf("%s advantage %v, want %v", x.EpisodeID, x.Advantage, want)
		}
	}
	for ep, w := range wsum {
		if math.Abs(w-1) > 1e-9 {
			t.Errorf("weights of %s sum to %v, want 1", ep, w)
		}
	}

	arrs := readBatch(t, s, sum.BatchKey)
	off := arrs[schemas.BatchCompletionOffsets].([]int64)
	ids := arrs[schemas.BatchCompletionIDs].([]int32)
	lp := arrs[schemas.BatchRolloutLogprobs].([]float32)
	adv := arrs[schemas.BatchAdvantages].([]float32)
	if len(off) != 6 || len(adv) != 5 || int(off[5]) != len(ids) || len(lp) != len(ids) {
		t.Fatalf("array shapes: offsets %d advantages %d ids %d logprobs %d", len(off), len(adv), len(ids), len(lp))
	}
	if ids[0] != 5 || lp[0] != -0.5 || adv[0] != 1 {
		t.Errorf("first call: id %d logprob %v advantage %v, want 5, -0.5, 1", ids[0], lp[0], adv[0])
	}
}

// TestBuildBatchFilters checks the length and post-success filters in
// BuildBatch, their from-round gating, the counts of dropped calls, and that
// a compacted calls partition gives the same batch as per-episode files.
func TestBuildBatchFilters(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	const round = 6
	l := schemas.Layout{Run: "f"}
	put := func(e schemas.Episode, calls []schemas.Call) {
		t.Helper()
		e.Run, e.Round, e.Phase, e.Valid = "f", round, schemas.PhaseTrain, true
		e.EpisodeID = schemas.EpisodeID(round, schemas.PhaseTrain, e.Group, e.Attempt)
		for i := range calls {
			c := &calls[i]
			c.EpisodeID, c.CallIndex, c.Trainable = e.EpisodeID, int32(i), true
			c.CompletionTokenIDs, c.CompletionLogprobs = []int32{int32(i)}, []float32{-1}
			c.PromptTokens, c.CompletionTokens = int32(len(c.PromptTokenIDs)), 1
		}
		if _, err := store.WriteParquet(ctx, s, l.Calls(round, schemas.PhaseTrain, e.EpisodeID), calls); err != nil {
			t.Fatal(err)
		}
		if _, err := store.WriteParquet(ctx, s, l.Episodes(round, schemas.PhaseTrain, e.EpisodeID), []schemas.Episode{e}); err != nil {
			t.Fatal(err)
		}
	}
	short, long := []int32{1, 2}, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	// Success reported after call 1: calls 2 and 3 are post-success; call 1 is too long.
	put(schemas.Episode{Group: 0, Attempt: 0, Success: true, Reward: 1, SuccessCall: 2},
		[]schemas.Call{{PromptTokenIDs: short}, {PromptTokenIDs: long}, {PromptTokenIDs: short}, {PromptTokenIDs: short}})
	// Failure: success never came (-1); one long call.
	put(schemas.Episode{Group: 0, Attempt: 1, SuccessCall: -1},
		[]schemas.Call{{PromptTokenIDs: short}, {PromptTokenIDs: long}, {PromptTokenIDs: short}})

	aenv := recordsEnv(s)
	var rec *activities.Records
	build := func(f schemas.Filters) (schemas.BatchSummary, []schemas.Sample) {
		t.Helper()
		v, err := aenv.ExecuteActivity(rec.BuildBatch, activities.BatchInput{Run: "f", Round: round, MaxCallsPerEpisode: 16, Seed: 1, Filters: f})
		if err != nil {
			t.Fatal(err)
		}
		var sum schemas.BatchSummary
		if err := v.Get(&sum); err != nil {
			t.Fatal(err)
		}
		samples, err := store.ReadParquet[schemas.Sample](ctx, s, l.Samples(round))
		if err != nil {
			t.Fatal(err)
		}
		return sum, samples
	}
	calls := func(samples []schemas.Sample) map[string][]int32 {
		out := map[string][]int32{}
		for _, x := range samples {
			out[x.EpisodeID] = append(out[x.EpisodeID], x.CallIndex)
		}
		return out
	}
	a0, a1 := schemas.EpisodeID(round, schemas.PhaseTrain, 0, 0), schemas.EpisodeID(round, schemas.PhaseTrain, 0, 1)
	on := schemas.Filters{MaxTokens: 5, MaxTokensFromRound: round, PostSuccess: true, PostSuccessFromRound: round}
	for _, c := range []struct {
		name            string
		f               schemas.Filters
		length, success int
		want            map[string][]int32
	}{
		{"off", schemas.Filters{}, 0, 0, map[string][]int32{a0: {0, 1, 2, 3}, a1: {0, 1, 2}}},
		{"not yet", schemas.Filters{MaxTokens: 5, MaxTokensFromRound: round + 1, PostSuccess: true, PostSuccessFromRound: round + 1},
			0, 0, map[string][]int32{a0: {0, 1, 2, 3}, a1: {0, 1, 2}}},
		{"length", schemas.Filters{MaxTokens: 5}, 2, 0, map[string][]int32{a0: {0, 2, 3}, a1: {0, 2}}},
		{"post-success", schemas.Filters{PostSuccess: true}, 0, 2, map[string][]int32{a0: {0, 1}, a1: {0, 1, 2}}},
		{"both from round 6", on, 2, 2, map[string][]int32{a0: {0}, a1: {0, 2}}},
	} {
		sum, samples := build(c.f)
		if sum.DroppedLength != c.length || sum.DroppedPostSuccess != c.success || sum.Calls != 7 {
			t.Errorf("%s: dropped length %d post-success %d of %d calls, want %d, %d of 7", c.name, sum.DroppedLength, sum.DroppedPostSuccess, sum.Calls, c.length, c.success)
		}
		if got := calls(samples); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: selected %v, want %v", c.name, got, c.want)
		}
	}

	// The same batch from the compacted partition, byte for byte.
	before, err := s.Get(ctx, l.Batch(round))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Compact(ctx, s, l.CallsDir(round, schemas.PhaseTrain), func(c schemas.Call) string { return c.EpisodeID }); err != nil {
		t.Fatal(err)
	}
	if sum, samples := build(on); sum.Samples != 3 || !reflect.DeepEqual(calls(samples), map[string][]int32{a0: {0}, a1: {0, 2}}) {
		t.Errorf("compacted: %d samples %v", sum.Samples, calls(samples))
	}
	after, err := s.Get(ctx, l.Batch(round))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("batch from the compacted partition differs (%d vs %d bytes)", len(after), len(before))
	}
}

// attemptOf reads the attempt from an id like r1-train-g000-a02.
func attemptOf(id string) int32 { return int32(id[len(id)-1] - '0') }

// TestBuildBatchImages: each sample lists its request's images in prompt
// order (repeats kept) as indexes into the batch's distinct image names;
// a harness that declares a text-only model refuses a batch with images,
// naming the call, instead of training without them.
func TestBuildBatchImages(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	a, b, c := strings.Repeat("a", 64)+".png", strings.Repeat("b", 64)+".png", strings.Repeat("c", 64)+".jpg"
	store1 := func(run string, vision bool) {
		t.Helper()
		l := schemas.Layout{Run: run}
		h := schemas.Harness{Name: "h"}
		h.Model.Vision = vision
		if err := store.PutJSON(ctx, s, l.Harness(), h); err != nil {
			t.Fatal(err)
		}
		for attempt, imgs := range [][][]string{{{a, b}, {a, b, a}}, {{c}}} {
			e := schemas.Episode{Run: run, Round: 1, Phase: schemas.PhaseTrain, Group: 0, Attempt: int32(attempt),
				Valid: true, Success: attempt == 0, Reward: float64(1 - attempt)}
			e.EpisodeID = schemas.EpisodeID(1, schemas.PhaseTrain, 0, e.Attempt)
			var calls []schemas.Call
			for i, im := range imgs {
				calls = append(calls, schemas.Call{EpisodeID: e.EpisodeID, CallIndex: int32(i), Trainable: true,
					PromptTokenIDs: []int32{1, 2}, CompletionTokenIDs: []int32{3}, CompletionLogprobs: []float32{-1},
					PromptTokens: 2, CompletionTokens: 1, Images: im})
			}
			if _, err := store.WriteParquet(ctx, s, l.Calls(1, schemas.PhaseTrain, e.EpisodeID), calls); err != nil {
				t.Fatal(err)
			}
			if _, err := store.WriteParquet(ctx, s, l.Episodes(1, schemas.PhaseTrain, e.EpisodeID), []schemas.Episode{e}); err != nil {
				t.Fatal(err)
			}
		}
	}
	aenv := recordsEnv(s)
	var rec *activities.Records

	store1("vlm", true)
	v, err := aenv.ExecuteActivity(rec.BuildBatch, activities.BatchInput{Run: "vlm", Round: 1, MaxCallsPerEpisode: 16, Selection: "first", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var sum schemas.BatchSummary
	if err := v.Get(&sum); err != nil {
		t.Fatal(err)
	}
	if sum.Samples != 3 || sum.Images != 3 || sum.ImageRefs != 6 {
		t.Fatalf("samples %d images %d refs %d, want 3, 3, 6", sum.Samples, sum.Images, sum.ImageRefs)
	}
	arrs := readBatch(t, s, sum.BatchKey)
	names := arrs[schemas.BatchImages].([]string)
	index := arrs[schemas.BatchImageIndex].([]int32)
	off := arrs[schemas.BatchImageOffsets].([]int64)
	var got [][]string
	for i := 0; i+1 < len(off); i++ {
		var im []string
		for _, j := range index[off[i]:off[i+1]] {
			im = append(im, names[j])
		}
		got = append(got, im)
	}
	if want := [][]string{{a, b}, {a, b, a}, {c}}; !reflect.DeepEqual(got, want) || len(names) != 3 {
		t.Errorf("per-sample images %v (names %v), want %v", got, names, want)
	}

	store1("text", false)
	_, err = aenv.ExecuteActivity(rec.BuildBatch, activities.BatchInput{Run: "text", Round: 1, MaxCallsPerEpisode: 16, Selection: "first", Seed: 1})
	if err == nil || !strings.Contains(err.Error(), "text-only") || !strings.Contains(err.Error(), "model_server.vision: true") ||
		!strings.Contains(err.Error(), schemas.EpisodeID(1, schemas.PhaseTrain, 0, 0)) {
		t.Fatalf("text-only harness with images: %v", err)
	}
}

// readBatch downloads a stored batch.npz and reads its arrays.
func readBatch(t *testing.T, s *store.Store, key string) map[string]any {
	t.Helper()
	local := filepath.Join(t.TempDir(), "batch.npz")
	if err := s.GetFile(context.Background(), key, local); err != nil {
		t.Fatal(err)
	}
	arrs, err := npz.ReadFile(local)
	if err != nil {
		t.Fatal(err)
	}
	return arrs
}
