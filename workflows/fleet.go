package workflows

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// fleetTick is how often the fleet looks again without news: leases
// expire, idle servers give way, waiting weights age.
const fleetTick = 2 * time.Second

// demandCheck is how often the fleet looks for demand whose Episodes
// workflow closed without removing it (terminated).
const demandCheck = time.Minute

// fleetHistory is the history length at which the fleet continues as new.
const fleetHistory = 5000

// Fleet decides which weights each rollout host serves (internal/fleet,
// docs/design.md §10). Episodes workflows register their demand, hosts
// report what they serve and ask what to serve next (a query, so polling
// writes no history); the fleet plans on each change and every fleetTick
// while it has hosts or demand. Its one activity finds demand left by
// Episodes workflows that were terminated. A fleet that restarts from
// nothing loses nothing hosts and Episodes workflows do not report again.
func Fleet(ctx workflow.Context, in api.FleetInput) error {
	f := newFleetRun(ctx, in)
	if err := f.answerQueries(); err != nil {
		return err
	}
	f.demands = workflow.GetSignalChannel(ctx, api.DemandSignal)
	f.reports = workflow.GetSignalChannel(ctx, api.ReportSignal)
	for {
		if err := ctx.Err(); err != nil {
			return err // cancelled: hosts keep their last assignment
		}
		f.drain()
		now := workflow.Now(ctx)
		f.checkClosed(now)
		f.plan(now)
		// Not while a look for closed workflows is on its way: its answer
		// would be lost.
		if workflow.GetInfo(ctx).GetCurrentHistoryLength() > fleetHistory && f.checking == nil {
			f.drain()
			return workflow.NewContinueAsNewError(ctx, Fleet, api.FleetInput{Policy: f.p, State: f.s, Stats: f.stats})
		}
		f.wait()
	}
}

// fleetRun is one run of the Fleet workflow, until it continues as new:
// the state it plans over, what it last told Episodes workflows, and its
// look for closed ones.
type fleetRun struct {
	ctx   workflow.Context
	p     fleet.Policy
	s     fleet.State
	stats map[string][]schemas.SlotStats // what each host reported of its slots
	// notified holds the cause each unservable weights was last told, so
	// its Episodes workflows hear it once.
	notified map[string]string
	notes    map[string]string // the note each demand was last sent

	demands, reports workflow.ReceiveChannel
	checking         workflow.Future // the look for closed Episodes workflows, while on its way
	lastCheck        time.Time
}

// newFleetRun starts from the state the last run continued with, the
// default policy unless the input has one.
func newFleetRun(ctx workflow.Context, in api.FleetInput) *fleetRun {
	f := &fleetRun{ctx: ctx, p: in.Policy, s: in.State, stats: in.Stats, notified: map[string]string{}, notes: map[string]string{}}
	if f.p == (fleet.Policy{}) {
		f.p = fleet.DefaultPolicy
	}
	if f.stats == nil {
		f.stats = map[string][]schemas.SlotStats{}
	}
	return f
}

// answerQueries answers hosts asking what to serve, and status asking
// for the whole fleet.
func (f *fleetRun) answerQueries() error {
	if err := workflow.SetQueryHandler(f.ctx, api.AssignmentQuery, func(host string) (api.Assignment, error) {
		return api.Assignment{Weights: append([]string(nil), f.s.Assign[host]...)}, nil
	}); err != nil {
		return fmt.Errorf("fleet query: %w", err)
	}
	if err := workflow.SetQueryHandler(f.ctx, api.FleetStatusQuery, func() (api.FleetStatus, error) {
		return api.FleetStatus{State: f.s, Stats: f.stats}, nil
	}); err != nil {
		return fmt.Errorf("fleet query: %w", err)
	}
	return nil
}

// onDemand applies what an Episodes workflow told: its demand done
// (perhaps to come again), how many episodes are left, or demand new or
// renewed, which keeps the time it first waited.
func (f *fleetRun) onDemand(c api.DemandChange) {
	s := &f.s
	if s.Demands == nil {
		s.Demands = map[string]fleet.Demand{}
	}
	d := c.Demand
	if c.Done {
		delete(s.Demands, d.Key)
		if c.Again {
			s.Expect(d.Weights, workflow.Now(f.ctx))
		}
		return
	}
	if c.Left {
		if old, ok := s.Demands[d.Key]; ok {
			old.Remaining, old.Pace = d.Remaining, d.Pace
			s.Demands[d.Key] = old
		}
		return
	}
	if old, ok := s.Demands[d.Key]; ok {
		d.Since = old.Since
	} else {
		d.Since = workflow.Now(f.ctx)
	}
	s.Demands[d.Key] = d
	s.Unpark(d.Weights) // fresh demand may have queued episodes
}

