package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/ports"
	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
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
	Run          string
	Round        int32
	BatchKey     string
	WeightsID    string `json:"WeightsIn"`
	NewWeightsID string `json:"WeightsOut"`
	// Staleness and SampledBy are the batch's samples by staleness and by
	// the weights that sampled them (BatchSummary), recorded in the new
	// weights' manifest so the weights say what they were trained on.
	Staleness schemas.Staleness `json:",omitempty"`
	SampledBy map[string]int    `json:",omitempty"`
}

// Label names the update where a failed attempt is shown (internal/failnote).
func (in TrainInput) Label() string {
	return fmt.Sprintf("round %d, %s → %s", in.Round, in.WeightsID, in.NewWeightsID)
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
	if man, ok := t.published(ctx, in); ok {
		return man.Metrics, nil
	}
	tr, err := t.newTrainTry(ctx, h, in, "round")
	if err != nil {
		return m, err
	}
	// Held until the trainer has exited: see newTrainTry.
	defer tr.rdzv.Release()
	if err := t.fetchInputs(ctx, tr); err != nil {
		return m, err
	}
	args, env, err := tr.command()
	if err != nil {
		return m, err
	}
	if t.BeforeTrain != nil {
		t.BeforeTrain()
	}
	res, err := t.runTrainer(ctx, tr, args, env)
	if err != nil {
		return m, fmt.Errorf("trainer of round %d: %w", in.Round, err)
	}
	if res.TimedOut || res.ExitCode != 0 {
		return m, t.trainerFailed(ctx, tr, res)
	}
	m, files, err := tr.output()
	if err != nil {
		return m, err
	}
	m.RolloutProcessor = tr.rolloutProcessor() // both sides recorded with the round
	return t.publish(ctx, tr, m, files)
}

// trainTry is one attempt at a round's update: its own folder on this
// host, the paths its trainer command is given, and where its log goes.
type trainTry struct {
	in      TrainInput
	h       schemas.Harness
	layout  schemas.Layout
	try     int32
	dir     string            // this try's folder, emptied first
	inDir   string            // the weights the round starts from
	outDir  string            // the weights the trainer writes
	vars    map[string]string // the trainer command's {placeholders}
	rdzv    *ports.Lease      // torchrun's rendezvous port
	logPath string
	logKey  string
}

// published is the manifest of the round's new weights when an earlier
// try published them whole (the manifest there and the files matching
// it); a partial publish has no manifest and is redone.
func (t *Trainer) published(ctx context.Context, in TrainInput) (schemas.WeightsManifest, bool) {
	outPrefix := schemas.Layout{Run: in.Run}.Weights(in.NewWeightsID)
	man, err := weights.Read(ctx, t.Store, outPrefix)
	if err != nil {
		return man, false
	}
	return man, weights.Verify(ctx, t.Store, outPrefix, man) == nil
}

// newTrainTry empties this try's folder (named for its kind: "round" for
// training, "drift" for a measurement), names the paths the trainer is
// given and leases its rendezvous port. The caller releases the lease.
func (t *Trainer) newTrainTry(ctx context.Context, h schemas.Harness, in TrainInput, kind string) (*trainTry, error) {
	l := schemas.Layout{Run: in.Run}
	try := activity.GetInfo(ctx).Attempt
	dir := filepath.Join(t.WorkDir, "train", in.Run, fmt.Sprintf("%s-%d-try%d", kind, in.Round, try))
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("train dir: %w", err)
	}
	// Weights are directories; a harness naming weights_file gets that
	// file's path inside them instead.
	inDir, outDir := filepath.Join(dir, "in"), filepath.Join(dir, "out", "weights")
	vars := map[string]string{
		"batch":       filepath.Join(dir, schemas.BatchFile),
		"weights_in":  filepath.Join(inDir, h.Model.WeightsFile),
		"weights_out": filepath.Join(outDir, h.Model.WeightsFile),
		"metrics_out": filepath.Join(dir, "out", schemas.TrainerMetricsFile),
		"round":       strconv.Itoa(int(in.Round)),
		"harness_dir": h.Dir,
	}
	// The rendezvous port comes from the machine's port locks, as services'
	// ports do: the harness's trainer command hands {rdzv_port} to torchrun
	// (--rdzv_endpoint 127.0.0.1:{rdzv_port}), whose c10d store binds it
	// once started. The lease is held until Train returns, after the trainer
	// has exited, so no service of this machine's workers is given the port
	// while torchrun may be binding or serving it.
	rdzv, err := ports.Allocate()
	if err != nil {
		return nil, fmt.Errorf("trainer rendezvous port: %w", err)
	}
	vars["rdzv_port"] = strconv.Itoa(rdzv.Port)
	return &trainTry{in: in, h: h, layout: l, try: try, dir: dir, inDir: inDir, outDir: outDir, vars: vars, rdzv: rdzv,
		logPath: filepath.Join(dir, "trainer.log"), logKey: l.TrainerLog(in.Round, try)}, nil
}

