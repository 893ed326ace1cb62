package itest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Relay forwards TCP connections from a local port to a server, and can
// cut them as a network partition would: Partition drops every open
// connection and holds new ones unanswered until Heal. A worker pointed
// at a relay in front of Temporal loses Temporal while still reaching S3,
// the partial partition of docs/design.md §8.
type Relay struct {
	Addr   string // where to connect instead of the server
	target string
	ln     net.Listener

	mu      sync.Mutex
	cut     bool
	conns   map[net.Conn]bool
	waiting []net.Conn
}

// StartRelay listens on a free loopback port and forwards to target until
// the test ends.
func StartRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]bool{}}
	go r.accept()
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for c := range r.conns {
			c.Close()
		}
		for _, c := range r.waiting {
			c.Close()
		}
	})
	return r
}

func (r *Relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed at cleanup
		}
		r.mu.Lock()
		if r.cut {
			r.waiting = append(r.waiting, c) // unanswered, as behind a partition
			r.mu.Unlock()
			continue
		}
		r.mu.Unlock()
		go r.forward(c)
	}
}

func (r *Relay) forward(c net.Conn) {
	s, err := net.Dial("tcp", r.target)
	if err != nil {
		c.Close()
		return
	}
	r.mu.Lock()
	if r.cut {
		r.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	r.conns[c], r.conns[s] = true, true
	r.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) { _, _ = io.Copy(dst, src); done <- struct{}{} }
	go pipe(s, c)
	go pipe(c, s)
	<-done
	c.Close()
	s.Close()
	<-done
	r.mu.Lock()
	delete(r.conns, c)
	delete(r.conns, s)
	r.mu.Unlock()
}

// Partition drops the open connections and leaves new ones unanswered.
func (r *Relay) Partition() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = true
	for c := range r.conns {
		c.Close()
	}
}

// Heal forwards again, the held connections first.
func (r *Relay) Heal() {
	r.mu.Lock()
	r.cut = false
	held := r.waiting
	r.waiting = nil
	r.mu.Unlock()
	for _, c := range held {
		go r.forward(c)
	}
}
