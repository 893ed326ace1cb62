// Package workers wires activities and workflows to task queues. One process
// may take several roles: control (workflows + data activities), rollout
// (episodes, the model server and the recording proxy) and train.
package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/failnote"
	"github.com/roundhouse-rl/roundhouse/internal/heartbeat"
	"github.com/roundhouse-rl/roundhouse/internal/host"
	"github.com/roundhouse-rl/roundhouse/internal/nonretryable"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/workflows"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Config is what a worker process needs.
type Config struct {
	Roles       []string // control, rollout, train
	Slots       int      // concurrent episodes on this rollout host
	WorkDir     string
	ProxyListen string // host:port for the recording proxy; port 0 picks one
	Host        string
	Namespace   string // where the control role registers the search attributes
	// HealthListen serves /livez and /readyz (health.go); "" turns them off.
	HealthListen string
}

// Run polls the queues of cfg.Roles until ctx ends.
func Run(ctx context.Context, c client.Client, s *store.Store, cfg Config) error {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return err
	}
	// Every failed attempt is signalled to its workflow, which shows it in
	// the Temporal UI while Temporal retries (internal/failnote); a
	// non-retryable error is not retried however its activity wrapped it
	// (internal/nonretryable; inside failnote, so the note says what
	// Temporal is told); every running activity heartbeats, so a dead
	// worker is noticed within seconds whatever its activity was doing
	// (internal/heartbeat).
	p := &process{c: c, s: s, cfg: cfg, hl: newHealth(),
		icpt: []interceptor.WorkerInterceptor{failnote.Interceptor(c, api.ActivityFailureSignal), nonretryable.Interceptor(), heartbeat.Interceptor()}}
	defer p.close()
	want, err := wantedRoles(cfg.Roles)
	if err != nil {
		return err
	}
	// Roles start in a fixed order: the train role needs the rollout host
	// of the same process, if any, to free it before training.
	for _, role := range []string{"control", "rollout", "train"} {
		if !want[role] {
			continue
		}
		if err := p.serve(ctx, role); err != nil {
			return err
		}
	}
	if len(p.workers) == 0 {
		return errors.New("--roles is empty; use control,rollout,train")
	}
	if _, err := serveHealth(ctx, cfg.HealthListen, p.hl, readyChecks(c, s, p.rollout)); err != nil {
		return err
	}
	if err := startAll(p.workers); err != nil {
		return err
	}
	stopAgents := runAgents(ctx, p.agents)
	defer stopAgents()
	p.hl.started()
	slog.Info("worker running", "roles", cfg.Roles, "host", cfg.Host, "slots", cfg.Slots)
	<-ctx.Done()
	for _, w := range p.workers {
		w.Stop()
	}
	return nil
}

// withDefaults names the host by hostname and pid, and gives the work
// directory and the episode slots their defaults.
func withDefaults(cfg Config) (Config, error) {
	if cfg.Host == "" {
		h, _ := os.Hostname()
		cfg.Host = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = filepath.Join(os.TempDir(), "roundhouse-worker")
	}
	// Absolute: the paths built from it ({weights_in}, {batch}…) reach
	// subprocesses that run in other directories (the trainer in the
	// harness's), where a relative one names nothing.
	abs, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return cfg, fmt.Errorf("--workdir %s: %w", cfg.WorkDir, err)
	}
	cfg.WorkDir = abs
	if cfg.Slots <= 0 {
		cfg.Slots = 4
	}
	return cfg, nil
}

// wantedRoles is the set --roles names, refusing a role there is not.
func wantedRoles(roles []string) (map[string]bool, error) {
	want := map[string]bool{}
	for _, role := range roles {
		role = strings.TrimSpace(role)
		if role != "control" && role != "rollout" && role != "train" {
			return nil, fmt.Errorf("--roles: unknown role %q; use control, rollout and/or train", role)
		}
		want[role] = true
	}
	return want, nil
}

// process is what one worker process serves: a Temporal worker per
// queue, and with the rollout role the host and its fleet agent.
type process struct {
	c    client.Client
	s    *store.Store
	cfg  Config
	hl   *health
	icpt []interceptor.WorkerInterceptor

	workers []worker.Worker
	cleanup []func() // run by close, when Run returns
	rollout *host.Host
	agents  []*agent
}

