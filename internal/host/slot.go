package host

import (
	"context"
	"sort"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
)

// SlotStats is what a host's model-server slot did for one run: how often
// it loaded the run's weights and for how long, how long it sat loaded
// but unused, and how many of the run's episodes waited for it to be
// free of other weights. They show what switching weights costs a shared
// fleet.
type SlotStats struct {
	Run      string        `json:"run"`
	Loads    int           `json:"loads"`     // model-server starts for the run's weights
	Failed   int           `json:"failed"`    // starts that did not become ready
	LoadTime time.Duration `json:"load_time"` // fetching weights and starting, summed
	Idle     time.Duration `json:"idle"`      // loaded with the run's weights, no episode using it
	Waits    int           `json:"waits"`     // episodes that waited while other weights were in use
	WaitTime time.Duration `json:"wait_time"`
	Waiting  int           `json:"waiting"` // episodes waiting now
}

// slotLog keeps SlotStats by run; the caller holds h.mu.
type slotLog struct {
	runs      map[string]*SlotStats
	idleRun   string    // run whose weights are loaded and unused
	idleSince time.Time // zero: the slot is in use or empty
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
func (l *slotLog) loaded(ctx context.Context, run string, d time.Duration, ok bool) {
	s := l.of(run)
	s.LoadTime += d
	if ok {
		s.Loads++
	} else {
		s.Failed++
	}
	instr.ModelLoad(ctx, ok, d)
}

// idle marks the slot loaded with run's weights and unused from now; busy
// ends such a stretch (the slot taken, switched or stopped).
func (l *slotLog) idle(run string, now time.Time) {
	l.busy(now)
	l.idleRun, l.idleSince = run, now
}

func (l *slotLog) busy(now time.Time) {
	if !l.idleSince.IsZero() {
		d := now.Sub(l.idleSince)
		l.of(l.idleRun).Idle += d
		instr.ModelIdle(context.Background(), d)
		l.idleSince = time.Time{}
	}
}

// SlotStats returns the model slot's figures per run, runs in name order,
// with the idle stretch still going counted up to now.
func (h *Host) SlotStats() []SlotStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []SlotStats
	for _, s := range h.slots.runs {
		c := *s
		if h.slots.idleRun == s.Run && !h.slots.idleSince.IsZero() {
			c.Idle += time.Since(h.slots.idleSince)
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Run < out[j].Run })
	return out
}
