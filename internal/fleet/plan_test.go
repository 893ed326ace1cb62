package fleet

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

var testPolicy = Policy{Lease: 30 * time.Second, MaxWait: 10 * time.Minute, IdleGrace: 3 * time.Second, ParkFor: 30 * time.Second, ExpectFor: 2 * time.Minute, FailedFor: 5 * time.Minute}

// plan runs Plan at now with every host having just reported.
func plan(s *State, now time.Time) []Unservable {
	for _, h := range s.Hosts {
		h.Seen = now
	}
	return testPolicy.Plan(s, now)
}

func host(name string, servers int, now time.Time, loaded ...Server) *Host {
	return &Host{Name: name, Slots: 4, Servers: servers, Loaded: loaded, Seen: now}
}

func demand(key, weights string, prio int, since time.Time) Demand {
	return Demand{Key: key, Run: strings.Split(weights, "/")[0], Weights: weights, Priority: prio, Episodes: 30, Since: since}
}

// few makes d a phase one host runs at once: it never spreads.
func few(d Demand) Demand { d.Episodes = 4; return d }

func state(hosts ...*Host) *State {
	s := &State{Hosts: map[string]*Host{}, Demands: map[string]Demand{}}
	for _, h := range hosts {
		s.Hosts[h.Name] = h
	}
	return s
}

func wantAssign(t *testing.T, s *State, want map[string][]string) {
	t.Helper()
	if !reflect.DeepEqual(s.Assign, want) {
		t.Fatalf("assignment %v, want %v", s.Assign, want)
	}
}

