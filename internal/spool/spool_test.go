package spool

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func segments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, logDir, "*.spool"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// nextProcess is the spool of the next worker process on dir, and the
// orphans it finds there.
func nextProcess(t *testing.T, dir string) (*Spool, []Orphan) {
	t.Helper()
	s, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	orphans, err := s.Orphans()
	if err != nil {
		t.Fatal(err)
	}
	return s, orphans
}

func call(ep schemas.EpisodeKey, i int32) schemas.Call {
	return schemas.Call{Run: ep.Run, EpisodeID: ep.ID(), Retry: ep.Retry, CallIndex: i, CompletionTokenIDs: []int32{i, 7}}
}

// A worker dies with tries open (its spool is left, not closed): the next
// process on the folder recovers exactly the tries not done, their calls in
// order, and clears the files once they are stored.
func TestSpoolSurvivesAndRecovers(t *testing.T) {
	dir := t.TempDir()
	s, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 0, Attempt: 0, Retry: 0}
	b := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 4, Attempt: 1, Retry: 2}
	s.Call(a, call(a, 0))
	s.Call(b, call(b, 1)) // calls finish out of order
	s.Call(b, call(b, 0))
	s.Call(a, call(a, 1))
	s.Blob(a, "abc.png", []byte("img"))
	s.Blob(b, "abc.png", []byte("img"))
	if got := s.Blobs(a); len(got) != 1 || got[0] != "abc.png" {
		t.Fatalf("blobs of a: %v", got)
	}
	if b, _ := os.ReadFile(s.BlobPath("run", "abc.png")); string(b) != "img" {
		t.Fatalf("blob content %q", b)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	// Open tries are not orphans of this process.
	if o, _ := s.Orphans(); len(o) != 0 {
		t.Fatalf("orphans while open: %v", o)
	}
	// a is stored while b goes on in the same segment.
	if err := s.Done(a); err != nil {
		t.Fatal(err)
	}
	if len(s.Blobs(a)) != 0 {
		t.Error("Done kept a's blobs")
	}
	// A try's file as workers wrote them before the log, in both layouts,
	// is still recovered; a file that names no try is left alone.
	c := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 5, Attempt: 0, Retry: 1}
	d := schemas.EpisodeKey{Run: "run", Round: 2, Phase: "train", Group: 1, Attempt: 0, Retry: 0}
	line, _ := json.Marshal(call(c, 0))
	phase := filepath.Join(dir, "run", "round=1", "phase=train")
	os.MkdirAll(filepath.Join(phase, c.ID()), 0o755)
	os.WriteFile(filepath.Join(phase, c.ID(), "try-1.jsonl"), append(line, "\n{\"torn"...), 0o644)
	os.MkdirAll(filepath.Join(dir, "run", "round=2", "phase=train"), 0o755)
	newer := filepath.Join(dir, "run", "round=2", "phase=train", d.ID()+".try-0.jsonl")
	os.WriteFile(newer, nil, 0o644)
	stray := filepath.Join(phase, "notes", "try-0.jsonl")
	os.MkdirAll(filepath.Dir(stray), 0o755)
	os.WriteFile(stray, []byte("{}\n"), 0o644)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	// A torn frame at the end of the segment (a death mid-write).
	segs := segments(t, dir)
	if len(segs) != 1 {
		t.Fatalf("segments %v, want 1", segs)
	}
	f, _ := os.OpenFile(segs[0], os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{200, 0, 0, 0, 1, 2, 3, 4, kindCall, 1})
	f.Close()

	s2, orphans := nextProcess(t, dir)
	var keys []schemas.EpisodeKey
	for _, o := range orphans {
		keys = append(keys, o.Key)
	}
	if want := []schemas.EpisodeKey{b, c, d}; !slices.Equal(keys, want) {
		t.Fatalf("orphans %v, want %v (a was done)", keys, want)
	}
	if got := orphans[0].Calls; len(got) != 2 || got[0].CallIndex != 0 || got[1].CallIndex != 1 || got[1].EpisodeID != b.ID() ||
		!slices.Equal(got[1].CompletionTokenIDs, []int32{1, 7}) {
		t.Fatalf("b's calls %+v", got)
	}
	if got := orphans[1].Calls; len(got) != 1 || got[0].EpisodeID != c.ID() {
		t.Fatalf("c's calls %+v (the torn line is skipped)", got)
	}
	if len(orphans[2].Calls) != 0 {
		t.Fatalf("d's calls %+v", orphans[2].Calls)
	}
	for _, o := range orphans[:2] {
		if err := s2.Forget(o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(segs[0]); !os.IsNotExist(err) {
		t.Error("the segment stays after its orphan was forgotten")
	}
	if _, err := os.Stat(newer); err != nil {
		t.Error("d's file went before d was forgotten")
	}
	s2.Forget(orphans[2])
	if left, _ := s2.Orphans(); len(left) != 0 {
		t.Fatalf("orphans after Forget: %v", left)
	}
	if _, err := os.Stat(stray); err != nil {
		t.Error("a file that is not a try's was removed")
	}
	if _, err := os.Stat(s.BlobPath("run", "abc.png")); err != nil {
		t.Fatal("blobs stay for other episodes of the run")
	}
}

// A segment goes once every try in it is done; a try spread over several
// segments (the log moved on mid-try) is recovered whole, in order.
func TestSegments(t *testing.T) {
	dir := t.TempDir()
	s, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 1}
	b := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 2}
	s.Call(a, call(a, 0))
	s.Done(a)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if segs := segments(t, dir); len(segs) != 0 {
		t.Fatalf("segments %v after the only try was done", segs)
	}
	s.segmentBytes = 1 // a segment a call
	for i := range int32(3) {
		s.Call(a, call(a, i))
		s.Call(b, call(b, i))
	}
	s.Sync()
	if n := len(segments(t, dir)); n != 6 {
		t.Fatalf("%d segments, want 6", n)
	}
	s.Done(a)
	s.Sync()
	if n := len(segments(t, dir)); n != 3 {
		t.Fatalf("%d segments after a was done, want b's 3", n)
	}
	s.Close()
	s.Call(a, call(a, 9)) // after Close: not spooled, no panic
	s2, orphans := nextProcess(t, dir)
	if len(orphans) != 1 || orphans[0].Key != b {
		t.Fatalf("orphans %v; want b's", orphans)
	}
	for i, c := range orphans[0].Calls {
		if c.CallIndex != int32(i) || c.EpisodeID != b.ID() {
			t.Fatalf("b's calls %+v", orphans[0].Calls)
		}
	}
	if len(orphans[0].Calls) != 3 {
		t.Fatalf("b's calls %+v", orphans[0].Calls)
	}
	s2.Forget(orphans[0])
	if n := len(segments(t, dir)); n != 0 {
		t.Fatalf("%d segments left after recovery", n)
	}
}

