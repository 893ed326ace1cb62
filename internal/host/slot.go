package host

import (
	"context"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// SlotStats is schemas.SlotStats: the host's figures for one run.
type SlotStats = schemas.SlotStats

// slotLog keeps SlotStats by run; the caller holds h.mu.
type slotLog struct {
	runs map[string]*SlotStats
	// idle holds, by model slot, the run whose weights are loaded there
	// unused and since when.
	idle map[string]idleMark
}

type idleMark struct {
	run   string
	since time.Time
}

func (l *slotLog) of(run string) *SlotStats {
	if l.runs == nil {
		l.runs = map[string]*SlotStats{}
	}
	s := l.runs[run]
	if s == nil {
		s = &SlotStats{Run: run}
		l.runs[run] = s
	}
	return s
}

// loaded records a model-server start for run's weights.
func (l *slotLog) loaded(ctx context.Context, run string, d, fetch time.Duration, ok bool) {
	s := l.of(run)
	s.LoadTime += d
	s.FetchTime += min(fetch, d)
	if ok {
		s.Loads++
	} else {
		s.Failed++
	}
	instr.ModelLoad(ctx, ok, d)
}

// idle marks model slot loaded with run's weights and unused from now;
// busy ends such a stretch (the slot taken, switched or stopped), and
// busy("") ends every slot's.
func (l *slotLog) idleAt(slot, run string, now time.Time) {
	l.busy(slot, now)
	if l.idle == nil {
		l.idle = map[string]idleMark{}
	}
	l.idle[slot] = idleMark{run: run, since: now}
}

func (l *slotLog) busy(slot string, now time.Time) {
	for k, m := range l.idle {
		if slot != "" && k != slot {
			continue
		}
		d := now.Sub(m.since)
		l.of(m.run).Idle += d
		instr.ModelIdle(context.Background(), d)
		delete(l.idle, k)
	}
}

// SlotStats returns the model slot's figures per run, runs in name order,
// with the idle stretch still going counted up to now.
func (h *Host) SlotStats() []SlotStats {
	if !h.lockSoon() {
		h.viewMu.Lock()
		defer h.viewMu.Unlock()
		return slices.Clone(h.view.stats)
	}
	defer h.mu.Unlock()
	var out []SlotStats
	for _, s := range h.slots.runs {
		c := *s
		for _, m := range h.slots.idle {
			if m.run == s.Run {
				c.Idle += time.Since(m.since)
			}
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Run < out[j].Run })
	h.viewMu.Lock()
	h.view.stats = slices.Clone(out)
	h.viewMu.Unlock()
	return out
}

// hostView is what Models and SlotStats last answered.
type hostView struct {
	servers []fleet.Server
	failed  map[string]fleet.Failure
	stats   []SlotStats
}

// lockSoon takes h.mu if it comes free within 200 ms. A model server's
// start holds it for as long as the start takes, and the fleet must hear
// from the host meanwhile: the callers then answer from h.view.
func (h *Host) lockSoon() bool {
	for range 20 {
		if h.mu.TryLock() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// Models says what the host's model servers serve, how many episodes use
// each and since when an unused one has been idle, and which weights
// failed to load here: what the host reports to the fleet.
func (h *Host) Models() ([]fleet.Server, map[string]fleet.Failure) {
	if !h.lockSoon() {
		h.viewMu.Lock()
		defer h.viewMu.Unlock()
		return slices.Clone(h.view.servers), maps.Clone(h.view.failed)
	}
	defer h.mu.Unlock()
	var out []fleet.Server
	for name, m := range h.services {
		if !isModelSlot(name) || m.weights == "" || !m.alive() {
			continue
		}
		sv := fleet.Server{Weights: m.weights, Busy: m.users, Load: m.loadTook}
		if m.users == 0 {
			sv.IdleSince = m.idleSince
		}
		out = append(out, sv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Weights < out[j].Weights })
	failed := make(map[string]fleet.Failure, len(h.loadFailed))
	for k, f := range h.loadFailed {
		failed[k] = f
	}
	h.viewMu.Lock()
	h.view.servers, h.view.failed = slices.Clone(out), maps.Clone(failed)
	h.viewMu.Unlock()
	return out, failed
}
