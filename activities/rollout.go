package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/devstack"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/internal/proxy"
	"github.com/roundhouse-rl/roundhouse/internal/spool"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Rollout runs episodes on one host. It owns the host's model server
// (started for the weights an episode needs, restarted when they change)
// and the recording proxy every planner call goes through.
type Rollout struct {
	Store     *store.Store
	Proxy     *proxy.Proxy
	Spool     *spool.Spool // the proxy's OnCall/OnBlob write here
	ProxyAddr string       // host:port the proxy listens on
	WorkDir   string       // local scratch: weights, episode output dirs, logs
	Host      string

	harnesses harnessCache
	mu        sync.Mutex
	model     *modelServer
	stored    sync.Map // blob keys known to be in the bucket
}

type modelServer struct {
	key   string // run + weights id
	proc  *devstack.Proc
	users int
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
}

// RunEpisode runs one episode through the proxy, decides its outcome and
// stores its calls and episode row. Keys depend only on the episode's place
// in the run, so a retry overwrites rather than duplicates; the episode row
// is written last and marks the records complete.
func (r *Rollout) RunEpisode(ctx context.Context, in EpisodeInput) (EpisodeResult, error) {
	info := activity.GetInfo(ctx)
	retry := info.Attempt - 1
	log := activity.GetLogger(ctx)
	id := schemas.EpisodeID(in.Round, in.Phase, in.Group, in.Attempt)
	res := EpisodeResult{EpisodeID: id, Retry: retry}
	ctx, span := tracer.Start(ctx, "episode", trace.WithAttributes(
		attribute.String("episode.id", id), attribute.Int("episode.retry", int(retry)),
		attribute.Int("task", int(in.Task.ID)), attribute.Int("init_id", int(in.InitID))))
	defer func() {
		span.SetAttributes(attribute.Bool("episode.valid", res.Valid), attribute.Bool("episode.success", res.Success), attribute.Int("episode.calls", res.Calls))
		span.End()
	}()
	// Heartbeat for the whole episode (model start, run, upload): a dead
	// worker is then noticed within the heartbeat timeout, not StartToClose.
	beat, stopBeat := context.WithCancel(ctx)
	defer stopBeat()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-beat.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx, id)
			}
		}
	}()
	h, err := r.harnesses.get(ctx, r.Store, in.Run)
	if err != nil {
		return res, err
	}
	release, err := r.acquireModel(ctx, h, in.Run, in.WeightsID)
	if err != nil {
		return res, fmt.Errorf("episode %s: model server: %w", id, err)
	}
	defer release()

	pep := proxy.Episode{ID: id, Run: in.Run, Round: in.Round, Phase: in.Phase,
		Group: in.Group, Attempt: in.Attempt, Retry: retry, WeightsID: in.WeightsID}
	prefix := r.Proxy.Begin(pep)
	ended := false
	defer func() {
		if !ended {
			r.Proxy.End(id)
		}
	}()
	outDir := filepath.Join(r.WorkDir, "episodes", in.Run, fmt.Sprintf("%s-try%d", id, retry))
	if err := os.RemoveAll(outDir); err != nil {
		return res, fmt.Errorf("episode %s: clean %s: %w", id, outDir, err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return res, fmt.Errorf("episode %s: %w", id, err)
	}
	vars := map[string]string{
		"base_url": "http://" + r.ProxyAddr + prefix, "task": strconv.Itoa(int(in.Task.ID)),
		"seed": strconv.Itoa(int(in.InitID)), "output_dir": outDir, "served_name": h.Model.ServedName,
		"harness_dir": h.Dir, "round": strconv.Itoa(int(in.Round)),
	}
	args, err := harness.FillArgs(h.Episode.Command, vars)
	if err != nil {
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("harness %s episode.command: %v", h.Name, err), "BadHarness", err)
	}
	env := map[string]string{}
	for k, v := range h.Episode.Env {
		env[k] = harness.Fill(v, vars)
	}
	started := time.Now()
	pr, runErr := proc.Run(ctx, proc.Spec{Args: args, Env: env, Log: filepath.Join(outDir, "episode.log"),
		Timeout: h.Episode.Timeout.D()})
	calls := r.Proxy.End(id)
	ended = true
	if runErr != nil && ctx.Err() != nil {
		return res, fmt.Errorf("episode %s: %w", id, runErr) // cancelled or timed out by Temporal
	}
	out := Outcome(h.Episode.Outcome, outDir, pr, runErr)
	res.Valid, res.Success, res.Reward, res.FailureClass, res.Calls = out.Valid, out.Success, out.Reward, out.FailureClass, len(calls)
	l := schemas.Layout{Run: in.Run}
	if !out.Valid && info.Attempt < in.InfraTries {
		// Infrastructure failures are not attempts with reward 0: keep this
		// try's records as an orphan, then try again.
		if err := r.storeOrphan(ctx, spool.Orphan{Episode: pep, Path: r.Spool.Path(pep)}, calls); err != nil {
			log.Warn("orphaned try not stored", "episode", id, "error", err)
		}
		return res, fmt.Errorf("episode %s try %d: %s failure: %s", id, info.Attempt, out.FailureClass, out.Termination)
	}
	if err := r.storeBlobs(ctx, in.Run, r.Spool.Blobs(pep)); err != nil {
		return res, fmt.Errorf("episode %s blobs: %w", id, err)
	}

	artifacts := l.Artifacts(in.Round, in.Phase, id)
	for _, name := range []string{h.Episode.Outcome.File, "transcript.json", "episode.log"} {
		p := filepath.Join(outDir, name)
		if _, err := os.Stat(p); err == nil {
			if err := r.Store.PutFile(ctx, artifacts+name, p); err != nil {
				return res, fmt.Errorf("episode %s artifacts: %w", id, err)
			}
		}
	}
	n, err := store.WriteParquet(ctx, r.Store, l.Calls(in.Round, in.Phase, id), calls)
	if err != nil {
		return res, fmt.Errorf("episode %s calls: %w", id, err)
	}
	row := schemas.Episode{
		Run: in.Run, Round: in.Round, Phase: in.Phase, EpisodeID: id, Task: in.Task.ID, TaskName: in.Task.Name,
		Suite: in.Task.Suite, InitID: in.InitID, Group: in.Group, Attempt: in.Attempt, Retry: retry,
		WeightsID: in.WeightsID, Success: out.Success, Reward: out.Reward, Valid: out.Valid,
		FailureClass: out.FailureClass, Termination: out.Termination, NumCalls: int32(len(calls)),
		StartedAtMS: started.UnixMilli(), DurationMS: time.Since(started).Milliseconds(), Host: r.Host,
		Artifacts: "s3://" + r.Store.Bucket + "/" + artifacts,
	}
	m, err := store.WriteParquet(ctx, r.Store, l.Episodes(in.Round, in.Phase, id), []schemas.Episode{row})
	if err != nil {
		return res, fmt.Errorf("episode %s row: %w", id, err)
	}
	res.Bytes = n + m
	if err := r.Spool.Done(pep); err != nil {
		log.Warn("spool not removed", "episode", id, "error", err)
	}
	log.Debug("episode stored", "episode", id, "success", out.Success, "valid", out.Valid, "calls", len(calls))
	return res, nil
}

