// Package fleet decides which weights each rollout host serves: the
// assignment policy of docs/design.md §10, as a pure function the Fleet
// workflow applies. Episodes wait in one task queue per weights
// (api.WeightsQueue); a host polls the queues of the weights assigned to
// it, so an episode only ever reaches a host that serves, or is about to
// serve, its weights.
package fleet

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// Priorities: lower is served first, as Temporal's own priority keys.
const (
	Boosted       = 0 // waited MaxWait unserved: ahead of everything
	TrainPriority = 1 // a training run's rounds, by default
	EvalPriority  = 3 // evaluations and sweeps, by default
	MaxPriority   = 5
)

// Server is one model server of a host as the host last reported it.
type Server struct {
	Weights   string    `json:"weights"` // a weights key (Key)
	Busy      int       `json:"busy"`    // episodes using it now
	IdleSince time.Time `json:"idle_since,omitzero"`
	// Load is how long loading these weights took: the server stays idle
	// at least that long before it gives way (rule 3).
	Load time.Duration `json:"load,omitempty"`
}

// Failure is weights that did not load on a host.
type Failure struct {
	At    time.Time `json:"at"`
	Cause string    `json:"cause"`
}

// Host is a rollout host as it last reported itself.
type Host struct {
	Name    string             `json:"name"`
	Slots   int                `json:"slots"`   // episodes at once
	Servers int                `json:"servers"` // model servers it may keep at once, at most; 0: as the harnesses say
	Loaded  []Server           `json:"loaded"`
	Failed  map[string]Failure `json:"failed,omitempty"` // by weights key
	Seen    time.Time          `json:"seen"`
}

// Demand is a set of episodes waiting for one weights: an Episodes
// workflow's, registered when it starts and removed when it ends.
type Demand struct {
	Key      string `json:"key"` // the Episodes workflow id
	Run      string `json:"run"`
	Weights  string `json:"weights"` // weights key
	Priority int    `json:"priority"`
	Episodes int    `json:"episodes"`
	// Remaining is how many of Episodes had not finished when the
	// workflow last said (it tells each time the count falls by a
	// quarter); 0 is all of them.
	Remaining int `json:"remaining,omitempty"`
	// Pace is the time between episode completions so far, told with
	// Remaining; 0 is not known yet.
	Pace  time.Duration `json:"pace,omitempty"`
	Since time.Time     `json:"since"`
	// PerHost is how many model servers of its harness fit on one host
	// (model_server.per_host; 0 is 1).
	PerHost int `json:"per_host,omitempty"`
}

// Left is how many of d's episodes have not finished, at most.
func (d Demand) Left() int {
	if d.Remaining > 0 {
		return min(d.Remaining, d.Episodes)
	}
	return d.Episodes
}

// Key names weights across runs: the same weights id in two runs are two
// model servers.
func Key(run, weights string) string { return run + "/" + weights }

// Policy holds the policy's times.
type Policy struct {
	Lease     time.Duration // a host silent this long is gone
	MaxWait   time.Duration // weights unserved this long are Boosted until their demand ends
	IdleGrace time.Duration // a server idle this long (or its Load, if longer) has nothing queued: it may switch
	ParkFor   time.Duration // weights that gave way for idleness take only free servers this long
	ExpectFor time.Duration // how long weights announced to come again keep their server idle
	FailedFor time.Duration // how long a failed load keeps weights off a host
}

// DefaultPolicy is what a fleet runs with unless told otherwise.
var DefaultPolicy = Policy{Lease: 20 * time.Second, MaxWait: 10 * time.Minute, IdleGrace: 3 * time.Second, ParkFor: 30 * time.Second, ExpectFor: 2 * time.Minute, FailedFor: 5 * time.Minute}