// With the writer stalled (a disk that hangs) and maxPending reached, Call
// waits for it rather than records piling up in memory; nothing is lost.
func TestCallWaitsForAStalledWriter(t *testing.T) {
	dir := t.TempDir()
	s, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stalled, release := make(chan struct{}), make(chan struct{})
	s.beforeWrite = func() {
		select {
		case stalled <- struct{}{}:
			<-release
		default:
		}
	}
	s.maxPending = 1
	a := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train"}
	s.Call(a, call(a, 0))
	<-stalled // the writer holds the first record
	s.Call(a, call(a, 1))
	returned := make(chan struct{})
	go func() { s.Call(a, call(a, 2)); close(returned) }()
	for i := 0; ; i++ {
		s.mu.Lock()
		w := s.waiting
		s.mu.Unlock()
		if w == 1 {
			break
		}
		select {
		case <-returned:
			t.Fatal("a call past maxPending returned with the writer stalled")
		case <-time.After(time.Millisecond):
		}
		if i == 10000 {
			t.Fatal("the third call neither waited nor returned in 10 s")
		}
	}
	close(release)
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting call did not return once the writer went on")
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	_, orphans := nextProcess(t, dir)
	if len(orphans) != 1 || len(orphans[0].Calls) != 3 {
		t.Fatalf("orphans %+v, want a's 3 calls", orphans)
	}
}

// A write that fails (a full disk) loses its records from the spool, not
// the ones after it: the log goes on in a new segment, since nothing after
// a torn frame reads back.
func TestWriteFailureMovesToANewSegment(t *testing.T) {
	dir := t.TempDir()
	s, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train"}
	s.Call(a, call(a, 0))
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	s.beforeWrite = func() {
		once.Do(func() {
			s.mu.Lock()
			g := s.seg
			s.mu.Unlock()
			g.f.Close() // the next write to it fails
		})
	}
	s.Call(a, call(a, 1))
	if err := s.Sync(); err == nil {
		t.Fatal("Sync after a failed write returned no error")
	}
	s.Call(a, call(a, 2))
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := len(segments(t, dir)); n != 2 {
		t.Fatalf("%d segments, want 2", n)
	}
	_, orphans := nextProcess(t, dir)
	if len(orphans) != 1 {
		t.Fatalf("orphans %v", orphans)
	}
	var got []int32
	for _, c := range orphans[0].Calls {
		got = append(got, c.CallIndex)
	}
	if !slices.Equal(got, []int32{0, 2}) {
		t.Fatalf("recovered calls %v, want 0 and 2 (1's write failed)", got)
	}
}