// storeBlobs uploads the run's blobs a try referenced, once per content.
func (r *Rollout) storeBlobs(ctx context.Context, run string, names []string) error {
	l := schemas.Layout{Run: run}
	for _, name := range names {
		key := l.Blob(name)
		if _, ok := r.stored.Load(key); ok {
			continue
		}
		ok, err := r.Store.Exists(ctx, key)
		if err != nil {
			return err
		}
		if !ok {
			if err := r.Store.PutFile(ctx, key, r.Spool.BlobPath(run, name)); err != nil {
				return err
			}
		}
		r.stored.Store(key, true)
	}
	return nil
}

// storeOrphan stores a try's records under orphans/ (never trained on),
// with the blobs they reference, and drops its spool file.
func (r *Rollout) storeOrphan(ctx context.Context, o spool.Orphan, calls []schemas.Call) error {
	ep := o.Episode
	var names []string
	for _, c := range calls {
		for _, m := range blobRef.FindAllStringSubmatch(c.Request, -1) {
			if _, err := os.Stat(r.Spool.BlobPath(ep.Run, m[1])); err == nil {
				names = append(names, m[1])
			}
		}
	}
	if err := r.storeBlobs(ctx, ep.Run, names); err != nil {
		return err
	}
	if len(calls) > 0 {
		key := schemas.Layout{Run: ep.Run}.Orphan(ep.Round, ep.Phase, ep.ID, ep.Retry)
		if _, err := store.WriteParquet(ctx, r.Store, key, calls); err != nil {
			return err
		}
	}
	if err := r.Spool.Done(ep); err != nil {
		return err
	}
	return spool.Remove(o)
}