// State is what the Fleet workflow keeps between decisions.
type State struct {
	Hosts   map[string]*Host     `json:"hosts"`
	Demands map[string]Demand    `json:"demands"`
	Assign  map[string][]string  `json:"assign"`  // host → weights keys, at most Servers
	Waiting map[string]time.Time `json:"waiting"` // weights key → unserved since
	Boost   map[string]bool      `json:"boost"`   // weights keys that waited MaxWait
	// Parked weights gave way for idleness: their demand stands (its last
	// episodes run elsewhere, or may be retried) but nothing of theirs is
	// queued, so they preempt nobody for ParkFor. Fresh demand unparks.
	Parked map[string]time.Time `json:"parked"`
	// Expected weights had their demand end with a word that more comes
	// soon (DemandChange.Again): their server is kept for ExpectFor.
	Expected map[string]time.Time `json:"expected,omitempty"`
	Changes  int                  `json:"changes"` // assignments changed, counted
	Removed  []string             `json:"removed,omitempty"`
}

// Unservable is demanded weights that every live host failed to load.
type Unservable struct {
	Weights string
	Cause   string
}

// weightsDemand sums the demands of one weights.
type weightsDemand struct {
	key      string
	priority int
	perHost  int
	episodes int
	left     int       // episodes not finished, at most
	rate     float64   // episodes finished per second, all its demands; 0: not known
	since    time.Time // its first demand's
	latest   time.Time // its latest demand's: episodes queued since
}

// Plan brings s.Assign up to date at now and returns the weights no live
// host can load. The rules, in order:
//
//  1. A host silent for Lease is dropped with its assignment.
//  2. Weights that failed to load on a host leave it; weights without
//     demand leave a host that has not loaded them.
//  3. A weights is kept where it is assigned, demanded or not, unless
//     its server is idle while other weights wait: at once if nobody
//     waits for it, after IdleGrace or as long as loading it took
//     (whichever is longer) if its demand stands — idling as long as a
//     reload would take costs at most twice what the best choice in
//     hindsight would; after IdleGrace alone when another host has them
//     loaded, since nothing would be loaded again — and not while it is
//     Expected again (a training
//     round validates, then collects, with the same weights seconds
//     apart), for at most ExpectFor.
//  4. Unserved weights, most urgent first (priority, then longest
//     waiting), take a free server — preferring a host that has them
//     loaded already — or else the server of the least urgent weights
//     that is strictly less urgent than they are.
//  5. Weights with more episodes left than their hosts run at once —
//     enough to fill one more host's slots — take free servers, or
//     servers of less urgent weights that have several; not while a host
//     that has them loaded has a free slot (it would be polling their
//     queue, so nothing of theirs is queued). A host still loading counts
//     as the slots it will run, so a large phase loads on every host it
//     needs at once rather than one after another. Past the phase's
//     first IdleGrace, a new server only pays if it is ready before the
//     episodes left are done where they run: they spread only when the
//     pace their workflow measured says the rest takes longer than the
//     slowest load the fleet has seen.
//
// Weights that wait MaxWait unserved are Boosted until their demand ends,
// so nothing waits without bound; a host where weights failed to load
// within FailedFor is not given them again.
func (p Policy) Plan(s *State, now time.Time) []Unservable {
	s.makeMaps()
	before := fmt.Sprint(sortedAssign(s.Assign))
	s.Removed = nil

	p.dropSilentHosts(s, now) // 1
	pl := &planning{p: p, s: s, now: now, byW: demandByWeights(s.Demands)}
	pl.forgetEndedDemand()
	pl.dropFailedAndUnwanted() // 2
	pl.wait()
	if len(pl.unserved()) > 0 {
		pl.yieldIdleServers() // 3
	}
	out := pl.placeUnserved() // 4
	pl.forgetServed()
	pl.wait()
	pl.spreadBacklogs() // 5

	for name, ws := range s.Assign {
		if len(ws) == 0 {
			delete(s.Assign, name)
		}
	}
	if fmt.Sprint(sortedAssign(s.Assign)) != before {
		s.Changes++
	}
	return out
}

// makeMaps gives a state decoded without some of its maps empty ones.
func (s *State) makeMaps() {
	if s.Hosts == nil {
		s.Hosts = map[string]*Host{}
	}
	if s.Demands == nil {
		s.Demands = map[string]Demand{}
	}
	if s.Assign == nil {
		s.Assign = map[string][]string{}
	}
	if s.Waiting == nil {
		s.Waiting = map[string]time.Time{}
	}
	if s.Boost == nil {
		s.Boost = map[string]bool{}
	}
	if s.Parked == nil {
		s.Parked = map[string]time.Time{}
	}
}