// fetchInputs puts the batch, its images and the input weights where the
// trainer command's paths say.
func (t *Trainer) fetchInputs(ctx context.Context, tr *trainTry) error {
	in := tr.in
	if err := os.MkdirAll(tr.outDir, 0o755); err != nil {
		return fmt.Errorf("train dir: %w", err)
	}
	if err := t.Store.GetFile(ctx, in.BatchKey, tr.vars["batch"]); err != nil {
		return err
	}
	// Images by content, kept for the round's retries (trainimages.go).
	runDir := filepath.Join(t.WorkDir, "train", in.Run)
	dropOlderImages(runDir, in.Round)
	tr.vars["images"] = filepath.Join(runDir, fmt.Sprintf("round-%d-images", in.Round))
	fetched, err := t.fetchImages(ctx, in.Run, in.Round, tr.vars["batch"], tr.vars["images"])
	if err != nil {
		return err
	}
	if fetched.Images > 0 {
		activity.GetLogger(ctx).Info("trainer images", "images", fetched.Images, "downloaded", fetched.Downloaded, "bytes", fetched.Bytes)
	}
	if _, err := weights.Fetch(ctx, t.Store, tr.layout.Weights(in.WeightsID), tr.inDir); err != nil {
		return err
	}
	// The model server's processor, where a rollout host probed it
	// (model_server.processor_probe); "" tells the trainer there is none.
	tr.vars["rollout_processor"] = ""
	rp := filepath.Join(tr.dir, "rollout-processor.json")
	switch err := t.Store.GetFile(ctx, tr.layout.RolloutProcessor(in.WeightsID), rp); {
	case err == nil:
		tr.vars["rollout_processor"] = rp
	case !store.IsNotFound(err):
		return err
	}
	return nil
}

// rolloutProcessor is the model server's processor the trainer was given,
// nil when none.
func (tr *trainTry) rolloutProcessor() *schemas.ProcessorInfo {
	path := tr.vars["rollout_processor"]
	if path == "" {
		return nil
	}
	var info schemas.ProcessorInfo
	if b, err := os.ReadFile(path); err != nil || json.Unmarshal(b, &info) != nil {
		return nil
	}
	return &info
}

// command fills the harness's trainer command and environment; a
// command that cannot be filled is the harness's fault, not retried.
func (tr *trainTry) command() ([]string, map[string]string, error) {
	h := tr.h
	args, err := harness.FillArgs(h.Trainer.Command, tr.vars)
	if err != nil {
		return nil, nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("harness %s trainer.command: %v", h.Name, err), "BadHarness", err)
	}
	env := map[string]string{}
	for k, v := range h.Trainer.Env {
		env[k] = harness.Fill(v, tr.vars)
	}
	return args, env, nil
}

