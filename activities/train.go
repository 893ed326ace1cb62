package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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

// Train runs the trainer as a subprocess (torchrun in real use) in its own
// process group, heartbeating the last line of its log and uploading the log
// to S3 while it runs; then publishes the new weights: the files first,
// manifest.json last, and checks what is stored against the manifest. A
// retry finds a valid manifest and returns its metrics instead of training
// twice; a partial publish has no manifest and is simply redone.
func (t *Trainer) Train(ctx context.Context, in TrainInput) (schemas.TrainerMetrics, error) {
	var m schemas.TrainerMetrics
	h, err := t.harnesses.get(ctx, t.Store, in.Run)
	if err != nil {
		return m, err
	}
	l := schemas.Layout{Run: in.Run}
	outPrefix := l.Weights(in.WeightsOut)
	if man, err := t.readManifest(ctx, outPrefix); err == nil {
		if err := t.verify(ctx, outPrefix, man); err == nil {
			return man.Metrics, nil
		}
	}
	try := activity.GetInfo(ctx).Attempt
	dir := filepath.Join(t.WorkDir, "train", in.Run, fmt.Sprintf("round-%d-try%d", in.Round, try))
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
	logKey := l.TrainerLog(in.Round, try)
	lastUpload := time.Now()
	beat := func() {
		activity.RecordHeartbeat(ctx, lastLine(logPath))
		if time.Since(lastUpload) > 30*time.Second {
			lastUpload = time.Now()
			_ = t.Store.PutFile(ctx, logKey, logPath) // best effort while running
		}
	}
	pctx, span := tracer.Start(ctx, "trainer")
	res, err := proc.Run(pctx, proc.Spec{Args: args, Env: env, Dir: h.Dir, Log: logPath, Timeout: h.Trainer.Timeout.D(), Beat: beat})
	span.End()
	if uerr := t.Store.PutFile(ctx, logKey, logPath); uerr != nil {
		activity.GetLogger(ctx).Warn("trainer log not uploaded", "key", logKey, "error", uerr)
	}
	if err != nil {
		return m, fmt.Errorf("trainer of round %d: %w", in.Round, err)
	}
	if res.TimedOut || res.ExitCode != 0 {
		tail, _ := os.ReadFile(logPath)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return m, fmt.Errorf("trainer of round %d failed (exit %d, timed out %v); log s3://%s/%s ends:\n%s", in.Round, res.ExitCode, res.TimedOut, t.Store.Bucket, logKey, tail)
	}
	b, err := os.ReadFile(vars["metrics_out"])
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		return m, fmt.Errorf("trainer of round %d wrote no readable %s: %w", in.Round, schemas.TrainerMetricsFile, err)
	}
	man := schemas.WeightsManifest{WeightsID: in.WeightsOut, Metrics: m, CreatedAt: time.Now().UnixMilli()}
	for _, f := range []struct{ name, path string }{{file, vars["weights_out"]}, {schemas.TrainerMetricsFile, vars["metrics_out"]}} {
		wf, err := describe(f.name, f.path)
		if err != nil {
			return m, fmt.Errorf("trainer of round %d produced no %s: %w", in.Round, f.name, err)
		}
		if err := t.Store.PutFile(ctx, outPrefix+f.name, f.path); err != nil {
			return m, err
		}
		man.Files = append(man.Files, wf)
	}
	if err := putJSON(ctx, t.Store, outPrefix+schemas.WeightsManifestFile, man); err != nil {
		return m, err
	}
	if err := t.verify(ctx, outPrefix, man); err != nil {
		return m, fmt.Errorf("weights %s after publishing: %w", in.WeightsOut, err)
	}
	return m, nil
}

func (t *Trainer) readManifest(ctx context.Context, prefix string) (schemas.WeightsManifest, error) {
	var man schemas.WeightsManifest
	b, err := t.Store.Get(ctx, prefix+schemas.WeightsManifestFile)
	if err != nil {
		return man, err
	}
	if err := json.Unmarshal(b, &man); err != nil {
		return man, fmt.Errorf("%s%s: %w", prefix, schemas.WeightsManifestFile, err)
	}
	return man, nil
}

// verify checks that every file the manifest lists is stored with its size.
func (t *Trainer) verify(ctx context.Context, prefix string, man schemas.WeightsManifest) error {
	if len(man.Files) == 0 {
		return errors.New("manifest lists no files")
	}
	objs, err := t.Store.List(ctx, prefix)
	if err != nil {
		return err
	}
	size := map[string]int64{}
	for _, o := range objs {
		size[strings.TrimPrefix(o.Key, prefix)] = o.Size
	}
	for _, f := range man.Files {
		got, ok := size[f.Name]
		if !ok {
			return fmt.Errorf("%s%s is missing", prefix, f.Name)
		}
		if got != f.Size {
			return fmt.Errorf("%s%s has %d bytes, the manifest says %d", prefix, f.Name, got, f.Size)
		}
	}
	return nil
}

// describe sizes and hashes a produced file for the manifest.
func describe(name, path string) (schemas.WeightsFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return schemas.WeightsFile{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return schemas.WeightsFile{}, err
	}
	return schemas.WeightsFile{Name: name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// lastLine is the trainer's latest progress line (step, loss, tokens/s),
// sent as heartbeat details so the Temporal UI shows where training is.
func lastLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	const tail = 4096
	off := max(st.Size()-tail, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	line := lines[len(lines)-1]
	if len(line) > 300 {
		line = line[:300]
	}
	return line
}