// dropSilentHosts is rule 1: a host silent for Lease is dropped with its
// assignment, and an assignment without a host goes too.
func (p Policy) dropSilentHosts(s *State, now time.Time) {
	for _, name := range slices.Sorted(maps.Keys(s.Hosts)) {
		if now.Sub(s.Hosts[name].Seen) > p.Lease {
			delete(s.Hosts, name)
			delete(s.Assign, name)
			s.Removed = append(s.Removed, name)
		}
	}
	for name := range s.Assign {
		if s.Hosts[name] == nil {
			delete(s.Assign, name)
		}
	}
}

// demandByWeights sums the demands of each weights: the most urgent
// priority, the fewest servers per host, the episodes and pace of all.
func demandByWeights(demands map[string]Demand) map[string]*weightsDemand {
	byW := map[string]*weightsDemand{}
	for _, k := range slices.Sorted(maps.Keys(demands)) {
		d := demands[k]
		w := byW[d.Weights]
		if w == nil {
			w = &weightsDemand{key: d.Weights, priority: d.Priority, since: d.Since, perHost: max(d.PerHost, 1)}
			byW[d.Weights] = w
		}
		w.perHost = min(w.perHost, max(d.PerHost, 1))
		w.priority = min(w.priority, d.Priority)
		w.episodes += d.Episodes
		w.left += d.Left()
		if d.Pace > 0 {
			w.rate += float64(time.Second) / float64(d.Pace)
		}
		if d.Since.Before(w.since) {
			w.since = d.Since
		}
		if d.Since.After(w.latest) {
			w.latest = d.Since
		}
	}
	return byW
}

// planning is one Plan's view of the state: the demand summed by weights
// and the rules that read it.
type planning struct {
	p   Policy
	s   *State
	now time.Time
	byW map[string]*weightsDemand
}

// forgetEndedDemand drops the boost, wait and parking of weights nobody
// demands any more, parking past ParkFor, and expectations that came
// true or are late.
func (pl *planning) forgetEndedDemand() {
	s, byW := pl.s, pl.byW
	for k := range s.Boost {
		if byW[k] == nil {
			delete(s.Boost, k)
		}
	}
	for k := range s.Waiting {
		if byW[k] == nil {
			delete(s.Waiting, k)
		}
	}
	for k, at := range s.Parked {
		if byW[k] == nil || pl.now.Sub(at) >= pl.p.ParkFor {
			delete(s.Parked, k)
		}
	}
	for k := range s.Expected {
		if byW[k] != nil || !s.expected(k, pl.now, pl.p) {
			delete(s.Expected, k) // it came, or it is late
		}
	}
}

// urgency orders weights for serving, lower first: their priority, or
// Boosted; parked weights after all demanded ones, and weights nobody
// waits for last.
func (pl *planning) urgency(w string) int {
	if pl.byW[w] == nil {
		return MaxPriority + 2 // kept loaded, nobody waits for it
	}
	if _, ok := pl.s.Parked[w]; ok {
		return MaxPriority + 1
	}
	if pl.s.Boost[w] {
		return Boosted
	}
	return pl.byW[w].priority
}

// perHost is how many model servers fit beside w's (its harness's
// per_host); weights nobody waits for any more count as 1.
func (pl *planning) perHost(w string) int {
	if d := pl.byW[w]; d != nil {
		return d.perHost
	}
	return 1
}

// failed says whether w failed to load on h within FailedFor.
func (pl *planning) failed(h *Host, w string) bool {
	f, ok := h.Failed[w]
	return ok && pl.now.Sub(f.At) < pl.p.FailedFor
}

// dropFailedAndUnwanted is rule 2: weights leave a host where they failed
// to load, and a host that has not loaded them when nobody demands or
// expects them.
func (pl *planning) dropFailedAndUnwanted() {
	s := pl.s
	for _, name := range slices.Sorted(maps.Keys(s.Assign)) {
		h := s.Hosts[name]
		s.Assign[name] = slices.DeleteFunc(s.Assign[name], func(w string) bool {
			return pl.failed(h, w) || (pl.byW[w] == nil && h.server(w) == nil && !s.expected(w, pl.now, pl.p))
		})
	}
}

