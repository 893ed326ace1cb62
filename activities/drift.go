package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Drift measures how far the trainer's logprobs are from the model
// server's on one recorded round (`starter drift`, docs/design.md §4
// "Drift guard"): the harness's trainer command, with --drift-report
// added, scores the round's batch under the weights that sampled it and
// writes every token's difference instead of training. The summary goes
// to runs/<run>/drift/round=<R>/drift.json; a retry measures again and
// overwrites it (nothing else is written).
func (t *Trainer) Drift(ctx context.Context, in api.DriftInput) (schemas.DriftReport, error) {
	var rep schemas.DriftReport
	h, err := t.harnesses.get(ctx, t.Store, in.Run)
	if err != nil {
		return rep, err
	}
	l := schemas.Layout{Run: in.Run}
	weightsIn, err := t.roundWeights(ctx, l, in.Round)
	if err != nil {
		return rep, err
	}
	batch := l.Batch(in.Round)
	if _, err := t.Store.ETag(ctx, batch); err != nil {
		if store.IsNotFound(err) {
			return rep, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"run %s round %d has no batch (s3://%s/%s): the round has not built one yet, or had no samples; measure a round that trained",
				in.Run, in.Round, t.Store.Bucket, batch), "NoBatch", nil)
		}
		return rep, err
	}
	tr, err := t.newTrainTry(ctx, h, TrainInput{Run: in.Run, Round: in.Round, BatchKey: batch, WeightsID: weightsIn, NewWeightsID: "drift"}, "drift")
	if err != nil {
		return rep, err
	}
	defer tr.rdzv.Release()
	tr.logKey = l.Drift(in.Round) + ".log" // not the round's own trainer logs
	if err := t.fetchInputs(ctx, tr); err != nil {
		return rep, err
	}
	args, env, err := tr.command()
	if err != nil {
		return rep, err
	}
	out := filepath.Join(tr.dir, "drift-report.json")
	args = append(args, "--drift-report", out)
	res, err := t.runTrainer(ctx, tr, args, env)
	if err != nil {
		return rep, fmt.Errorf("drift measurement of round %d: %w", in.Round, err)
	}
	if res.TimedOut || res.ExitCode != 0 {
		full, _ := os.ReadFile(tr.logPath)
		return rep, fmt.Errorf("drift measurement of round %d: the trainer failed (exit %d, timed out %v; log s3://%s/%s): %s",
			in.Round, res.ExitCode, res.TimedOut, t.Store.Bucket, tr.logKey, trainerCause(string(full), res.TimedOut))
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return rep, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"harness %s: the trainer exited 0 without writing its --drift-report file (%v): its trainer must take --drift-report FILE "+
				"and write the per-token differences there instead of training (docs/design.md §4)", h.Name, err), "BadHarness", nil)
	}
	var tdr schemas.TrainerDriftReport
	if err := json.Unmarshal(raw, &tdr); err != nil {
		return rep, temporal.NewNonRetryableApplicationError(fmt.Sprintf("harness %s: the trainer's drift report: %v", h.Name, err), "BadHarness", nil)
	}
	if err := report.Drift(tdr, &rep); err != nil {
		return rep, temporal.NewNonRetryableApplicationError(fmt.Sprintf("harness %s: the trainer's %v", h.Name, err), "BadHarness", nil)
	}
	rep.Run, rep.Round, rep.WeightsID = in.Run, in.Round, weightsIn
	rep.Current = map[string]string{}
	for _, k := range []string{"drift_limit", "drift_call_limit", "drift_token_limit", "drift_token_share"} {
		if v, ok := h.Trainer.Hyper[k]; ok {
			rep.Current[k] = v
		}
	}
	rep.Key, rep.TrainerLog = l.Drift(in.Round), tr.logKey
	rep.FinishedAtMS = time.Now().UnixMilli()
	if err := store.PutJSON(ctx, t.Store, rep.Key, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// roundWeights is the weights a round's collection sampled with: the
// round summary's, or, for the round in progress, the run's current ones.
func (t *Trainer) roundWeights(ctx context.Context, l schemas.Layout, round int32) (string, error) {
	var st schemas.State
	if err := store.GetJSON(ctx, t.Store, l.State(), &st); err != nil {
		return "", fmt.Errorf("run %s state: %w", l.Run, err)
	}
	for _, s := range st.Summaries {
		if s.Round == round {
			return s.WeightsID, nil
		}
	}
	if round == st.RoundsDone+1 {
		return st.WeightsID, nil
	}
	return "", temporal.NewNonRetryableApplicationError(fmt.Sprintf("run %s has no round %d: it has done %d rounds (starter status --run %s)",
		l.Run, round, st.RoundsDone, l.Run), "NoRound", nil)
}
