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
		return fmt.Errorf("--workdir %s: %w", cfg.WorkDir, err)
	}
	cfg.WorkDir = abs
	if cfg.Slots <= 0 {
		cfg.Slots = 4
	}
	var ws []worker.Worker
	var cleanup []func()
	var rollout *host.Host
	var agents []*agent
	hl := newHealth()
	// Every failed attempt is signalled to its workflow, which shows it in
	// the Temporal UI while Temporal retries (internal/failnote); every
	// running activity heartbeats, so a dead worker is noticed within
	// seconds whatever its activity was doing (internal/heartbeat).
	icpt := []interceptor.WorkerInterceptor{failnote.Interceptor(c, api.ActivityFailureSignal), heartbeat.Interceptor()}
	defer func() {
		for _, f := range cleanup {
			f()
		}
	}()
	// Roles start in a fixed order: the train role needs the rollout host
	// of the same process, if any, to free it before training.
	want := map[string]bool{}
	for _, role := range cfg.Roles {
		role = strings.TrimSpace(role)
		if role != "control" && role != "rollout" && role != "train" {
			return fmt.Errorf("--roles: unknown role %q; use control, rollout and/or train", role)
		}
		want[role] = true
	}
	for _, role := range []string{"control", "rollout", "train"} {
		if !want[role] {
			continue
		}
		switch role {
		case "control":
			ns := cfg.Namespace
			if ns == "" {
				ns = "default"
			}
			if err := api.RegisterSearchAttributes(ctx, c, ns); err != nil {
				return err
			}
			w := worker.New(c, api.ControlQueue, worker.Options{OnFatalError: hl.onFatal, Interceptors: icpt})
			w.RegisterWorkflow(workflows.Train)
			w.RegisterWorkflow(workflows.Episodes)
			w.RegisterWorkflow(workflows.Eval)
			w.RegisterWorkflow(workflows.Sweep)
			w.RegisterWorkflow(workflows.Fleet)
			w.RegisterActivity(&activities.Records{Store: s, Temporal: c})
			ws = append(ws, w)
		case "rollout":
			// The host stores what a previous worker on this machine left
			// mid-episode before its activity takes any episode.
			h, err := host.Start(ctx, host.Config{Store: s, WorkDir: cfg.WorkDir, ProxyListen: cfg.ProxyListen, Name: cfg.Host, Logger: slog.Default()})
			if err != nil {
				return err
			}
			cleanup = append(cleanup, h.Close)
			rollout = h
			// Episodes wait in their weights' queues; the agent polls those
			// the fleet assigns this host (docs/design.md §10).
			a, err := newAgent(c, h, cfg.Host, cfg.Slots, icpt, hl.onFatal)
			if err != nil {
				return err
			}
			agents = append(agents, a)
			// The one rollout queue serves episodes of workflows started
			// before weights queues, until they are done.
			w := worker.New(c, api.RolloutQueue, worker.Options{MaxConcurrentActivityExecutionSize: cfg.Slots, OnFatalError: hl.onFatal, Interceptors: icpt})
			w.RegisterActivity(&activities.Rollout{Host: h})
			ws = append(ws, w)
		case "train":
			w := worker.New(c, api.TrainQueue, worker.Options{MaxConcurrentActivityExecutionSize: 1, OnFatalError: hl.onFatal, Interceptors: icpt})
			tr := &activities.Trainer{Store: s, WorkDir: cfg.WorkDir}
			if rollout != nil {
				tr.BeforeTrain = rollout.StopForTraining
			}
			w.RegisterActivity(tr)
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		return errors.New("--roles is empty; use control,rollout,train")
	}
	if _, err := serveHealth(ctx, cfg.HealthListen, hl, readyChecks(c, s, rollout)); err != nil {
		return err
	}
	for i, w := range ws {
		if err := w.Start(); err != nil {
			for _, started := range ws[:i] {
				started.Stop()
			}
			return fmt.Errorf("start worker: %w", err)
		}
	}
	actx, stopAgents := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, a := range agents {
			a.run(actx) // one rollout role per process
		}
	}()
	defer func() {
		stopAgents()
		<-done
	}()
	hl.started()
	slog.Info("worker running", "roles", cfg.Roles, "host", cfg.Host, "slots", cfg.Slots)
	<-ctx.Done()
	for _, w := range ws {
		w.Stop()
	}
	return nil
}

// Logger adapts slog for the Temporal SDK.
func Logger() tlog.Logger { return tlog.NewStructuredLogger(slog.Default()) }