// runTrainer runs the trainer to its end in a span, heartbeating its log's
// last line and uploading the log every 30 s while it runs and once
// after; an error means it could not run or was cancelled.
func (t *Trainer) runTrainer(ctx context.Context, tr *trainTry, args []string, env map[string]string) (proc.Result, error) {
	in := tr.in
	lastUpload := time.Now()
	pctx, span := tracer.Start(ctx, "trainer", trace.WithAttributes(attribute.Int("round", int(in.Round)),
		attribute.String("weights.in", in.WeightsID), attribute.String("weights.out", in.NewWeightsID)))
	steps := stepClock{start: time.Now()}
	beat := func() {
		line := lastLine(tr.logPath)
		activity.RecordHeartbeat(ctx, line)
		steps.observe(pctx, line, time.Now())
		if time.Since(lastUpload) > 30*time.Second {
			lastUpload = time.Now()
			_ = t.Store.PutFile(ctx, tr.logKey, tr.logPath) // best effort while running
		}
	}
	res, err := proc.Run(pctx, proc.Spec{Name: "trainer", Args: args, Env: env, Dir: tr.h.Dir, Log: tr.logPath, Timeout: tr.h.Trainer.Timeout.D(), Beat: beat})
	steps.finish(pctx, proc.LogTail(tr.logPath, 4096), time.Now())
	span.SetAttributes(attribute.Int("trainer.steps", steps.step), attribute.Int("process.exit.code", res.ExitCode))
	instr.End(span, err)
	if uerr := t.Store.PutFile(ctx, tr.logKey, tr.logPath); uerr != nil {
		activity.GetLogger(ctx).Warn("trainer log not uploaded", "key", tr.logKey, "error", uerr)
	}
	return res, err
}

// trainerFailed says why a trainer that exited non-zero or timed out
// failed: the drift guard's line, not retried, else the log's tail and
// its cause, retried.
func (t *Trainer) trainerFailed(ctx context.Context, tr *trainTry, res proc.Result) error {
	in := tr.in
	full, _ := os.ReadFile(tr.logPath)
	// torchrun reports any rank's failure as its own exit 1, so the
	// guard is known by its line. Retrying would see the same drift.
	if line := driftLine(string(full)); line != "" {
		// Name the samples by episode and call: the batch's order is the
		// round's samples table's. Without the table the indices stay.
		if samples, serr := store.ReadParquet[schemas.Sample](ctx, t.Store, tr.layout.Samples(in.Round)); serr == nil {
			line = nameSamples(line, samples)
		} else {
			activity.GetLogger(ctx).Warn("samples table not read; the drift guard's samples keep their batch indices", "error", serr)
		}
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("trainer of round %d stopped before updating: %s (log s3://%s/%s)",
			in.Round, strings.TrimPrefix(line, "trainer: "), t.Store.Bucket, tr.logKey), "DriftGuard", nil)
	}
	tail := full
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	// The cause goes last: torchrun's own report ends the log with a
	// banner, and the last line is what a failing attempt is shown by.
	return fmt.Errorf("trainer of round %d failed (exit %d, timed out %v); log s3://%s/%s ends:\n%s\n%s", in.Round, res.ExitCode, res.TimedOut,
		t.Store.Bucket, tr.logKey, tail, trainerCause(string(full), res.TimedOut))
}

// output reads what a trainer that exited 0 wrote: its metrics and the
// weights, which must hold what the harness's model needs.
func (tr *trainTry) output() (schemas.TrainerMetrics, []weights.File, error) {
	var m schemas.TrainerMetrics
	round, h := tr.in.Round, tr.h
	b, err := os.ReadFile(tr.vars["metrics_out"])
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		return m, nil, fmt.Errorf("trainer of round %d wrote no readable %s: %w", round, schemas.TrainerMetricsFile, err)
	}
	files, err := weights.Dir(tr.outDir)
	if err != nil {
		return m, nil, fmt.Errorf("trainer of round %d produced no weights: %w", round, err)
	}
	if h.Model.Vision {
		if err := weights.CheckVision(weights.Names(files), "written by the trainer of round "+strconv.Itoa(int(round))); err != nil {
			return m, nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadWeights", err)
		}
	}
	if h.Model.WeightsFile != "" {
		if _, err := os.Stat(tr.vars["weights_out"]); err != nil {
			return m, nil, fmt.Errorf("trainer of round %d did not write %s (the harness's model.weights_file): %w", round, h.Model.WeightsFile, err)
		}
	}
	return m, files, nil
}