// unserved is the demanded weights no host is assigned, most urgent first.
func (pl *planning) unserved() []string {
	sv := pl.s.ServedBy()
	var out []string
	for w := range pl.byW {
		if len(sv[w]) == 0 {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return pl.p.before(pl.s, pl.byW, pl.urgency, out[i], out[j]) })
	return out
}

// wait starts the wait of unserved weights, and boosts those (not
// parked) that waited MaxWait.
func (pl *planning) wait() {
	s := pl.s
	for _, w := range pl.unserved() {
		if _, ok := s.Waiting[w]; !ok {
			s.Waiting[w] = pl.now
		}
		if _, parked := s.Parked[w]; !parked && pl.now.Sub(s.Waiting[w]) >= pl.p.MaxWait {
			s.Boost[w] = true
		}
	}
}

// yieldIdleServers is rule 3, for when other weights wait: a server idle
// long enough gives way, and its weights are parked unless another host
// still serves them.
func (pl *planning) yieldIdleServers() {
	s := pl.s
	for _, name := range slices.Sorted(maps.Keys(s.Assign)) {
		h := s.Hosts[name]
		s.Assign[name] = slices.DeleteFunc(s.Assign[name], func(w string) bool { return pl.givesWay(name, h, w) })
	}
	// Parked weights still served elsewhere are not parked.
	sv := s.ServedBy()
	for w := range s.Parked {
		if len(sv[w]) > 0 {
			delete(s.Parked, w)
		}
	}
}

// givesWay says whether w's server on host name is idle long enough to
// give way, and parks w when it is.
func (pl *planning) givesWay(name string, h *Host, w string) bool {
	s, p := pl.s, pl.p
	sv := h.server(w)
	if sv == nil || sv.Busy > 0 || sv.IdleSince.IsZero() || s.expected(w, pl.now, p) {
		return false
	}
	if pl.byW[w] == nil {
		return true // nobody waits for it
	}
	// Idle since fresh demand counts from that demand: its episodes may
	// not have reached the host yet.
	from := sv.IdleSince
	if pl.byW[w].latest.After(from) {
		from = pl.byW[w].latest
	}
	// Ski rental guards against loading w again; with w loaded on another
	// host of its, nothing is loaded again.
	grace := max(p.IdleGrace, sv.Load)
	if s.loadedElsewhere(w, name) {
		grace = p.IdleGrace
	}
	idle := pl.now.Sub(from) >= grace
	if idle {
		s.Parked[w] = pl.now
	}
	return idle
}

// placeUnserved is rule 4: unserved weights, most urgent first, take a
// server. It returns those that every live host failed to load.
func (pl *planning) placeUnserved() []Unservable {
	s, p := pl.s, pl.p
	var out []Unservable
	for _, w := range pl.unserved() {
		name := p.place(s, pl.now, w, pl.urgency, pl.failed, false, pl.perHost)
		if name == "" {
			if len(s.Hosts) > 0 && p.failedEverywhere(s, w, pl.failed) {
				out = append(out, Unservable{Weights: w, Cause: p.causes(s, w)})
			}
			continue
		}
		s.Assign[name] = append(s.Assign[name], w)
		delete(s.Waiting, w)
	}
	return out
}

// forgetServed: weights served stop waiting and are not parked; unserved
// ones, preempted ones too, wait from the next wait.
func (pl *planning) forgetServed() {
	s := pl.s
	sv := s.ServedBy()
	for w := range s.Waiting {
		if len(sv[w]) > 0 {
			delete(s.Waiting, w)
		}
	}
	for w := range s.Parked {
		if len(sv[w]) > 0 {
			delete(s.Parked, w)
		}
	}
}

// spreadBacklogs is rule 5: weights with a backlog, most urgent first,
// take more hosts while they stay backlogged. Parked weights have nothing
// queued.
func (pl *planning) spreadBacklogs() {
	s, p := pl.s, pl.p
	slowest := s.slowestLoad()
	ws := make([]string, 0, len(pl.byW))
	for w := range pl.byW {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return p.before(s, pl.byW, pl.urgency, ws[i], ws[j]) })
	for _, w := range ws {
		if _, parked := s.Parked[w]; parked {
			continue // nothing of theirs is queued
		}
		for range len(s.Hosts) {
			if !p.backlogged(s, pl.byW[w], s.ServedBy()[w], pl.now, slowest) {
				break
			}
			name := p.place(s, pl.now, w, pl.urgency, pl.failed, true, pl.perHost)
			if name == "" {
				break
			}
			s.Assign[name] = append(s.Assign[name], w)
		}
	}
}

