package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// TestOverlappedRun trains 3 rounds of the minimal harness with max
// staleness 1 on the real stack, as a user starts it: round 2 collects on
// w0 while round 1 trains, round 3 on r1 once it exists; what the round
// records, the samples table and the new weights' manifests say about
// staleness agrees with the weights each stored episode ran on, and
// nothing is past the bound. A resume asking for another bound is refused
// naming both.
func TestOverlappedRun(t *testing.T) {
	itest.Slow(t)
	stack := itest.Start(t)
	bins := itest.Binaries(t)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	stack.StartWorker(t, bins, "main")

	const run = "itest-overlap"
	cfg := filepath.Join(root, "harnesses/minimal/harness.yaml")
	out, err := stack.Starter(ctx, t, bins, "train", "--config", cfg, "--run", run, "--max-staleness", "1",
		"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"), "--rounds", "3", "--groups", "6", "--attempts", "4",
		"--var", "bin="+bins).CombinedOutput()
	if err != nil {
		t.Fatalf("starter train: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "overlapped (max staleness 1") {
		t.Errorf("the start line does not say the rounds overlap:\n%s", out)
	}
	l := schemas.Layout{Run: run}
	var st schemas.State
	if err := store.GetJSON(ctx, stack.Store, l.State(), &st); err != nil || len(st.Summaries) != 3 {
		t.Fatalf("state: %+v, %v", st, err)
	}
	wantOn := map[int32]string{1: "w0", 2: "w0", 3: "r1"}
	for _, s := range st.Summaries {
		k := s.Round
		if s.CollectedOn != wantOn[k] || s.MaxStaleness != 1 || s.WeightsID != schemas.TrainingWeightsID(k-1) {
			t.Errorf("round %d: collected on %q, trained from %q, bound %d; want %s, %s, 1", k, s.CollectedOn, s.WeightsID, s.MaxStaleness, wantOn[k], schemas.TrainingWeightsID(k-1))
		}
		if s.ValSuccess < 0 || s.PoolFrom == "" {
			t.Errorf("round %d: validation %v, pool from %q; want the validation of %s and the report its pool came from", k, s.ValSuccess, s.PoolFrom, s.WeightsID)
		}
		if s.Samples == 0 {
			t.Fatalf("round %d trained nothing: its staleness says nothing\n%s", k, out)
		}
		// The round's episodes, as stored: each ran on one weights id, and
		// the stale count follows from it.
		eps, err := store.ReadTable(ctx, stack.Store, l.EpisodesDir(k, schemas.PhaseTrain), func(e schemas.Episode) string { return e.EpisodeID })
		if err != nil || len(eps) == 0 {
			t.Fatalf("round %d episodes: %d, %v", k, len(eps), err)
		}
		on := map[string]string{}
		for _, e := range eps {
			on[e.EpisodeID] = e.WeightsID
			if e.WeightsID != wantOn[k] {
				t.Errorf("round %d episode %s ran on %s, want %s", k, e.EpisodeID, e.WeightsID, wantOn[k])
			}
		}
		samples, err := store.ReadParquet[schemas.Sample](ctx, stack.Store, l.Samples(k))
		if err != nil || len(samples) != s.Samples {
			t.Fatalf("round %d samples: %d of %d, %v", k, len(samples), s.Samples, err)
		}
		hist := schemas.Staleness{}
		for _, x := range samples {
			v, err := schemas.WeightsVersion(on[x.EpisodeID])
			if err != nil {
				t.Fatal(err)
			}
			want := k - 1 - v
			if x.WeightsID != on[x.EpisodeID] || x.Staleness != want || x.Staleness > 1 {
				t.Errorf("round %d sample %s/%d: weights %s staleness %d; its episode ran on %s: want staleness %d", k, x.EpisodeID, x.CallIndex, x.WeightsID, x.Staleness, on[x.EpisodeID], want)
			}
			hist[x.Staleness]++
		}
		if s.Staleness.String() != hist.String() {
			t.Errorf("round %d: recorded staleness %v, the samples make %v", k, s.Staleness, hist)
		}
		man, err := weights.Read(ctx, stack.Store, l.Weights(schemas.TrainingWeightsID(k)))
		if err != nil {
			t.Fatal(err)
		}
		if man.Staleness.String() != hist.String() || man.SampledBy[wantOn[k]] != len(samples) || man.Batch != s.BatchKey {
			t.Errorf("weights %s manifest: staleness %v, sampled by %v, batch %q; want %v, all %d by %s, %s",
				man.WeightsID, man.Staleness, man.SampledBy, man.Batch, hist, len(samples), wantOn[k], s.BatchKey)
		}
		// Stale samples are the trainer's policy lag, not its drift.
		if stale := hist[1]; s.Trainer.StaleSamples != stale {
			t.Errorf("round %d: trainer counted %d stale samples, the batch has %d", k, s.Trainer.StaleSamples, stale)
		}
	}
	// The final validation ran after the last round, as without overlap.
	if st.FinalValSuccess < 0 {
		t.Errorf("final validation missing: %v", st.FinalValSuccess)
	}

	// The run is one execution: its history must leave room for runs of
	// hundreds of rounds under the server's 51,200 events.
	c, err := connect.Temporal(ctx, stack.Endpoints, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	desc, err := c.DescribeWorkflowExecution(ctx, api.WorkflowID(run), "")
	if err != nil {
		t.Fatal(err)
	}
	events := desc.GetWorkflowExecutionInfo().GetHistoryLength()
	t.Logf("history: %d events for 3 rounds and the final validation", events)
	if per := events / 3; per > 250 {
		t.Errorf("%d history events per round: 200 rounds would pass the server's 51,200", per)
	}

	out, err = stack.Starter(ctx, t, bins, "train", "--config", cfg, "--run", run, "--max-staleness", "2", "--rounds", "4",
		"--var", "bin="+bins).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "started with max staleness 1; this resume asks for 2") {
		t.Errorf("a resume with another bound: %v\n%s", err, out)
	}
}