var blobRef = regexp.MustCompile(regexp.QuoteMeta(proxy.BlobPrefix) + `([0-9a-f]{64}\.[A-Za-z0-9]+)`)

// RecoverOrphans stores what earlier worker processes on this host spooled
// but never completed. Call it before serving episodes.
func (r *Rollout) RecoverOrphans(ctx context.Context) (int, error) {
	orphans, err := r.Spool.Orphans()
	if err != nil {
		return 0, err
	}
	for _, o := range orphans {
		calls, err := spool.ReadCalls(o.Path)
		if err != nil {
			return 0, err
		}
		for i := range calls {
			calls[i].Error = strings.TrimPrefix(calls[i].Error+"; ", "; ") + "orphaned: the worker stopped before the episode completed"
			calls[i].Trainable = false
		}
		if err := r.storeOrphan(ctx, o, calls); err != nil {
			return 0, fmt.Errorf("orphan %s: %w", o.Path, err)
		}
	}
	return len(orphans), nil
}

// acquireModel makes sure this host's model server serves the run's weights
// and holds it until release. Switching weights waits for episodes still
// using the old ones.
func (r *Rollout) acquireModel(ctx context.Context, h schemas.Harness, run, weightsID string) (func(), error) {
	// The key holds the weights' ETag: a run replaced under the same name
	// never reuses the old run's server or cached files.
	remote := schemas.Layout{Run: run}.Weights(weightsID) + h.Model.WeightsFile
	etag, err := r.Store.ETag(ctx, remote)
	if err != nil {
		return nil, fmt.Errorf("weights %s: %w", weightsID, err)
	}
	key := run + "/" + weightsID + "/" + etag
	for {
		r.mu.Lock()
		m := r.model
		if m != nil && m.key == key {
			if done, _ := m.proc.Exited(); !done {
				m.users++
				r.mu.Unlock()
				return r.releaseModel(m), nil
			}
		}
		if m != nil && m.users > 0 && m.key != key {
			r.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		// Start (or restart) while holding the lock: other episodes wait for it.
		if m != nil {
			m.proc.Stop(10 * time.Second)
			r.model = nil
		}
		nm, err := r.startModel(ctx, h, remote, key)
		if err != nil {
			r.mu.Unlock()
			return nil, err
		}
		nm.users = 1
		r.model = nm
		r.mu.Unlock()
		return r.releaseModel(nm), nil
	}
}

func (r *Rollout) releaseModel(m *modelServer) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			m.users--
			r.mu.Unlock()
		})
	}
}

