package workers

import (
	"context"
	"sync"

	"go.temporal.io/sdk/worker"
)

// gate is the activity slot supplier shared by a rollout host's workers,
// one per weights queue. The SDK reserves a slot before it polls, so a
// queue whose gate is shut is not polled at all: the host takes episodes
// only of the weights the fleet assigned it, and no more than its slots
// at once.
//
// A poll holds its slot while it waits (up to a minute). Polls of shut
// queues therefore stop counting against the slots: they would otherwise
// keep the host from polling the weights it was just given. Such a poll
// may still bring one episode, which then runs beside the host's slots
// (at most two per queue just shut), and the host serves it, switching
// back if it must: a load, never a lost episode.
//
// For the same reason an open queue may keep one poll while any slot runs
// no episode, whatever other queues' polls hold: a host serving two
// weights, one of them with nothing queued, otherwise ran the other's
// episodes on half its slots while the idle queue's polls waited out
// their minute (issue 26: a round's collection took 40 s instead of 20).
// When every poll brings an episode at once, the host runs at most one
// per other open queue beyond its slots.
type gate struct {
	mu      sync.Mutex
	slots   int
	used    int            // permits running a task
	polling map[string]int // permits waiting in a poll, by queue
	open    map[string]bool
	changed chan struct{} // closed and replaced on every change
}

// permit says which queue a slot was reserved for and whether it runs a task.
type permit struct {
	queue string
	used  bool
}

func newGate(slots int) *gate {
	return &gate{slots: slots, polling: map[string]int{}, open: map[string]bool{}, changed: make(chan struct{})}
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

func (g *gate) wake() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// busy counts the slots taken: running tasks and polls of open queues.
func (g *gate) busy() int {
	n := g.used
	for q, k := range g.polling {
		if g.open[q] {
			n += k
		}
	}
	return n
}

func (g *gate) take(q string) (*worker.SlotPermit, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open[q] && (g.busy() < g.slots || (g.polling[q] == 0 && g.used < g.slots)) {
		g.polling[q]++
		return &worker.SlotPermit{UserData: &permit{queue: q}}, nil
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

func (g *gate) MarkSlotUsed(info worker.SlotMarkUsedInfo) {
	p, ok := info.Permit().UserData.(*permit)
	if !ok || p.used {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p.used = true
	g.polling[p.queue]--
	g.used++
	g.wake() // the queue may have no poll left: it may take one
}

func (g *gate) ReleaseSlot(info worker.SlotReleaseInfo) {
	p, ok := info.Permit().UserData.(*permit)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.used {
		g.used--
	} else {
		g.polling[p.queue]--
	}
	g.wake()
}

func (g *gate) MaxSlots() int { return g.slots }
