package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// A planner that samples at temperature 0.7 from a server returning raw
// logprobs (vLLM's default) makes no call trainable: the recorded
// logprobs are not the distribution its tokens were drawn from
// (docs/design.md §3, "Sampling settings"). The run must stop at round 1's
// validation, before collection, with the fix named once, and the
// validation's calls must record what they were sampled with.
func TestUntrainableSamplingStopsAtValidation(t *testing.T) {
	itest.Slow(t)
	stack := itest.Start(t)
	bins := itest.Binaries(t)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stack.StartWorker(t, bins, "main")

	const run = "itest-temperature-raw"
	out, err := stack.Starter(ctx, t, bins, "train", "--config", filepath.Join(root, "harnesses/minimal/harness.yaml"), "--run", run,
		"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"), "--rounds", "1", "--groups", "2", "--attempts", "2",
		"--var", "bin="+bins, "--var", "temperature=0.7").CombinedOutput()
	t.Logf("starter train (%v):\n%s", err, out)
	if err == nil {
		t.Fatal("starter train succeeded; want the run stopped at its validation")
	}
	var final string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "error: ") {
			final = l
		}
	}
	for _, want := range []string{"none of the", "round 1's validation could train", "temperature_raw:",
		"--logprobs-mode processed_logprobs"} {
		if n := strings.Count(final, want); n != 1 {
			t.Errorf("the final error has %q %d times, want once:\n%s", want, n, final)
		}
	}

	l := schemas.Layout{Run: run}
	// Collection never started: no training call was recorded.
	if keys, err := stack.Store.List(ctx, l.CallsDir(1, schemas.PhaseTrain)); err != nil || len(keys) > 0 {
		t.Errorf("round 1 collection recorded %d objects (%v); want none", len(keys), err)
	}
	// The validation's calls say what they were sampled with.
	var calls []schemas.Call
	err = store.ScanTable(ctx, stack.Store, l.CallsDir(1, schemas.PhaseVal),
		func(c schemas.Call) string { return c.EpisodeID }, nil,
		func(rows []schemas.Call) error { calls = append(calls, rows...); return nil })
	if err != nil || len(calls) == 0 {
		t.Fatalf("validation calls: %d, %v", len(calls), err)
	}
	for _, c := range calls {
		if c.Temperature != 0.7 || c.LogprobsMode != schemas.LogprobsRaw || c.Trainable || c.UntrainableReason != "temperature_raw" ||
			strings.Join(c.Defaulted, ",") != "top_p,top_k,min_p,repetition_penalty,presence_penalty,frequency_penalty" {
			t.Fatalf("call %s/%d: temperature %v, mode %q, trainable %v (%q), defaulted %v; want 0.7 raw, untrainable temperature_raw, the rest defaulted",
				c.EpisodeID, c.CallIndex, c.Temperature, c.LogprobsMode, c.Trainable, c.UntrainableReason, c.Defaulted)
		}
	}
}