// One host, one server: training's weights first, then the sweep's in the
// order they were asked for, each kept until its demand ends.
func TestOneServerTakesWeightsInTurn(t *testing.T) {
	s := state(host("h1", 1, t0))
	s.Demands["sweep-a"] = demand("sweep-a", "sw/a", EvalPriority, t0)
	s.Demands["sweep-b"] = demand("sweep-b", "sw/b", EvalPriority, t0.Add(time.Second))
	s.Demands["train"] = demand("train", "tr/w0", TrainPriority, t0.Add(2*time.Second))
	plan(s, t0.Add(2*time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})

	// Training's episodes run; the sweep keeps waiting, not switching in.
	s.Hosts["h1"].Loaded = []Server{{Weights: "tr/w0", Busy: 4}}
	s.Hosts["h1"].Seen = t0.Add(5 * time.Second)
	plan(s, t0.Add(5*time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})

	// Training's validation ends and its collection, with the same
	// weights, is announced: the server waits for it, not for the sweep.
	delete(s.Demands, "train")
	s.Expect("tr/w0", t0.Add(6*time.Second))
	s.Hosts["h1"].Loaded = []Server{{Weights: "tr/w0", IdleSince: t0.Add(6 * time.Second)}}
	plan(s, t0.Add(20*time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
	s.Demands["collect"] = demand("collect", "tr/w0", TrainPriority, t0.Add(21*time.Second))
	plan(s, t0.Add(21*time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
	if len(s.Expected) != 0 {
		t.Errorf("expected %v after the demand came", s.Expected)
	}
	// Collection ends with nothing announced: the sweep's come at once.
	delete(s.Demands, "collect")
	s.Hosts["h1"].Loaded = []Server{{Weights: "tr/w0", IdleSince: t0.Add(30 * time.Second)}}
	plan(s, t0.Add(30*time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"sw/a"}})
	// A weights not loaded yet leaves as soon as its demand ends.
	delete(s.Demands, "sweep-a")
	plan(s, t0.Add(10*time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"sw/b"}})
	// An announcement that never comes true holds the server ExpectFor.
	s2 := state(host("h1", 1, t0, Server{Weights: "tr/w0", IdleSince: t0}))
	s2.Assign = map[string][]string{"h1": {"tr/w0"}}
	s2.Expect("tr/w0", t0)
	s2.Demands["sweep-a"] = demand("sweep-a", "sw/a", EvalPriority, t0)
	plan(s2, t0.Add(testPolicy.ExpectFor-time.Second))
	wantAssign(t, s2, map[string][]string{"h1": {"tr/w0"}})
	plan(s2, t0.Add(testPolicy.ExpectFor))
	wantAssign(t, s2, map[string][]string{"h1": {"sw/a"}})

	// Without other demand, loaded weights stay assigned.
	s.Hosts["h1"].Loaded = []Server{{Weights: "sw/b", IdleSince: t0.Add(11 * time.Second)}}
	delete(s.Demands, "sweep-b")
	plan(s, t0.Add(time.Hour))
	wantAssign(t, s, map[string][]string{"h1": {"sw/b"}})
}

// A training round's weights take the server of a sweep's (less urgent)
// weights; the sweep's then wait, and equal priorities never preempt.
func TestTrainingTakesTheSweepsServer(t *testing.T) {
	s := state(host("h1", 1, t0, Server{Weights: "sw/a", Busy: 4}))
	s.Demands["sweep-a"] = demand("sweep-a", "sw/a", EvalPriority, t0)
	plan(s, t0)
	s.Demands["train"] = demand("train", "tr/w0", TrainPriority, t0.Add(time.Second))
	plan(s, t0.Add(time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
	if _, ok := s.Waiting["sw/a"]; !ok {
		t.Errorf("the sweep's weights are not waiting: %v", s.Waiting)
	}

	// Another evaluation at the sweep's priority does not take the server.
	s2 := state(host("h1", 1, t0, Server{Weights: "sw/a", Busy: 4}))
	s2.Demands["sweep-a"] = demand("sweep-a", "sw/a", EvalPriority, t0)
	plan(s2, t0)
	s2.Demands["eval"] = demand("eval", "ev/w3", EvalPriority, t0.Add(time.Second))
	plan(s2, t0.Add(time.Second))
	wantAssign(t, s2, map[string][]string{"h1": {"sw/a"}})
}

// A server idle for IdleGrace has nothing queued: waiting weights take it
// even at lower priority. Before the grace it stays.
func TestIdleServerGivesWay(t *testing.T) {
	h := host("h1", 1, t0, Server{Weights: "tr/w0", IdleSince: t0})
	s := state(h)
	s.Demands["train"] = demand("train", "tr/w0", TrainPriority, t0)
	plan(s, t0)
	s.Demands["sweep-a"] = demand("sweep-a", "sw/a", EvalPriority, t0)
	plan(s, t0.Add(time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
	plan(s, t0.Add(3*time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"sw/a"}})

	// A server whose weights took 20 s to load stays idle 20 s first.
	slow := state(host("h1", 1, t0, Server{Weights: "tr/w0", IdleSince: t0, Load: 20 * time.Second}))
	slow.Demands["train"] = demand("train", "tr/w0", TrainPriority, t0)
	slow.Demands["sweep-a"] = demand("sweep-a", "sw/a", EvalPriority, t0)
	plan(slow, t0.Add(19*time.Second))
	wantAssign(t, slow, map[string][]string{"h1": {"tr/w0"}})
	plan(slow, t0.Add(20*time.Second))
	wantAssign(t, slow, map[string][]string{"h1": {"sw/a"}})

	// Loaded on a second host, it gives way after IdleGrace alone: its
	// next episodes go to that host, nothing is loaded again. The last
	// server of it keeps the ski-rental wait.
	two := state(host("h1", 1, t0, Server{Weights: "tr/w0", IdleSince: t0, Load: 20 * time.Second}),
		host("h2", 1, t0, Server{Weights: "tr/w0", IdleSince: t0, Load: 20 * time.Second}))
	two.Assign = map[string][]string{"h1": {"tr/w0"}, "h2": {"tr/w0"}}
	two.Demands["train"] = demand("train", "tr/w0", TrainPriority, t0)
	two.Demands["sweep-a"] = demand("sweep-a", "sw/a", EvalPriority, t0)
	plan(two, t0.Add(3*time.Second))
	wantAssign(t, two, map[string][]string{"h1": {"sw/a"}, "h2": {"tr/w0"}})
	two.Demands["sweep-b"] = demand("sweep-b", "sw/b", EvalPriority, t0)
	plan(two, t0.Add(19*time.Second))
	wantAssign(t, two, map[string][]string{"h1": {"sw/a"}, "h2": {"tr/w0"}})

	// Training's demand stands but nothing of it is queued: parked, it
	// preempts nobody for ParkFor, then it does (a retry may wait).
	h.Loaded = []Server{{Weights: "sw/a", Busy: 2}}
	plan(s, t0.Add(4*time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"sw/a"}})
	plan(s, t0.Add(3*time.Second+testPolicy.ParkFor))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})

	// Fresh demand (a rerun, a new chunk) unparks at once.
	h.Loaded = []Server{{Weights: "tr/w0", IdleSince: t0.Add(40 * time.Second)}}
	plan(s, t0.Add(50*time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"sw/a"}})
	s.Unpark("tr/w0")
	plan(s, t0.Add(51*time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
}

// Under training demand that never ends, a sweep is Boosted after MaxWait
// and served; training then waits for it, and is never starved either.
func TestNothingWaitsWithoutBound(t *testing.T) {
	s := state(host("h1", 1, t0, Server{Weights: "tr/w0", Busy: 4}))
	s.Demands["train"] = demand("train", "tr/w0", TrainPriority, t0)
	s.Demands["sweep-a"] = demand("sweep-a", "sw/a", EvalPriority, t0)
	plan(s, t0)
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
	plan(s, t0.Add(testPolicy.MaxWait-time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
	plan(s, t0.Add(testPolicy.MaxWait))
	wantAssign(t, s, map[string][]string{"h1": {"sw/a"}})
	// Training waits MaxWait too; both Boosted, the sweep keeps its server.
	plan(s, t0.Add(2*testPolicy.MaxWait+time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"sw/a"}})
	if !s.Boost["tr/w0"] || !s.Boost["sw/a"] {
		t.Errorf("boosted %v, want both", s.Boost)
	}
	// The sweep's demand ends: training is served, its boost kept until
	// its own demand ends.
	delete(s.Demands, "sweep-a")
	plan(s, t0.Add(2*testPolicy.MaxWait+2*time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
	if s.Boost["sw/a"] {
		t.Errorf("boost outlived its demand: %v", s.Boost)
	}
}

// A host that stops reporting is dropped after Lease and its weights go
// to another host, preferring one that has them loaded.
func TestSilentHostIsReplaced(t *testing.T) {
	h1 := host("h1", 1, t0)
	h2 := host("h2", 1, t0)
	h3 := host("h3", 1, t0, Server{Weights: "tr/w0", IdleSince: t0.Add(-time.Hour)})
	s := state(h1, h2, h3)
	s.Demands["train"] = few(demand("train", "tr/w0", TrainPriority, t0))
	plan(s, t0)
	wantAssign(t, s, map[string][]string{"h3": {"tr/w0"}})

	h1.Seen, h2.Seen = t0.Add(40*time.Second), t0.Add(40*time.Second)
	testPolicy.Plan(s, t0.Add(40*time.Second))
	if len(s.Removed) != 1 || s.Removed[0] != "h3" {
		t.Fatalf("removed %v, want h3", s.Removed)
	}
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
}

// Weights that failed to load on a host move to another; when every live
// host failed them, Plan names them with each host's cause.
func TestFailedWeightsMoveThenStop(t *testing.T) {
	h1, h2 := host("h1", 1, t0), host("h2", 1, t0)
	s := state(h1, h2)
	s.Demands["train"] = few(demand("train", "tr/w0", TrainPriority, t0))
	plan(s, t0)
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})

	h1.Failed = map[string]Failure{"tr/w0": {At: t0.Add(time.Second), Cause: "out of memory"}}
	if bad := plan(s, t0.Add(time.Second)); len(bad) != 0 {
		t.Fatalf("unservable %v with h2 left", bad)
	}
	wantAssign(t, s, map[string][]string{"h2": {"tr/w0"}})

	h2.Failed = map[string]Failure{"tr/w0": {At: t0.Add(2 * time.Second), Cause: "no such file"}}
	bad := plan(s, t0.Add(2*time.Second))
	if len(bad) != 1 || bad[0].Weights != "tr/w0" || bad[0].Cause != "h1: out of memory; h2: no such file" {
		t.Fatalf("unservable %+v", bad)
	}
	wantAssign(t, s, map[string][]string{})

	// After FailedFor the weights may be tried again.
	plan(s, t0.Add(time.Second+testPolicy.FailedFor))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
}

// Weights with more episodes left than their hosts run at once spread to
// as many hosts as the rest would fill, all at once while they load; not
// while a host that has them loaded has a slot free, not to take a less
// urgent weights' only server, and later in the phase only if a new server
// would be ready before the rest is done.
func TestBacklogSpreads(t *testing.T) {
	h1, h2, h3, h4 := host("h1", 1, t0), host("h2", 1, t0), host("h3", 1, t0), host("h4", 1, t0)
	s := state(h1, h2, h3)
	s.Demands["train"] = few(demand("train", "tr/w0", TrainPriority, t0))
	plan(s, t0)
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
	// 9 episodes: 5 more than h1 runs at once fill h2's 4 slots.
	d := s.Demands["train"]
	d.Episodes = 9
	s.Demands["train"] = d
	plan(s, t0.Add(time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}, "h2": {"tr/w0"}})

	// 30 episodes on hosts not loaded yet: every host at once.
	s = state(h1, h2, h3)
	s.Demands["train"] = demand("train", "tr/w0", TrainPriority, t0)
	plan(s, t0)
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}, "h2": {"tr/w0"}, "h3": {"tr/w0"}})

	// A fourth host comes while h1 has the weights loaded and a slot
	// free: nothing of them is queued, h4 stays free.
	s.Hosts["h4"] = h4
	h1.Loaded = []Server{{Weights: "tr/w0", Busy: 3}}
	plan(s, t0.Add(time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}, "h2": {"tr/w0"}, "h3": {"tr/w0"}})
	// h1 full, h2 and h3 still loading: 30 left fill h4 as well.
	h1.Loaded = []Server{{Weights: "tr/w0", Busy: 4}}
	plan(s, t0.Add(2*time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}, "h2": {"tr/w0"}, "h3": {"tr/w0"}, "h4": {"tr/w0"}})

	// Told 15 left with three hosts: 3 more than they run do not fill a
	// fourth, which a new demand then takes.
	s = state(h1, h2, h3, h4)
	d = demand("train", "tr/w0", TrainPriority, t0)
	d.Remaining = 15
	s.Demands["train"] = d
	h1.Loaded = []Server{{Weights: "tr/w0", Busy: 4}}
	plan(s, t0)
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}, "h2": {"tr/w0"}, "h3": {"tr/w0"}})
	s.Demands["sweep-a"] = demand("sweep-a", "sw/a", EvalPriority, t0.Add(time.Second))
	plan(s, t0.Add(time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}, "h2": {"tr/w0"}, "h3": {"tr/w0"}, "h4": {"sw/a"}})

	// Training with 30 left takes a less urgent sweep's second server,
	// never its only one.
	h1.Loaded, h2.Loaded = nil, nil
	s = state(h1, h2, h3)
	s.Assign = map[string][]string{"h2": {"sw/a"}, "h3": {"sw/a"}}
	s.Demands["sweep-a"] = demand("sweep-a", "sw/a", EvalPriority, t0)
	s.Demands["train"] = demand("train", "tr/w0", TrainPriority, t0.Add(time.Second))
	plan(s, t0.Add(time.Second))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}, "h2": {"tr/w0"}, "h3": {"sw/a"}})

	// Past the phase's first IdleGrace a new server must be ready before
	// the rest is done where it runs: not without a pace, not when 30
	// left at 0.5 s each take less than the 20 s load h1 took, and yes
	// at 1 s each.
	h1.Loaded = []Server{{Weights: "tr/w0", Busy: 4, Load: 20 * time.Second}}
	h2.Loaded = nil
	s = state(h1, h2)
	s.Assign = map[string][]string{"h1": {"tr/w0"}}
	d = demand("train", "tr/w0", TrainPriority, t0)
	s.Demands["train"] = d
	plan(s, t0.Add(time.Minute))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
	d.Pace = 500 * time.Millisecond
	s.Demands["train"] = d
	plan(s, t0.Add(time.Minute))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}})
	d.Pace = time.Second
	s.Demands["train"] = d
	plan(s, t0.Add(time.Minute))
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0"}, "h2": {"tr/w0"}})
}