// slowestLoad is the longest load any live host's server took.
func (s *State) slowestLoad() time.Duration {
	var slowest time.Duration
	for _, h := range s.Hosts {
		for _, sv := range h.Loaded {
			slowest = max(slowest, sv.Load)
		}
	}
	return slowest
}

// ServedBy returns the hosts assigned each weights, in name order.
func (s *State) ServedBy() map[string][]string {
	out := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(s.Assign)) {
		for _, w := range s.Assign[name] {
			out[w] = append(out[w], name)
		}
	}
	return out
}

// WeightsDemand is the demand for one weights summed over the episode
// sets (one per chunk of up to 500 episodes) that wait for it.
type WeightsDemand struct {
	Weights  string
	Run      string
	Priority int // the most urgent of its sets'
	Episodes int // in all its sets
	Left     int // of Episodes, not finished, at most
	Sets     int
}

// ByWeights is run's demand (every run's when run is "") one entry per
// weights, most urgent priority first, then by weights: a 10,030-cell
// evaluation is 21 sets of the same weights, which people read as one.
func (s *State) ByWeights(run string) []WeightsDemand {
	by := map[string]*WeightsDemand{}
	for _, d := range s.Demands {
		if run != "" && d.Run != run {
			continue
		}
		w := by[d.Weights]
		if w == nil {
			w = &WeightsDemand{Weights: d.Weights, Run: d.Run, Priority: d.Priority}
			by[d.Weights] = w
		}
		w.Priority = min(w.Priority, d.Priority)
		w.Episodes += d.Episodes
		w.Left += d.Left()
		w.Sets++
	}
	out := make([]WeightsDemand, 0, len(by))
	for _, w := range by {
		out = append(out, *w)
	}
	slices.SortFunc(out, func(a, b WeightsDemand) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Weights, b.Weights))
	})
	return out
}

// Expect records that w's demand ended at now and more will come soon.
func (s *State) Expect(w string, now time.Time) {
	if s.Expected == nil {
		s.Expected = map[string]time.Time{}
	}
	s.Expected[w] = now
}

func (s *State) expected(w string, now time.Time, p Policy) bool {
	at, ok := s.Expected[w]
	return ok && now.Sub(at) < p.ExpectFor
}

// Unpark ends w's parking: fresh demand for it (a new chunk, a rerun) may
// have queued episodes.
func (s *State) Unpark(w string) { delete(s.Parked, w) }

// before orders weights by urgency, then by how long they have waited.
func (p Policy) before(s *State, byW map[string]*weightsDemand, urgency func(string) int, a, b string) bool {
	if ua, ub := urgency(a), urgency(b); ua != ub {
		return ua < ub
	}
	wa, oka := s.Waiting[a]
	wb, okb := s.Waiting[b]
	if oka && okb && !wa.Equal(wb) {
		return wa.Before(wb)
	}
	if sa, sb := byW[a].since, byW[b].since; !sa.Equal(sb) {
		return sa.Before(sb)
	}
	return a < b
}