// With the model server returning processed logprobs (vLLM's
// --logprobs-mode processed_logprobs; the toy mirrors it), a planner at
// temperature 0.7 trains: each call is recorded as trainable with its
// temperature, the batch carries it, and the trainer, dividing its logits
// by it, reproduces the recorded logprobs so that the drift guard (0.001
// on the toy) passes. The raw-logprobs case is the test above.
func TestProcessedLogprobsTrainAtTemperature(t *testing.T) {
	itest.Slow(t)
	stack := itest.Start(t)
	bins := itest.Binaries(t)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	stack.StartWorker(t, bins, "main")

	cfg := filepath.Join(t.TempDir(), "processed.yaml")
	yaml := "base: " + filepath.Join(root, "harnesses/minimal/harness.yaml") + "\nname: minimal-processed\n" +
		"model_server:\n" +
		`  command: ["{bin}/minimal-model", "--weights", "{weights}", "--listen", "127.0.0.1:{port}", "--served-name", "{served_name}",` + "\n" +
		`            "--logprobs-mode", "processed_logprobs", "--generation-config", "vllm"]` + "\n" +
		"  sampling: {logprobs_mode: processed_logprobs, generation_config: vllm}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	const run = "itest-temperature-processed"
	out, err := stack.Starter(ctx, t, bins, "train", "--config", cfg, "--run", run,
		"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"), "--rounds", "1", "--groups", "8", "--attempts", "6",
		"--var", "bin="+bins, "--var", "temperature=0.7").CombinedOutput()
	if err != nil {
		t.Fatalf("starter train: %v\n%s", err, out)
	}
	l := schemas.Layout{Run: run}
	var st schemas.State
	if err := store.GetJSON(ctx, stack.Store, l.State(), &st); err != nil || len(st.Summaries) != 1 {
		t.Fatalf("state: %+v, %v", st, err)
	}
	sum := st.Summaries[0]
	if sum.Samples == 0 || sum.BatchKey == "" {
		t.Fatalf("round 1 trained nothing (%d samples): a group with reward diversity is needed\n%s", sum.Samples, out)
	}
	tm := sum.Trainer
	if tm.Temperatures == nil || tm.Temperatures.Min != float64(float32(0.7)) || tm.Temperatures.Max != tm.Temperatures.Min {
		t.Errorf("the trainer divided by %+v, want 0.7 for every sample", tm.Temperatures)
	}
	if tm.LogprobMismatch > 1e-6 || tm.LogprobMismatchMax > 1e-5 {
		t.Errorf("logprob Δ mean %g max %g: the trainer did not reproduce the processed logprobs", tm.LogprobMismatch, tm.LogprobMismatchMax)
	}
	if sum.UntrainableCalls != 0 {
		t.Errorf("%d untrainable calls (%v), want none", sum.UntrainableCalls, sum.UntrainableByReason)
	}
	var calls []schemas.Call
	err = store.ScanTable(ctx, stack.Store, l.CallsDir(1, schemas.PhaseTrain),
		func(c schemas.Call) string { return c.EpisodeID }, nil,
		func(rows []schemas.Call) error { calls = append(calls, rows...); return nil })
	if err != nil || len(calls) == 0 {
		t.Fatalf("training calls: %d, %v", len(calls), err)
	}
	for _, c := range calls {
		if c.Temperature != 0.7 || c.LogprobsMode != schemas.LogprobsProcessed || !c.Trainable {
			t.Fatalf("call %s/%d: temperature %v, mode %q, trainable %v (%q)", c.EpisodeID, c.CallIndex, c.Temperature, c.LogprobsMode, c.Trainable, c.UntrainableReason)
		}
	}

	// starter drift measures the same round on the training worker: every
	// token of the batch, all within float rounding of the recorded ones.
	out, err = stack.Starter(ctx, t, bins, "drift", "--run", run, "--round", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("starter drift: %v\n%s", err, out)
	}
	t.Logf("starter drift:\n%s", out)
	var dr schemas.DriftReport
	if err := store.GetJSON(ctx, stack.Store, l.Drift(1), &dr); err != nil {
		t.Fatalf("drift report: %v", err)
	}
	if dr.Samples != sum.Samples || dr.Tokens != tm.Tokens || dr.WeightsID != sum.WeightsID || dr.Token.Max > 1e-5 ||
		dr.Current["drift_limit"] == "" {
		t.Errorf("drift report %+v: want the round's %d samples and %d tokens under %s, within 1e-5, and the harness's limits",
			dr, sum.Samples, tm.Tokens, sum.WeightsID)
	}
	for _, want := range []string{"per token", "per call", "drift_call_limit", l.Drift(1)} {
		if !strings.Contains(string(out), want) {
			t.Errorf("starter drift printed no %q", want)
		}
	}
	// A run that does not exist, and a round that never ran, are refused
	// naming what there is.
	out, err = stack.Starter(ctx, t, bins, "drift", "--run", "no-such-run", "--round", "1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "run no-such-run not found") {
		t.Errorf("starter drift of a run that does not exist: %v\n%s", err, out)
	}
	out, err = stack.Starter(ctx, t, bins, "drift", "--run", run, "--round", "5").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "has no round 5: it has done 1 rounds") {
		t.Errorf("starter drift of a round that never ran: %v\n%s", err, out)
	}
}