// A host keeps as many weights loaded as their harnesses allow
// (per_host), and no more than it says it can hold.
func TestHostKeepsSeveralWeights(t *testing.T) {
	two := func(d Demand) Demand { d.PerHost = 2; return d }
	s := state(host("h1", 0, t0))
	s.Demands["train"] = two(demand("train", "tr/w0", TrainPriority, t0))
	s.Demands["sweep-a"] = two(demand("sweep-a", "sw/a", EvalPriority, t0))
	s.Demands["sweep-b"] = two(demand("sweep-b", "sw/b", EvalPriority, t0))
	plan(s, t0)
	wantAssign(t, s, map[string][]string{"h1": {"tr/w0", "sw/a"}})
	if s.Changes != 1 {
		t.Errorf("changes %d, want 1", s.Changes)
	}
	plan(s, t0.Add(time.Second))
	if s.Changes != 1 {
		t.Errorf("changes %d after a plan that changed nothing, want 1", s.Changes)
	}

	// The host says it holds one: one it gets.
	capped := state(host("h1", 1, t0))
	capped.Demands = s.Demands
	plan(capped, t0)
	wantAssign(t, capped, map[string][]string{"h1": {"tr/w0"}})

	// A harness that allows one model server per host keeps its host to one.
	mixed := state(host("h1", 0, t0))
	mixed.Demands["train"] = demand("train", "tr/w0", TrainPriority, t0)
	mixed.Demands["sweep-a"] = two(demand("sweep-a", "sw/a", EvalPriority, t0))
	plan(mixed, t0)
	wantAssign(t, mixed, map[string][]string{"h1": {"tr/w0"}})
}