// place finds a host for weights w: a free server, preferring a host that
// has w loaded, else (taking it from less urgent weights) the server of
// the least urgent weights, strictly less urgent than w. spread only
// takes from weights that keep another server.
func (p Policy) place(s *State, now time.Time, w string, urgency func(string) int, failed func(*Host, string) bool, spread bool, perHost func(string) int) string {
	best, bestScore := "", -1
	for _, name := range slices.Sorted(maps.Keys(s.Hosts)) {
		h := s.Hosts[name]
		if failed(h, w) || slices.Contains(s.Assign[name], w) || len(s.Assign[name]) >= s.capacity(h, slices.Concat(s.Assign[name], []string{w}), perHost) {
			continue
		}
		score := 1
		if h.server(w) != nil {
			score = 2
		}
		if score > bestScore {
			best, bestScore = name, score
		}
	}
	if best != "" {
		return best
	}
	count := map[string]int{}
	for _, ws := range s.Assign {
		for _, v := range ws {
			count[v]++
		}
	}
	victimHost, victim, victimUrg, victimBusy := "", "", urgency(w), 0
	for _, name := range slices.Sorted(maps.Keys(s.Assign)) {
		h := s.Hosts[name]
		if failed(h, w) || slices.Contains(s.Assign[name], w) {
			continue
		}
		for _, v := range s.Assign[name] {
			if (spread && count[v] < 2) || s.expected(v, now, p) {
				continue
			}
			u := urgency(v)
			busy := 0
			if sv := h.server(v); sv != nil {
				busy = sv.Busy
			}
			if u > victimUrg || (u == victimUrg && victim != "" && busy < victimBusy) {
				victimHost, victim, victimUrg, victimBusy = name, v, u, busy
			}
		}
	}
	if victim == "" {
		return ""
	}
	s.Assign[victimHost] = slices.DeleteFunc(s.Assign[victimHost], func(v string) bool { return v == victim })
	return victimHost
}

// backlogged says whether weights w, served by hosts, have more episodes
// left than those hosts run at once, by at least the slots of the
// smallest live host: another host would have a full load of them. A
// host with w loaded and a slot free says w's queue is empty: it polls
// whenever a slot is free. Past the first IdleGrace of w's latest demand,
// the rest must also take longer at w's pace than a load (slowest).
func (p Policy) backlogged(s *State, wd *weightsDemand, hosts []string, now time.Time, slowest time.Duration) bool {
	if len(hosts) == 0 {
		return false
	}
	w, left := wd.key, wd.left
	if now.Sub(wd.latest) >= p.IdleGrace {
		if wd.rate == 0 {
			return false // no pace yet: a server ready in time is a guess
		}
		if rest := time.Duration(float64(left) / wd.rate * float64(time.Second)); rest <= slowest {
			return false
		}
	}
	running := 0
	for _, name := range hosts {
		h := s.Hosts[name]
		if h.server(w) != nil && h.free() > 0 {
			return false
		}
		running += max(h.Slots, 1)
	}
	smallest := 0
	for _, h := range s.Hosts {
		if smallest == 0 || max(h.Slots, 1) < smallest {
			smallest = max(h.Slots, 1)
		}
	}
	return left-running >= smallest
}

func (p Policy) failedEverywhere(s *State, w string, failed func(*Host, string) bool) bool {
	for _, h := range s.Hosts {
		if !failed(h, w) {
			return false
		}
	}
	return true
}

func (p Policy) causes(s *State, w string) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(s.Hosts)) {
		if f, ok := s.Hosts[name].Failed[w]; ok {
			parts = append(parts, name+": "+f.Cause)
		}
	}
	return strings.Join(parts, "; ")
}

// capacity is how many model servers h may keep with weights ws: the
// fewest any of their harnesses allows, and at most h.Servers when set.
func (s *State) capacity(h *Host, ws []string, perHost func(string) int) int {
	n := 0
	for _, w := range ws {
		if k := perHost(w); n == 0 || k < n {
			n = k
		}
	}
	if h.Servers > 0 && h.Servers < n {
		n = h.Servers
	}
	return max(n, 1)
}

// loadedElsewhere says whether a host other than name is assigned w and
// has it loaded.
func (s *State) loadedElsewhere(w, name string) bool {
	for other, ws := range s.Assign {
		if other != name && slices.Contains(ws, w) && s.Hosts[other].server(w) != nil {
			return true
		}
	}
	return false
}

// free is how many of h's slots no episode uses.
func (h *Host) free() int {
	busy := 0
	for _, sv := range h.Loaded {
		busy += sv.Busy
	}
	return max(h.Slots, 1) - busy
}

func (h *Host) server(w string) *Server {
	for i := range h.Loaded {
		if h.Loaded[i].Weights == w {
			return &h.Loaded[i]
		}
	}
	return nil
}

func sortedAssign(m map[string][]string) [][2]string {
	var out [][2]string
	for _, name := range slices.Sorted(maps.Keys(m)) {
		for _, w := range m[name] {
			out = append(out, [2]string{name, w})
		}
	}
	return out
}
