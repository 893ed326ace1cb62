package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/host"
	"github.com/roundhouse-rl/roundhouse/internal/outcome"
	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/internal/proxy"
	"github.com/roundhouse-rl/roundhouse/internal/sampling"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Rollout is the episode activity of a rollout host. The host (its model
// server and services, the recording proxy, the spool) is the worker's;
// Rollout's exported methods are activities and nothing else.
type Rollout struct {
	Host *host.Host

	harnesses harnessCache
}

// EpisodeInput names one episode of a round.
type EpisodeInput struct {
	Run       string
	Round     int32
	Phase     string
	Group     int32
	Attempt   int32
	Task      schemas.Task
	InitID    int32
	WeightsID string
	// InfraTries is how many tries an infrastructure failure gets before
	// the episode is recorded as invalid.
	InfraTries int32
	// RetryBase is the tries the episode had before this activity: a
	// rerun after a corrupt try continues its retry numbers, so its tries
	// get names (schemas.TryID) and keys of their own.
	RetryBase int32
	// StopKey is a marker of the evaluation the episode belongs to
	// (Layout.EvalStop): while it exists, the episode, not yet started,
	// skips itself, as it does while the run's STOP marker exists.
	StopKey string `json:",omitempty"`
}

// Label names the episode where a failed attempt is shown (internal/failnote).
func (in EpisodeInput) Label() string {
	return fmt.Sprintf("%s task %d init %d", schemas.EpisodeID(in.Round, in.Phase, in.Group, in.Attempt), in.Task.ID, in.InitID)
}

// EpisodeResult is the small summary returned to the workflow.
type EpisodeResult struct {
	EpisodeID    string
	Valid        bool
	Success      bool
	Reward       float64
	FailureClass string
	Calls        int
	Retry        int32
	Bytes        int
	// Skipped: not run because the run is stopping (no record written).
	Skipped bool
	// Recorded: the episode row already existed (a resumed round); it was
	// returned, not run again.
	Recorded bool
	// Try names this try (schemas.TryID): its records wait under
	// Layout.Staged until the workflow, accepting this result, publishes them.
	Try string
}

// RunEpisode runs one episode through the proxy, decides its outcome and
// stores its calls, row and artifacts under keys of this try alone
// (Layout.Staged, Layout.TryArtifacts), never in the tables: the workflow
// publishes the try whose result it accepted (Records.Publish). A try that
// Temporal gave up on while it still ran — its host cut off for longer
// than the heartbeat timeout — thus writes only beside the accepted one
// (docs/design.md §8). Within a try the row is written last.
func (r *Rollout) RunEpisode(ctx context.Context, in EpisodeInput) (res EpisodeResult, err error) {
	info := activity.GetInfo(ctx)
	retry := in.RetryBase + info.Attempt - 1
	log := activity.GetLogger(ctx)
	key := schemas.EpisodeKey{Run: in.Run, Round: in.Round, Phase: in.Phase, Group: in.Group, Attempt: in.Attempt, Retry: retry}
	id := key.ID()
	try := schemas.TryID(retry, info.WorkflowExecution.RunID)
	res = EpisodeResult{EpisodeID: id, Retry: retry, Try: try}
	ctx, span := tracer.Start(ctx, "episode", trace.WithAttributes(
		attribute.String("episode.id", id), attribute.Int("episode.retry", int(retry)),
		attribute.String("phase", in.Phase), attribute.Int("task", int(in.Task.ID)), attribute.Int("init_id", int(in.InitID))))
	defer func() {
		span.SetAttributes(attribute.Bool("episode.valid", res.Valid), attribute.Bool("episode.success", res.Success),
			attribute.Int("episode.calls", res.Calls), attribute.String("episode.failure_class", res.FailureClass))
		instr.End(span, err)
	}()
	// The worker repeats this beat for the whole episode (model start, run,
	// upload; internal/heartbeat): a dead worker is then noticed within
	// the heartbeat timeout, not StartToClose.
	activity.RecordHeartbeat(ctx, id)
	// A resumed round finds the episodes it already completed; a stopping
	// run skips the episodes that have not started.
	// Storage out of reach is waited out (store.Await), not failed: the
	// episode's retries are for its own infrastructure failures.
	await := func(what string, op func() error) error { return store.Await(ctx, store.OutageWait, what, op) }
	var stored schemas.Episode
	var recorded bool
	if err := await("recorded "+id, func() (err error) { stored, recorded, err = r.Host.Recorded(ctx, key); return err }); err != nil {
		return res, err
	} else if recorded {
		return recordedResult(id, stored), nil
	}
	l := schemas.Layout{Run: in.Run}
	st := r.Host.Store
	var stop bool
	if err := await("stop marker", func() (err error) { stop, err = stopRequested(ctx, st, l.Stop(), in.StopKey); return err }); err != nil {
		return res, err
	} else if stop {
		log.Info("run is stopping; episode skipped", "episode", id)
		res.Skipped = true
		return res, nil
	}
	var h schemas.Harness
	if err := await("harness", func() (err error) { h, err = r.harnesses.get(ctx, st, in.Run); return err }); err != nil {
		return res, err
	}
	// The proxy makes each call's span a child of this episode's.
	pep := proxy.Episode{Key: key, WeightsID: in.WeightsID, Span: span.SpanContext()}
	if h.Collect.CallSeeds {
		pep.Seeds = &proxy.Seeds{Harness: h.Collect.Seed, Task: in.Task.ID, InitID: in.InitID}
		if in.Phase == schemas.PhaseTrain {
			pep.Seeds.Round = in.Round // fresh draws each round (proxy.Seeds)
		}
	}
	outDir := filepath.Join(r.Host.WorkDir, "episodes", in.Run, fmt.Sprintf("%s-try%d", id, retry))
	started := time.Now()
	instr.EpisodeStarted(ctx, in.Phase)
	out, calls, err := r.play(ctx, h, in, pep, outDir)
	if err != nil {
		return res, fmt.Errorf("episode %s: %w", id, err)
	}
	res.Valid, res.Success, res.Reward, res.FailureClass, res.Calls = out.Valid, out.Success, out.Reward, out.FailureClass, len(calls)
	if !out.Valid && info.Attempt < in.InfraTries {
		// Infrastructure failures are not attempts with reward 0: keep this
		// try's records as an orphan, then try again.
		if err := r.Host.StoreOrphan(ctx, key, calls); err != nil {
			log.Warn("orphaned try not stored", "episode", id, "error", err)
		}
		return res, fmt.Errorf("episode %s try %d: %s failure: %s", id, info.Attempt, out.FailureClass, out.Termination)
	}
	if err := await("blobs "+id, func() error { return r.Host.StoreBlobs(ctx, key) }); err != nil {
		return res, fmt.Errorf("episode %s blobs: %w", id, err)
	}
	artifacts := l.TryArtifacts(in.Round, in.Phase, id, try)
	files, err := artifactFiles(outDir, h.Episode.Artifacts)
	if err != nil {
		return res, fmt.Errorf("episode %s artifacts: %w", id, err)
	}
	for _, name := range files {
		if err := await("artifact "+name, func() error { return st.PutFile(ctx, artifacts+name, filepath.Join(outDir, name)) }); err != nil {
			return res, fmt.Errorf("episode %s artifacts: %w", id, err)
		}
	}
	staged := l.Staged(in.Round, in.Phase, id, try)
	var n, m int
	if err := await("calls "+id, func() (err error) { n, err = store.WriteParquet(ctx, st, staged+StagedCalls, calls); return err }); err != nil {
		return res, fmt.Errorf("episode %s calls: %w", id, err)
	}
	row := schemas.Episode{
		Run: in.Run, Round: in.Round, Phase: in.Phase, EpisodeID: id, Task: in.Task.ID, TaskName: in.Task.Name,
		Suite: in.Task.Suite, InitID: in.InitID, Group: in.Group, Attempt: in.Attempt, Retry: retry,
		WeightsID: in.WeightsID, Success: out.Success, Reward: out.Reward, Valid: out.Valid,
		FailureClass: out.FailureClass, Termination: out.Termination, Reason: out.Reason, NumCalls: int32(len(calls)),
		SuccessCall: successCall(out, len(calls)),
		StartedAtMS: started.UnixMilli(), DurationMS: time.Since(started).Milliseconds(), Host: r.Host.Name,
		Artifacts: "s3://" + st.Bucket + "/" + artifacts, Try: try,
	}
	if err := await("row "+id, func() (err error) {
		m, err = store.WriteParquet(ctx, st, staged+StagedRow, []schemas.Episode{row})
		return err
	}); err != nil {
		return res, fmt.Errorf("episode %s row: %w", id, err)
	}
	res.Bytes = n + m
	instr.EpisodeFinished(ctx, in.Phase, out.Valid, out.Success, out.FailureClass)
	if err := r.Host.Spool.Done(key); err != nil {
		log.Warn("spool not removed", "episode", id, "error", err)
	}
	log.Debug("episode stored", "episode", id, "success", out.Success, "valid", out.Valid, "calls", len(calls))
	return res, nil
}

// SeedsIgnored is the type of the error that fails an episode whose model
// server did not honour the call seeds collect.call_seeds gave it
// (proxy.SeedsIgnoredError).
const SeedsIgnored = "SeedsIgnored"

// The files of a staged try, under Layout.Staged.
const (
	StagedCalls = "calls.parquet"
	StagedRow   = "episode.parquet"
)

// play runs the episode subprocess against the host's services and proxy
// and decides its outcome. A service that cannot start is the episode's
// infrastructure failure, not the activity's error: it is retried within
// the budget and then counted by cause. Errors mean the activity itself
// could not go on (cancelled, local disk).
func (r *Rollout) play(ctx context.Context, h schemas.Harness, in EpisodeInput, pep proxy.Episode, outDir string) (outcome.Result, []schemas.Call, error) {
	if strings.HasPrefix(activity.GetInfo(ctx).TaskQueue, api.RolloutQueue+"/") {
		ctx = host.Routed(ctx)
	}
	svc, release, err := r.Host.Acquire(ctx, h, in.Run, in.WeightsID)
	var se *host.ServiceError
	if errors.As(err, &se) {
		return outcome.Result{FailureClass: schemas.FailureInfra, Termination: se.Error()}, nil, nil
	}
	if err != nil {
		return outcome.Result{}, nil, err
	}
	defer release()
	if err := os.RemoveAll(outDir); err != nil {
		return outcome.Result{}, nil, fmt.Errorf("clean %s: %w", outDir, err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return outcome.Result{}, nil, err
	}
	pep.Upstream = svc["model_url"] // this episode's model server, of several
	if pep.Sampling, err = sampling.Defaults(h.Model.Sampling, svc["weights_dir"]); err != nil {
		// The weights' file is wrong on every try: fail once, naming it.
		return outcome.Result{}, nil, temporal.NewNonRetryableApplicationError(err.Error(), "SamplingDefaults", nil)
	}
	r.Host.ProbeProcessor(ctx, h, in.Run, in.WeightsID, svc)
	prefix := r.Host.Proxy.Begin(pep)
	vars := map[string]string{
		"base_url": "http://" + r.Host.ProxyAddr + prefix, "task": strconv.Itoa(int(in.Task.ID)),
		"task_number": strconv.Itoa(int(in.Task.SuiteNumber())), "suite": in.Task.Suite, "seed": strconv.Itoa(int(in.InitID)), "output_dir": outDir, "served_name": h.Model.ServedName,
		"harness_dir": h.Dir, "round": strconv.Itoa(int(in.Round)),
	}
	for k, v := range svc {
		vars[k] = v
	}
	args, err := harness.FillArgs(h.Episode.Command, vars)
	if err != nil {
		r.Host.Proxy.End(pep.Key.ID())
		return outcome.Result{}, nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("harness %s episode.command: %v", h.Name, err), "BadHarness", err)
	}
	env := map[string]string{}
	for k, v := range h.Episode.Env {
		env[k] = harness.Fill(v, vars)
	}
	pr, runErr := proc.Run(ctx, proc.Spec{Name: "episode", Args: args, Env: env, Log: filepath.Join(outDir, "episode.log"),
		Timeout: h.Episode.Timeout.D()})
	calls, seedErr := r.Host.Proxy.EndEpisode(pep.Key.ID())
	if runErr != nil && ctx.Err() != nil {
		return outcome.Result{}, calls, runErr // cancelled or timed out by Temporal
	}
	if seedErr != nil {
		// No try fixes a server that ignores seeds, and its outcomes would
		// pass for repeatable ones: the episode fails for good.
		return outcome.Result{}, calls, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("harness %s: %v", h.Name, seedErr), SeedsIgnored, seedErr)
	}
	// The evidence of origin (docs/design.md §7): what the proxy saw of the
	// model server, and whether the host's services outlived the episode.
	health := outcome.HealthOf(calls)
	health.ServicesDown = r.Host.Down(h)
	return outcome.Decide(h.Episode.Outcome, outDir, outcome.Exit{Code: pr.ExitCode, TimedOut: pr.TimedOut, Err: runErr, Health: health}), calls, nil
}