// onReport records what a host serves and its slots' stats, seen now.
func (f *fleetRun) onReport(r api.HostReport) {
	if f.s.Hosts == nil {
		f.s.Hosts = map[string]*fleet.Host{}
	}
	h := r.Host
	h.Seen = workflow.Now(f.ctx)
	f.s.Hosts[h.Name] = &h
	f.stats[h.Name] = r.Stats
}

// drain applies the signals already received, demand first.
func (f *fleetRun) drain() {
	for {
		var c api.DemandChange
		if !f.demands.ReceiveAsync(&c) {
			break
		}
		f.onDemand(c)
	}
	for {
		var r api.HostReport
		if !f.reports.ReceiveAsync(&r) {
			break
		}
		f.onReport(r)
	}
}

// checkClosed starts a look for demand whose Episodes workflow closed
// without removing it: one at a time, every demandCheck while there is
// demand.
func (f *fleetRun) checkClosed(now time.Time) {
	if f.checking != nil || len(f.s.Demands) == 0 || now.Sub(f.lastCheck) < demandCheck {
		return
	}
	f.lastCheck = now
	cctx := workflow.WithActivityOptions(f.ctx, workflow.ActivityOptions{
		TaskQueue: api.ControlQueue, StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var records *activities.Records
	f.checking = workflow.ExecuteActivity(summarized(cctx, "fleet: drop demand of closed workflows"), records.ClosedWorkflows, slices.Sorted(maps.Keys(f.s.Demands)))
}

// dropClosed ends the look for closed Episodes workflows, dropping
// their demand; a look that failed is tried again at the next check.
func (f *fleetRun) dropClosed(fut workflow.Future) {
	f.checking = nil
	var closed []string
	if err := fut.Get(f.ctx, &closed); err != nil {
		workflow.GetLogger(f.ctx).Warn("closed Episodes workflows not looked up; next time", "error", err)
		return
	}
	for _, id := range closed {
		delete(f.s.Demands, id)
	}
}

// plan assigns weights to hosts at now, forgets the stats of hosts the
// plan dropped, tells Episodes workflows what changed for them and shows
// the fleet in the Temporal UI.
func (f *fleetRun) plan(now time.Time) {
	bad := f.p.Plan(&f.s, now)
	for name := range f.stats {
		if f.s.Hosts[name] == nil {
			delete(f.stats, name)
		}
	}
	tellUnservable(f.ctx, &f.s, bad, f.notified)
	tellNotes(f.ctx, &f.s, f.stats, f.notes)
	workflow.SetCurrentDetails(f.ctx, fleetMarkdown(f.s, f.stats, now))
}

// wait applies the next signal or the look's answer, or, while the
// fleet has hosts or demand, returns after fleetTick.
func (f *fleetRun) wait() {
	ctx := f.ctx
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(f.demands, func(c workflow.ReceiveChannel, _ bool) {
		var d api.DemandChange
		c.Receive(ctx, &d)
		f.onDemand(d)
	})
	sel.AddReceive(f.reports, func(c workflow.ReceiveChannel, _ bool) {
		var r api.HostReport
		c.Receive(ctx, &r)
		f.onReport(r)
	})
	if f.checking != nil {
		sel.AddFuture(f.checking, f.dropClosed)
	}
	// Without hosts or demand there is nothing to age or expire: the
	// fleet sleeps until someone signals, writing no history.
	var cancel workflow.CancelFunc
	if len(f.s.Hosts) > 0 || len(f.s.Demands) > 0 {
		tctx, c := workflow.WithCancel(ctx)
		cancel = c
		sel.AddFuture(workflow.NewTimer(tctx, fleetTick), func(workflow.Future) {})
	}
	sel.Select(ctx)
	if cancel != nil {
		cancel()
	}
}

// tellUnservable signals the Episodes workflows of weights no live host
// could load, once per cause.
func tellUnservable(ctx workflow.Context, s *fleet.State, bad []fleet.Unservable, notified map[string]string) {
	now := map[string]bool{}
	for _, u := range bad {
		now[u.Weights] = true
		if notified[u.Weights] == u.Cause {
			continue
		}
		notified[u.Weights] = u.Cause
		for _, key := range slices.Sorted(maps.Keys(s.Demands)) {
			d := s.Demands[key]
			if d.Weights != u.Weights {
				continue
			}
			// A workflow that already ended has nothing to stop.
			_ = workflow.SignalExternalWorkflow(ctx, d.Key, "", api.UnservableSignal, api.Unservable{Weights: u.Weights, Cause: u.Cause}).Get(ctx, nil)
		}
	}
	for w := range notified {
		if !now[w] {
			delete(notified, w)
		}
	}
}

// tellNotes sends each Episodes workflow the fleet's note on its weights
// when it changed. The notes hold no running clock, so they change only
// when the assignment, the waiting or the run's loads do.
func tellNotes(ctx workflow.Context, s *fleet.State, stats map[string][]schemas.SlotStats, sent map[string]string) {
	by := s.ServedBy()
	now := workflow.Now(ctx)
	for _, key := range slices.Sorted(maps.Keys(s.Demands)) {
		d := s.Demands[key]
		where := fmt.Sprintf("weights `%s` (priority %d): ", d.Weights, d.Priority)
		at, waiting := s.Waiting[d.Weights]
		switch {
		case len(by[d.Weights]) > 0:
			where += "served by " + strings.Join(by[d.Weights], ", ")
		case waiting:
			where += "waiting for a rollout host since " + at.UTC().Format("15:04:05") + " UTC"
			if s.Boost[d.Weights] {
				where += ", boosted ahead of every priority"
			}
		default:
			where += "not assigned yet"
		}
		long := len(by[d.Weights]) == 0 && waiting && now.Sub(at) >= api.LongWait
		text := where
		var run schemas.SlotStats
		for _, h := range slices.Sorted(maps.Keys(stats)) {
			for _, x := range stats[h] {
				if x.Run == d.Run {
					run.Add(x)
				}
			}
		}
		text += fmt.Sprintf(" · run %s on the fleet: %d model-server loads (%s fetching weights, %s serving paused; %s idle), %d episodes waited for a server",
			d.Run, run.Loads, run.FetchTime.Round(time.Second), run.Paused().Round(time.Second), run.Idle.Round(time.Second), run.Waits)
		said := fmt.Sprint(text, long)
		if sent[key] == said {
			continue
		}
		sent[key] = said
		// Not waited on: a workflow that ended has nothing to show.
		workflow.SignalExternalWorkflow(ctx, d.Key, "", api.FleetNoteSignal, api.FleetNote{Weights: d.Weights, Text: text, Where: where, Waiting: long})
	}
	for key := range sent {
		if _, ok := s.Demands[key]; !ok {
			delete(sent, key)
		}
	}
}

// fleetMarkdown is the fleet's current details in the Temporal UI: each
// host with what it serves and what it has loaded, then the demand.
func fleetMarkdown(s fleet.State, stats map[string][]schemas.SlotStats, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**fleet**: %d rollout hosts, %d episode sets waiting for weights, %d assignment changes\n\n", len(s.Hosts), len(s.Demands), s.Changes)
	if len(s.Hosts) > 0 {
		b.WriteString("| host | assigned | loaded (busy) | loads | fetching | serving paused | idle | waited |\n|---|---|---|---|---|---|---|---|\n")
		for _, n := range slices.Sorted(maps.Keys(s.Hosts)) {
			h := s.Hosts[n]
			var loaded []string
			for _, sv := range h.Loaded {
				loaded = append(loaded, fmt.Sprintf("%s (%d)", sv.Weights, sv.Busy))
			}
			var sum schemas.SlotStats
			for _, st := range stats[n] {
				sum.Add(st)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %d |\n", n, strings.Join(s.Assign[n], ", "), strings.Join(loaded, ", "),
				sum.Loads, sum.FetchTime.Round(time.Second), sum.Paused().Round(time.Second), sum.Idle.Round(time.Second), sum.Waits)
		}
	}
	if len(s.Demands) > 0 {
		// One row per weights: a large evaluation is many episode sets.
		b.WriteString("\n| weights | run | priority | episodes left / all | sets | served by | waiting |\n|---|---|---|---|---|---|---|\n")
		by := s.ServedBy()
		for _, d := range s.ByWeights("") {
			wait := "—"
			if at, ok := s.Waiting[d.Weights]; ok {
				wait = now.Sub(at).Round(time.Second).String()
				if s.Boost[d.Weights] {
					wait += " (boosted)"
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d / %d | %d | %s | %s |\n", d.Weights, d.Run, d.Priority, d.Left, d.Episodes, d.Sets, strings.Join(by[d.Weights], ", "), wait)
		}
	}
	return b.String()
}