// close undoes what the roles set up (the rollout host).
func (p *process) close() {
	for _, f := range p.cleanup {
		f()
	}
}

// serve sets up role's worker, not started yet.
func (p *process) serve(ctx context.Context, role string) error {
	switch role {
	case "control":
		return p.serveControl(ctx)
	case "rollout":
		return p.serveRollout(ctx)
	case "train":
		p.serveTrain()
	}
	return nil
}

// serveControl registers the search attributes, then serves the
// workflows and the Records activities on the control queue.
func (p *process) serveControl(ctx context.Context) error {
	ns := p.cfg.Namespace
	if ns == "" {
		ns = "default"
	}
	if err := api.RegisterSearchAttributes(ctx, p.c, ns); err != nil {
		return err
	}
	w := worker.New(p.c, api.ControlQueue, worker.Options{OnFatalError: p.hl.onFatal, Interceptors: p.icpt})
	w.RegisterWorkflow(workflows.Train)
	w.RegisterWorkflow(workflows.Episodes)
	w.RegisterWorkflow(workflows.Eval)
	w.RegisterWorkflow(workflows.Sweep)
	w.RegisterWorkflow(workflows.Fleet)
	w.RegisterWorkflow(workflows.Drift)
	w.RegisterActivity(&activities.Records{Store: p.s, Temporal: p.c})
	p.workers = append(p.workers, w)
	return nil
}

// serveRollout starts the rollout host and its fleet agent, and serves
// episodes on the one rollout queue of older workflows.
func (p *process) serveRollout(ctx context.Context) error {
	cfg := p.cfg
	// The host stores what a previous worker on this machine left
	// mid-episode before its activity takes any episode.
	h, err := host.Start(ctx, host.Config{Store: p.s, WorkDir: cfg.WorkDir, ProxyListen: cfg.ProxyListen, Name: cfg.Host, Logger: slog.Default()})
	if err != nil {
		return err
	}
	p.cleanup = append(p.cleanup, h.Close)
	p.rollout = h
	// Episodes wait in their weights' queues; the agent polls those
	// the fleet assigns this host (docs/design.md §10).
	a, err := newAgent(p.c, h, cfg.Host, cfg.Slots, p.icpt, p.hl.onFatal)
	if err != nil {
		return err
	}
	p.agents = append(p.agents, a)
	// The one rollout queue serves episodes of workflows started
	// before weights queues, until they are done.
	w := worker.New(p.c, api.RolloutQueue, worker.Options{MaxConcurrentActivityExecutionSize: cfg.Slots, OnFatalError: p.hl.onFatal, Interceptors: p.icpt})
	w.RegisterActivity(&activities.Rollout{Host: h})
	p.workers = append(p.workers, w)
	return nil
}

// serveTrain serves the trainer, one update at a time; it frees this
// process's rollout host, if any, before training.
func (p *process) serveTrain() {
	w := worker.New(p.c, api.TrainQueue, worker.Options{MaxConcurrentActivityExecutionSize: 1, OnFatalError: p.hl.onFatal, Interceptors: p.icpt})
	tr := &activities.Trainer{Store: p.s, WorkDir: p.cfg.WorkDir}
	if p.rollout != nil {
		tr.BeforeTrain = p.rollout.StopForTraining
	}
	w.RegisterActivity(tr)
	p.workers = append(p.workers, w)
}

// startAll starts the workers, or none: one that fails to start stops
// those started before it.
func startAll(ws []worker.Worker) error {
	for i, w := range ws {
		if err := w.Start(); err != nil {
			for _, started := range ws[:i] {
				started.Stop()
			}
			return fmt.Errorf("start worker: %w", err)
		}
	}
	return nil
}

// runAgents runs the fleet agents until ctx ends or the returned stop is
// called; stop returns once they have.
func runAgents(ctx context.Context, agents []*agent) (stop func()) {
	actx, stopAgents := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, a := range agents {
			a.run(actx) // one rollout role per process
		}
	}()
	return func() {
		stopAgents()
		<-done
	}
}

// Logger adapts slog for the Temporal SDK.
func Logger() tlog.Logger { return tlog.NewStructuredLogger(slog.Default()) }