// artifactFiles lists the output files matching the patterns (all files
// when there are none), relative to dir.
func artifactFiles(dir string, patterns []string) ([]string, error) {
	if len(patterns) == 0 {
		patterns = []string{"*"}
	}
	seen := map[string]bool{}
	var out []string
	for _, pat := range patterns {
		matches, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, fmt.Errorf("artifact pattern %q: %w", pat, err)
		}
		for _, m := range matches {
			if st, err := os.Stat(m); err != nil || st.IsDir() {
				continue
			}
			rel, _ := filepath.Rel(dir, m)
			if !seen[rel] {
				seen[rel] = true
				out = append(out, rel)
			}
		}
	}
	return out, nil
}

// successCall is Episode.SuccessCall: the first call index after the env
// reported success, -1 when it never did or the adapter cannot tell when.
func successCall(out outcome.Result, calls int) int32 {
	switch {
	case !out.Success:
		return -1
	case out.SuccessTurn > 0:
		return int32(min(out.SuccessTurn, calls))
	case out.EndsAtSuccess:
		return int32(calls)
	}
	return -1
}

// recordedResult is the result of an episode whose row is stored.
func recordedResult(id string, e schemas.Episode) EpisodeResult {
	return EpisodeResult{EpisodeID: id, Valid: e.Valid, Success: e.Success, Reward: e.Reward, FailureClass: e.FailureClass,
		Calls: int(e.NumCalls), Retry: e.Retry, Recorded: true, Try: e.Try}
}

// stopRequested says whether any of the stop markers keys exists ("" is
// none).
func stopRequested(ctx context.Context, st *store.Store, keys ...string) (bool, error) {
	for _, k := range keys {
		if k == "" {
			continue
		}
		if ok, err := st.Exists(ctx, k); err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}
