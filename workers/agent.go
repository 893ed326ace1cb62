package workers

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/host"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// assignmentPoll is how often the agent asks the fleet what its host serves.
const assignmentPoll = time.Second

// idleWorkerTTL is how long a weights queue's worker stays after its
// queue shut. A shut queue is not polled (gate), so the worker costs only
// memory; kept, the weights can come back without a new worker, and a
// poll waiting when the queue shut (70 s at most) ends before the worker
// stops, so no episode is taken and dropped.
const idleWorkerTTL = 5 * time.Minute

// agent keeps a rollout host polling the queues of the weights the fleet
// assigns it, and reports to the fleet what the host serves: when it
// changes, and every api.ReportEvery as its lease.
type agent struct {
	c       client.Client
	host    *host.Host
	name    string
	slots   int
	servers int
	gate    *gate
	opts    worker.Options
	log     *slog.Logger

	workers map[string]*weightsWorker // by weights key
	last    api.HostReport
	sent    time.Time
}

type weightsWorker struct {
	w      worker.Worker
	shutAt time.Time // zero while open
}

func newAgent(c client.Client, h *host.Host, name string, slots int, icpt []interceptor.WorkerInterceptor, onFatal func(error)) (*agent, error) {
	g := newGate(slots)
	fixed := func(n int) worker.SlotSupplier {
		s, _ := worker.NewFixedSizeSlotSupplier(n)
		return s
	}
	tuner, err := worker.NewCompositeTuner(worker.CompositeTunerOptions{
		ActivitySlotSupplier: g, WorkflowSlotSupplier: fixed(2), LocalActivitySlotSupplier: fixed(2),
		NexusSlotSupplier: fixed(2), SessionActivitySlotSupplier: fixed(2),
	})
	if err != nil {
		return nil, fmt.Errorf("rollout slot tuner: %w", err)
	}
	// servers 0: as many model servers as the harnesses allow.
	return &agent{c: c, host: h, name: name, slots: slots, gate: g, log: slog.Default(),
		opts:    worker.Options{Tuner: tuner, OnFatalError: onFatal, Interceptors: icpt},
		workers: map[string]*weightsWorker{}}, nil
}

// run follows the fleet until ctx ends, then stops the weights workers.
func (a *agent) run(ctx context.Context) {
	defer func() {
		for _, ww := range a.workers {
			ww.w.Stop()
		}
	}()
	t := time.NewTicker(assignmentPoll)
	defer t.Stop()
	for {
		a.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// step reports if due, asks for the assignment and opens and shuts the
// weights queues to match it. Every call to Temporal has a timeout; a
// failed one is logged and tried again next step, the queues staying as
// they were (a host cut off from the fleet keeps serving what it had).
func (a *agent) step(ctx context.Context) {
	a.report(ctx)
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := a.c.QueryWorkflow(qctx, api.FleetID, "", api.AssignmentQuery, a.name)
	if err != nil {
		a.log.Warn("fleet assignment not read; serving what was assigned", "error", err)
		return
	}
	var as api.Assignment
	if err := v.Get(&as); err != nil {
		a.log.Warn("fleet assignment not decoded", "error", err)
		return
	}
	a.host.SetAssigned(as.Weights)
	now := time.Now()
	for _, w := range as.Weights {
		ww := a.workers[w]
		if ww == nil {
			nw := worker.New(a.c, api.WeightsQueue(w), a.opts)
			nw.RegisterActivity(&activities.Rollout{Host: a.host})
			if err := nw.Start(); err != nil {
				a.log.Error("worker for weights queue did not start", "weights", w, "error", err)
				continue
			}
			ww = &weightsWorker{w: nw}
			a.workers[w] = ww
			a.log.Info("serving weights", "weights", w)
		}
		if !ww.shutAt.IsZero() {
			a.log.Info("weights queue open again", "weights", w)
		}
		ww.shutAt = time.Time{}
		a.gate.set(api.WeightsQueue(w), true)
	}
	for w, ww := range a.workers {
		if slices.Contains(as.Weights, w) {
			continue
		}
		if ww.shutAt.IsZero() {
			ww.shutAt = now
			a.gate.set(api.WeightsQueue(w), false)
			a.log.Info("weights queue shut", "weights", w)
		} else if now.Sub(ww.shutAt) > idleWorkerTTL {
			ww.w.Stop()
			delete(a.workers, w)
		}
	}
}

// report sends the host's state when what the fleet decides on changed
// (weights loaded, a server going idle, busy or full, a failed load) or
// its lease is due. It signals-with-start: a host up before any run
// brings the fleet up.
func (a *agent) report(ctx context.Context) {
	loaded, failed := a.host.Models()
	r := api.HostReport{Host: fleet.Host{Name: a.name, Slots: a.slots, Servers: a.servers, Loaded: loaded, Failed: failed},
		Stats: a.host.SlotStats()}
	if !a.due(r) {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := a.c.SignalWithStartWorkflow(sctx, api.FleetID, api.ReportSignal, r, activities.FleetStartOptions(), api.FleetWorkflow, api.FleetInput{})
	if err != nil {
		a.log.Warn("fleet not told what this host serves; trying again", "error", err)
		return
	}
	a.last, a.sent = r, time.Now()
}

// due says whether r differs from the last report in what the policy
// reads, or the lease needs renewing.
func (a *agent) due(r api.HostReport) bool {
	if a.sent.IsZero() || time.Since(a.sent) >= api.ReportEvery {
		return true
	}
	return shape(r, a.slots) != shape(a.last, a.slots)
}

// shape is a report as the policy sees it: each server's weights and
// whether it is idle, in use or full, and the failed weights.
func shape(r api.HostReport, slots int) string {
	var parts []string
	for _, s := range r.Host.Loaded {
		state := "busy"
		switch {
		case s.Busy == 0:
			state = "idle"
		case s.Busy >= slots:
			state = "full"
		}
		parts = append(parts, s.Weights+"="+state)
	}
	for w, f := range r.Host.Failed {
		parts = append(parts, "failed:"+w+"@"+f.At.String())
	}
	sort.Strings(parts)
	return fmt.Sprint(parts)
}
