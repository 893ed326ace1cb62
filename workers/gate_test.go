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

	// b waits while a holds both slots in polls.
	got := make(chan *worker.SlotPermit, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g.set("b", true)
	go func() {
		p, _ := g.ReserveSlot(ctx, b)
		got <- p
	}()
	select {
	case <-got:
		t.Fatal("b polled beyond the slots")
	case <-time.After(50 * time.Millisecond):
	}
	// Shutting a frees its polls' slots for b.
	g.set("a", false)
	if p := <-got; p == nil {
		t.Fatal("b got no slot after a shut")
	}
	pb2 := g.TryReserveSlot(b)
	if pb2 == nil {
		t.Fatal("b's second slot")
	}
	// a's waiting poll brings an episode: it takes a slot until it ends.
	g.MarkSlotUsed(usedInfo{p: pa1})
	g.ReleaseSlot(permitInfo{p: pb2})
	if g.TryReserveSlot(b) != nil {
		t.Fatal("b polled while a's stray episode and b's poll fill the slots")
	}
	g.ReleaseSlot(permitInfo{p: pa1})
	g.ReleaseSlot(permitInfo{p: pa2})
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
