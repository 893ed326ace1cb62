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
	p := in.Policy
	if p == (fleet.Policy{}) {
		p = fleet.DefaultPolicy
	}
	s := in.State
	stats := in.Stats
	if stats == nil {
		stats = map[string][]schemas.SlotStats{}
	}
	// notified holds the cause each unservable weights was last told, so
	// its Episodes workflows hear it once.
	notified := map[string]string{}
	notes := map[string]string{} // the note each demand was last sent
	if err := workflow.SetQueryHandler(ctx, api.AssignmentQuery, func(host string) (api.Assignment, error) {
		return api.Assignment{Weights: append([]string(nil), s.Assign[host]...)}, nil
	}); err != nil {
		return fmt.Errorf("fleet query: %w", err)
	}
	if err := workflow.SetQueryHandler(ctx, api.FleetStatusQuery, func() (api.FleetStatus, error) {
		return api.FleetStatus{State: s, Stats: stats}, nil
	}); err != nil {
		return fmt.Errorf("fleet query: %w", err)
	}
	demands := workflow.GetSignalChannel(ctx, api.DemandSignal)
	reports := workflow.GetSignalChannel(ctx, api.ReportSignal)
	onDemand := func(c api.DemandChange) {
		if s.Demands == nil {
			s.Demands = map[string]fleet.Demand{}
		}
		d := c.Demand
		if c.Done {
			delete(s.Demands, d.Key)
			if c.Again {
				s.Expect(d.Weights, workflow.Now(ctx))
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
			d.Since = workflow.Now(ctx)
		}
		s.Demands[d.Key] = d
		s.Unpark(d.Weights) // fresh demand may have queued episodes
	}
	onReport := func(r api.HostReport) {
		if s.Hosts == nil {
			s.Hosts = map[string]*fleet.Host{}
		}
		h := r.Host
		h.Seen = workflow.Now(ctx)
		s.Hosts[h.Name] = &h
		stats[h.Name] = r.Stats
	}
	drain := func() {
		for {
			var c api.DemandChange
			if !demands.ReceiveAsync(&c) {
				break
			}
			onDemand(c)
		}
		for {
			var r api.HostReport
			if !reports.ReceiveAsync(&r) {
				break
			}
			onReport(r)
		}
	}
	var records *activities.Records
	var checking workflow.Future
	var lastCheck time.Time
	for {
		if err := ctx.Err(); err != nil {
			return err // cancelled: hosts keep their last assignment
		}
		drain()
		now := workflow.Now(ctx)
		if checking == nil && len(s.Demands) > 0 && now.Sub(lastCheck) >= demandCheck {
			lastCheck = now
			cctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
				TaskQueue: api.ControlQueue, StartToCloseTimeout: time.Minute,
				RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3},
			})
			checking = workflow.ExecuteActivity(summarized(cctx, "fleet: drop demand of closed workflows"), records.ClosedWorkflows, slices.Sorted(maps.Keys(s.Demands)))
		}
		bad := p.Plan(&s, now)
		for name := range stats {
			if s.Hosts[name] == nil {
				delete(stats, name)
			}
		}
		tellUnservable(ctx, &s, bad, notified)
		tellNotes(ctx, &s, stats, notes)
		workflow.SetCurrentDetails(ctx, fleetMarkdown(s, stats, now))
		if workflow.GetInfo(ctx).GetCurrentHistoryLength() > fleetHistory && checking == nil {
			drain()
			return workflow.NewContinueAsNewError(ctx, Fleet, api.FleetInput{Policy: p, State: s, Stats: stats})
		}
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(demands, func(c workflow.ReceiveChannel, _ bool) {
			var d api.DemandChange
			c.Receive(ctx, &d)
			onDemand(d)
		})
		sel.AddReceive(reports, func(c workflow.ReceiveChannel, _ bool) {
			var r api.HostReport
			c.Receive(ctx, &r)
			onReport(r)
		})
		if checking != nil {
			sel.AddFuture(checking, func(f workflow.Future) {
				checking = nil
				var closed []string
				if err := f.Get(ctx, &closed); err != nil {
					workflow.GetLogger(ctx).Warn("closed Episodes workflows not looked up; next time", "error", err)
					return
				}
				for _, id := range closed {
					delete(s.Demands, id)
				}
			})
		}
		// Without hosts or demand there is nothing to age or expire: the
		// fleet sleeps until someone signals, writing no history.
		var cancel workflow.CancelFunc
		if len(s.Hosts) > 0 || len(s.Demands) > 0 {
			tctx, c := workflow.WithCancel(ctx)
			cancel = c
			sel.AddFuture(workflow.NewTimer(tctx, fleetTick), func(workflow.Future) {})
		}
		sel.Select(ctx)
		if cancel != nil {
			cancel()
		}
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
		text += fmt.Sprintf(" · run %s on the fleet: %d model-server loads (%s loading, %s idle), %d episodes waited for a server",
			d.Run, run.Loads, run.LoadTime.Round(time.Second), run.Idle.Round(time.Second), run.Waits)
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
		b.WriteString("| host | assigned | loaded (busy) | loads | loading | idle | waited |\n|---|---|---|---|---|---|---|\n")
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
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %d |\n", n, strings.Join(s.Assign[n], ", "), strings.Join(loaded, ", "),
				sum.Loads, sum.LoadTime.Round(time.Second), sum.Idle.Round(time.Second), sum.Waits)
		}
	}
	if len(s.Demands) > 0 {
		b.WriteString("\n| weights | run | priority | episodes | served by | waiting |\n|---|---|---|---|---|---|\n")
		by := s.ServedBy()
		for _, key := range slices.Sorted(maps.Keys(s.Demands)) {
			d := s.Demands[key]
			wait := "—"
			if at, ok := s.Waiting[d.Weights]; ok {
				wait = now.Sub(at).Round(time.Second).String()
				if s.Boost[d.Weights] {
					wait += " (boosted)"
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s |\n", d.Weights, d.Run, d.Priority, d.Episodes, strings.Join(by[d.Weights], ", "), wait)
		}
	}
	return b.String()
}