// Status lists what waits one line per weights, however many episode
// sets (chunks) wait for it, most urgent first, one run's or all.
func TestByWeights(t *testing.T) {
	s := State{Demands: map[string]Demand{
		"eval-plus-0": {Run: "plus", Weights: "plus/r7", Priority: 3, Episodes: 500},
		"eval-plus-1": {Run: "plus", Weights: "plus/r7", Priority: 3, Episodes: 500, Remaining: 120},
		"eval-plus-2": {Run: "plus", Weights: "plus/r7", Priority: 3, Episodes: 30},
		"sweep-b":     {Run: "sweep-x", Weights: "sweep-x/b", Priority: 3, Episodes: 35},
		"sweep-a":     {Run: "sweep-x", Weights: "sweep-x/a", Priority: 3, Episodes: 35},
		"train-0":     {Run: "tr", Weights: "tr/r1", Priority: 1, Episodes: 384},
	}}
	want := []WeightsDemand{
		{Weights: "tr/r1", Run: "tr", Priority: 1, Episodes: 384, Left: 384, Sets: 1},
		{Weights: "plus/r7", Run: "plus", Priority: 3, Episodes: 1030, Left: 650, Sets: 3},
		{Weights: "sweep-x/a", Run: "sweep-x", Priority: 3, Episodes: 35, Left: 35, Sets: 1},
		{Weights: "sweep-x/b", Run: "sweep-x", Priority: 3, Episodes: 35, Left: 35, Sets: 1},
	}
	if got := s.ByWeights(""); !reflect.DeepEqual(got, want) {
		t.Errorf("all runs:\n got %+v\nwant %+v", got, want)
	}
	if got := s.ByWeights("plus"); !reflect.DeepEqual(got, want[1:2]) {
		t.Errorf("run plus: %+v, want %+v", got, want[1:2])
	}
	if got := s.ByWeights("nobody"); len(got) != 0 {
		t.Errorf("run nobody: %+v", got)
	}
}