// publish stores the new weights and returns the metrics of the weights
// the round goes on with: this try's, or those of a try that published
// first.
func (t *Trainer) publish(ctx context.Context, tr *trainTry, m schemas.TrainerMetrics, files []weights.File) (schemas.TrainerMetrics, error) {
	in := tr.in
	// Into this try's own folder, the manifest written only if no try
	// published first: a trainer Temporal gave up on (its host cut off)
	// that finishes later never replaces the weights the round went on
	// with, and a try that loses returns what was published.
	info := activity.GetInfo(ctx)
	dirName := schemas.TryID(info.Attempt-1, info.WorkflowExecution.RunID) + "/"
	pub, created, err := weights.Publish(ctx, t.Store, tr.layout.Weights(in.NewWeightsID), files, schemas.WeightsManifest{WeightsID: in.NewWeightsID, Metrics: m, Dir: dirName,
		Batch: in.BatchKey, Staleness: in.Staleness, SampledBy: in.SampledBy})
	if err != nil {
		return m, err
	}
	if !created {
		activity.GetLogger(ctx).Warn("another trainer try published these weights first; this try's output stays unused",
			"weights", in.NewWeightsID, "published", pub.Dir, "unused", dirName)
	}
	return pub.Metrics, nil
}

// stepLine matches the trainer's progress lines, "step i/n loss … tokens/s …".
var stepLine = regexp.MustCompile(`\bstep (\d+)/\d+\b`)

// stepClock turns the progress lines the heartbeat reads into
// roundhouse.trainer.step_time: the wall time between two observations
// divided by the steps done in between. The first observation only sets
// the baseline, so start-up (torchrun, imports, loading weights) is not a
// step; a run too short for two observations records its whole duration
// over its steps once.
type stepClock struct {
	start    time.Time
	step     int       // last step seen, 0 before any
	at       time.Time // when it was seen
	recorded bool
}

// observe reads the last step number in text.
func (c *stepClock) observe(ctx context.Context, text string, now time.Time) {
	m := stepLine.FindAllStringSubmatch(text, -1)
	if len(m) == 0 {
		return
	}
	step, err := strconv.Atoi(m[len(m)-1][1])
	if err != nil || step <= c.step {
		return
	}
	if c.step > 0 {
		instr.TrainerStep(ctx, now.Sub(c.at)/time.Duration(step-c.step))
		c.recorded = true
	}
	c.step, c.at = step, now
}

// finish observes the log's tail once the trainer has exited.
func (c *stepClock) finish(ctx context.Context, tail string, now time.Time) {
	c.observe(ctx, tail, now)
	if !c.recorded && c.step > 0 {
		instr.TrainerStep(ctx, now.Sub(c.start)/time.Duration(c.step))
	}
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

// driftLine is the drift guard's line in a trainer log, or "".
func driftLine(log string) string {
	for _, l := range strings.Split(log, "\n") {
		if i := strings.Index(l, schemas.TrainerDriftGuard); i >= 0 {
			return strings.TrimSpace(l[i:])
		}
	}
	return ""
}

// sampleRef is how the drift guard names a sample: its batch index.
var sampleRef = regexp.MustCompile(`sample (\d+) \(`)

// nameSamples adds episode and call to each "sample i (" of a drift line.
func nameSamples(line string, samples []schemas.Sample) string {
	return sampleRef.ReplaceAllStringFunc(line, func(m string) string {
		i, err := strconv.Atoi(sampleRef.FindStringSubmatch(m)[1])
		if err != nil {
			return m
		}
		return sampleName(samples, i) + " ("
	})
}

// sampleName names batch sample i by its row of the round's samples
// table, "sample i = episode … call k"; by its index alone without one.
func sampleName(samples []schemas.Sample, i int) string {
	if i < 0 || i >= len(samples) {
		return "sample " + strconv.Itoa(i)
	}
	return fmt.Sprintf("sample %d = episode %s call %d", i, samples[i].EpisodeID, samples[i].CallIndex)
}

// pyError is a Python exception line: "ModuleNotFoundError: No module…".
var pyError = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*(Error|Exception|Interrupt|Exit)\b:?`)

// trainerCause picks the line that says why a trainer failed: its own
// "trainer: error:" line, else the last Python exception that is not
// torchrun's wrapper around a rank's failure, else the log's last line.
func trainerCause(log string, timedOut bool) string {
	if timedOut {
		return "the trainer outlived trainer.timeout"
	}
	lines := strings.Split(log, "\n")
	for _, l := range lines {
		if i := strings.Index(l, "trainer: error: "); i >= 0 {
			return strings.TrimSpace(l[i+len("trainer: "):])
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if pyError.MatchString(l) && !strings.Contains(l, "ChildFailedError") {
			return l
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); strings.ContainsFunc(l, unicode.IsLetter) {
			return l
		}
	}
	return "the trainer printed nothing"
}
