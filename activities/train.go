package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/devstack"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Trainer runs the harness's trainer command on the training host.
type Trainer struct {
	Store   *store.Store
	WorkDir string
	// BeforeTrain frees the host when it also runs episodes (rollout
	// services that ask to stop before training).
	BeforeTrain func()

	harnesses harnessCache
}

// TrainInput is one training update: batch + input weights → output weights.
type TrainInput struct {
	Run        string
	Round      int32
	BatchKey   string
	WeightsIn  string
	WeightsOut string
}

// Train runs the trainer as a subprocess (torchrun in real use), heartbeating
// while it runs, then stores the new weights and metrics.json. metrics.json
// is written last: when it exists the update is complete, and a retry
// returns it instead of training twice.
func (t *Trainer) Train(ctx context.Context, in TrainInput) (schemas.TrainerMetrics, error) {
	var m schemas.TrainerMetrics
	h, err := t.harnesses.get(ctx, t.Store, in.Run)
	if err != nil {
		return m, err
	}
	l := schemas.Layout{Run: in.Run}
	outPrefix := l.Weights(in.WeightsOut)
	metricsKey := outPrefix + schemas.TrainerMetricsFile
	if ok, err := t.Store.Exists(ctx, metricsKey); err != nil {
		return m, err
	} else if ok {
		b, err := t.Store.Get(ctx, metricsKey)
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		return m, err
	}
	dir := filepath.Join(t.WorkDir, "train", in.Run, fmt.Sprintf("round-%d-try%d", in.Round, activity.GetInfo(ctx).Attempt))
	if err := os.RemoveAll(dir); err != nil {
		return m, fmt.Errorf("train dir: %w", err)
	}
	file := h.Model.WeightsFile
	vars := map[string]string{
		"batch":       filepath.Join(dir, schemas.BatchFile),
		"weights_in":  filepath.Join(dir, "in", file),
		"weights_out": filepath.Join(dir, "out", file),
		"metrics_out": filepath.Join(dir, "out", schemas.TrainerMetricsFile),
		"round":       strconv.Itoa(int(in.Round)),
		"harness_dir": h.Dir,
	}
	port, err := devstack.FreePort()
	if err != nil {
		return m, err
	}
	vars["rdzv_port"] = strconv.Itoa(port)
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o755); err != nil {
		return m, fmt.Errorf("train dir: %w", err)
	}
	if err := t.Store.GetFile(ctx, in.BatchKey, vars["batch"]); err != nil {
		return m, err
	}
	if err := t.Store.GetFile(ctx, l.Weights(in.WeightsIn)+file, vars["weights_in"]); err != nil {
		return m, err
	}
	args, err := harness.FillArgs(h.Trainer.Command, vars)
	if err != nil {
		return m, temporal.NewNonRetryableApplicationError(fmt.Sprintf("harness %s trainer.command: %v", h.Name, err), "BadHarness", err)
	}
	env := map[string]string{}
	for k, v := range h.Trainer.Env {
		env[k] = harness.Fill(v, vars)
	}
	if t.BeforeTrain != nil {
		t.BeforeTrain()
	}
	logPath := filepath.Join(dir, "trainer.log")
	pctx, span := tracer.Start(ctx, "trainer")
	res, err := proc.Run(pctx, proc.Spec{Args: args, Env: env, Dir: h.Dir, Log: logPath, Timeout: h.Trainer.Timeout.D(),
		Beat: func() { activity.RecordHeartbeat(ctx, in.Round) }})
	span.End()
	if err != nil {
		return m, fmt.Errorf("trainer of round %d: %w", in.Round, err)
	}
	if res.TimedOut || res.ExitCode != 0 {
		tail, _ := os.ReadFile(logPath)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return m, fmt.Errorf("trainer of round %d failed (exit %d, timed out %v); log %s ends:\n%s", in.Round, res.ExitCode, res.TimedOut, logPath, tail)
	}
	b, err := os.ReadFile(vars["metrics_out"])
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		return m, fmt.Errorf("trainer of round %d wrote no readable %s: %w", in.Round, schemas.TrainerMetricsFile, err)
	}
	if err := t.Store.PutFile(ctx, outPrefix+file, vars["weights_out"]); err != nil {
		return m, err
	}
	_ = t.Store.PutFile(ctx, outPrefix+"trainer.log", logPath)
	return m, t.Store.Put(ctx, metricsKey, b)
}