func (r *Rollout) startModel(ctx context.Context, h schemas.Harness, remote, key string) (*modelServer, error) {
	local := filepath.Join(r.WorkDir, "weights", filepath.FromSlash(key), h.Model.WeightsFile)
	if _, err := os.Stat(local); err != nil {
		if err := r.Store.GetFile(ctx, remote, local); err != nil {
			return nil, err
		}
	}
	port, err := devstack.FreePort()
	if err != nil {
		return nil, err
	}
	vars := map[string]string{"weights": local, "port": strconv.Itoa(port), "served_name": h.Model.ServedName, "harness_dir": h.Dir}
	args, err := harness.FillArgs(h.Model.Command, vars)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("harness %s model_server.command: %v", h.Name, err), "BadHarness", err)
	}
	var env []string
	for k, v := range h.Model.Env {
		env = append(env, k+"="+harness.Fill(v, vars))
	}
	logPath := filepath.Join(r.WorkDir, "logs", "model-"+strings.ReplaceAll(key, "/", "-")+".log")
	p, err := devstack.Start("model server", args, env, logPath, false)
	if err != nil {
		return nil, fmt.Errorf("harness %s: %w", h.Name, err)
	}
	root := "http://127.0.0.1:" + strconv.Itoa(port)
	timeout := h.Model.StartTimeout.D()
	if timeout == 0 {
		timeout = time.Minute
	}
	if err := devstack.WaitReady(ctx, p, timeout, devstack.HTTPCheck(root+h.Model.ReadyPath), logPath); err != nil {
		p.Stop(5 * time.Second)
		return nil, fmt.Errorf("harness %s model server: %w", h.Name, err)
	}
	r.Proxy.SetUpstream(root)
	activity.GetLogger(ctx).Info("model server ready", "weights", key, "url", root)
	return &modelServer{key: key, proc: p}, nil
}

// Close stops the host's model server.
func (r *Rollout) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.model != nil {
		r.model.proc.Stop(5 * time.Second)
		r.model = nil
	}
}

// EpisodeOutcome is what an outcome adapter decides.
type EpisodeOutcome struct {
	Valid        bool
	Success      bool
	Reward       float64
	FailureClass string
	Termination  string
}

// minimalOutcome is the file the minimal harness's episode writes.
type minimalOutcome struct {
	Success     bool    `json:"success"`
	Reward      float64 `json:"reward"`
	Terminated  bool    `json:"terminated"`
	Termination string  `json:"termination"`
	Error       string  `json:"error"`
}

// Outcome turns an episode's exit and output dir into an outcome. Success
// comes from the environment's own signal, never from the planner's claim.
func Outcome(spec schemas.OutcomeSpec, dir string, pr proc.Result, runErr error) EpisodeOutcome {
	switch {
	case runErr != nil:
		return EpisodeOutcome{FailureClass: schemas.FailureInfra, Termination: "could not run: " + runErr.Error()}
	case pr.TimedOut:
		return EpisodeOutcome{FailureClass: schemas.FailureTimeout, Termination: "episode timed out"}
	}
	var o minimalOutcome
	b, err := os.ReadFile(filepath.Join(dir, spec.File))
	if err == nil {
		err = json.Unmarshal(b, &o)
	}
	switch {
	case err != nil && errors.Is(err, os.ErrNotExist):
		return EpisodeOutcome{FailureClass: schemas.FailureInfra, Termination: fmt.Sprintf("no %s (exit code %d)", spec.File, pr.ExitCode)}
	case err != nil:
		return EpisodeOutcome{FailureClass: schemas.FailureInfra, Termination: fmt.Sprintf("unreadable %s: %v", spec.File, err)}
	case pr.ExitCode != 0 || o.Error != "":
		return EpisodeOutcome{FailureClass: schemas.FailureInfra, Termination: fmt.Sprintf("planner error (exit %d): %s", pr.ExitCode, o.Error)}
	}
	out := EpisodeOutcome{Valid: true, Success: o.Terminated, Termination: o.Termination}
	if out.Success {
		out.Reward = 1
	} else {
		out.FailureClass = schemas.FailureTask
	}
	return out
}
