package workers

import (
	"context"
	"sync"

	"go.temporal.io/sdk/worker"
)

// gate is the activity slot supplier shared by a rollout host's workers,
// one per weights queue. The SDK reserves a slot before it polls, so a
// queue whose gate is shut is not polled at all: the host takes episodes
// only of the weights the fleet assigned it, and never more than its
// slots at once across all of them. A poll already waiting when a queue
// shuts may still bring one episode; the host then serves it (switching
// back if it must), which costs a load, never an episode.
type gate struct {
	mu      sync.Mutex
	slots   int
	issued  int
	open    map[string]bool
	changed chan struct{} // closed and replaced on every change
}

func newGate(slots int) *gate {
	return &gate{slots: slots, open: map[string]bool{}, changed: make(chan struct{})}
}

// set opens or shuts queue q.
func (g *gate) set(q string, open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open[q] == open {
		return
	}
	if open {
		g.open[q] = true
	} else {
		delete(g.open, q)
	}
	g.wake()
}

func (g *gate) isOpen(q string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open[q]
}

func (g *gate) wake() {
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *gate) take(q string) (*worker.SlotPermit, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open[q] && g.issued < g.slots {
		g.issued++
		return &worker.SlotPermit{}, nil
	}
	return nil, g.changed
}

func (g *gate) ReserveSlot(ctx context.Context, info worker.SlotReservationInfo) (*worker.SlotPermit, error) {
	for {
		p, wait := g.take(info.TaskQueue())
		if p != nil {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait:
		}
	}
}

func (g *gate) TryReserveSlot(info worker.SlotReservationInfo) *worker.SlotPermit {
	p, _ := g.take(info.TaskQueue())
	return p
}

func (g *gate) MarkSlotUsed(worker.SlotMarkUsedInfo) {}

func (g *gate) ReleaseSlot(worker.SlotReleaseInfo) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.issued--
	g.wake()
}

func (g *gate) MaxSlots() int { return g.slots }
