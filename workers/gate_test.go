package workers

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"
)

type reserveInfo struct {
	worker.SlotReservationInfo
	queue string
}

func (r reserveInfo) TaskQueue() string { return r.queue }

type permitInfo struct {
	worker.SlotReleaseInfo
	p *worker.SlotPermit
}

func (p permitInfo) Permit() *worker.SlotPermit { return p.p }

type usedInfo struct {
	worker.SlotMarkUsedInfo
	p *worker.SlotPermit
}

func (u usedInfo) Permit() *worker.SlotPermit { return u.p }

// The gate polls only open queues, within the host's slots; polls of a
// queue just shut stop holding slots, and an episode such a poll brings
// counts until it ends.
func TestGate(t *testing.T) {
	g := newGate(2)
	a, b := reserveInfo{queue: "a"}, reserveInfo{queue: "b"}
	if p := g.TryReserveSlot(a); p != nil {
		t.Fatal("a shut queue got a slot")
	}
	g.set("a", true)
	pa1, pa2 := g.TryReserveSlot(a), g.TryReserveSlot(a)
	if pa1 == nil || pa2 == nil {
		t.Fatal("an open queue got no slot")
	}
	if g.TryReserveSlot(a) != nil {
		t.Fatal("a third slot of 2")
	}

	// Shutting a frees its polls' slots for b.
	g.set("b", true)
	g.set("a", false)
	pb1, pb2 := g.TryReserveSlot(b), g.TryReserveSlot(b)
	if pb1 == nil || pb2 == nil {
		t.Fatal("b got no slots after a shut")
	}
	// a's waiting poll brings an episode: it takes a slot until it ends.
	g.MarkSlotUsed(usedInfo{p: pa1})
	g.ReleaseSlot(permitInfo{p: pb2})
	if g.TryReserveSlot(b) != nil {
		t.Fatal("b polled while a's stray episode and b's poll fill the slots")
	}
	g.ReleaseSlot(permitInfo{p: pa1})
	g.ReleaseSlot(permitInfo{p: pa2})
	g.ReleaseSlot(permitInfo{p: pb1})
	if g.TryReserveSlot(b) == nil {
		t.Fatal("b got no slot after a's episode ended")
	}

	// A reservation for a shut queue ends with its context.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, err := g.ReserveSlot(cctx, a); err == nil {
		t.Fatal("a shut queue's reservation outlived its context")
	}
}

// With two queues open, one with nothing queued, the other still runs
// an episode on every slot: an open queue keeps one poll while a slot
// runs nothing, whatever the other's polls hold; beyond the slots at most
// one episode per other open queue.
func TestGateTwoOpenQueues(t *testing.T) {
	g := newGate(2)
	idle, busy := reserveInfo{queue: "idle"}, reserveInfo{queue: "busy"}
	g.set("idle", true)
	pi1, pi2 := g.TryReserveSlot(idle), g.TryReserveSlot(idle)
	if pi1 == nil || pi2 == nil {
		t.Fatal("an open queue got no slots")
	}
	// busy opens while idle's polls hold both slots: one poll at once,
	// not a second.
	got := make(chan *worker.SlotPermit, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g.set("busy", true)
	go func() {
		p, _ := g.ReserveSlot(ctx, busy)
		got <- p
	}()
	var pb1 *worker.SlotPermit
	select {
	case pb1 = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("busy got no poll while idle's polls held the slots")
	}
	if g.TryReserveSlot(busy) != nil {
		t.Fatal("busy got a second poll beyond the slots with one outstanding")
	}
	// Its poll brings an episode: with a slot running nothing, it polls
	// again, and that one's episode fills the slots.
	g.MarkSlotUsed(usedInfo{p: pb1})
	pb2 := g.TryReserveSlot(busy)
	if pb2 == nil {
		t.Fatal("busy got no poll with a slot running nothing")
	}
	g.MarkSlotUsed(usedInfo{p: pb2})
	if g.TryReserveSlot(busy) != nil || g.TryReserveSlot(idle) != nil {
		t.Fatal("a poll with every slot running an episode")
	}
	// One of idle's polls brings an episode after all: one beyond the
	// slots, the bound with two queues open.
	g.MarkSlotUsed(usedInfo{p: pi1})
	if g.used != 3 {
		t.Fatalf("%d episodes running, want 3", g.used)
	}
	// Until two have ended, nothing more is polled.
	g.ReleaseSlot(permitInfo{p: pb1})
	if g.TryReserveSlot(busy) != nil {
		t.Fatal("a poll with every slot still running an episode")
	}
	g.ReleaseSlot(permitInfo{p: pb2})
	if g.TryReserveSlot(busy) == nil {
		t.Fatal("no poll with a slot free")
	}
}
