package spool

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

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

// newSpool is a spool on a new folder, closed at the test's end unless the
// test closed it.
func newSpool(t *testing.T) (*Spool, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
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
	s, dir := newSpool(t)
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
	// A damaged frame at the end of the log (a host crash with part of a
	// page written back).
	segs := segments(t, dir)
	if len(segs) != 1 {
		t.Fatalf("segments %v, want 1", segs)
	}
	s.mu.Lock()
	end := s.seg.size
	s.mu.Unlock()
	f, _ := os.OpenFile(segs[0], os.O_WRONLY, 0)
	f.WriteAt([]byte{200, 0, 0, 0, 1, 2, 3, 4, kindCall, 1}, int64(end))
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

// A segment whose tries are all done is emptied and taken again, not
// removed; a try spread over several segments (the log moved on mid-try)
// is recovered whole, in order; a record larger than a segment gets one of
// its own, removed once its try is done.
func TestSegments(t *testing.T) {
	s, dir := newSpool(t)
	a := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 1}
	b := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 2}
	s.Call(a, call(a, 0))
	first := segments(t, dir)
	s.Done(a)
	s.Call(b, call(b, 0))
	s.Done(b)
	if segs := segments(t, dir); len(first) != 1 || !slices.Equal(segs, first) {
		t.Fatalf("segments %v, then %v; want the one segment, reused", first, segs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(segments(t, dir)); n != 0 {
		t.Fatalf("%d segments after Close with no open try", n)
	}

	s, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.segmentBytes = 1 // every record larger than a segment
	for i := range int32(3) {
		s.Call(a, call(a, i))
		s.Call(b, call(b, i))
	}
	if n := len(segments(t, dir)); n != 6 {
		t.Fatalf("%d segments, want 6", n)
	}
	s.Done(a)
	if n := len(segments(t, dir)); n != 3 {
		t.Fatalf("%d segments after a was done, want b's 3", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
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

// Many tries, overlapping, through small segments: the spool keeps a few
// files, taking emptied ones again, and a process that dies mid-way leaves
// exactly its open tries, none of the frames that earlier uses of the same
// files held.
func TestReuseRecoversOnlyOpenTries(t *testing.T) {
	s, dir := newSpool(t)
	s.segmentBytes = 4096
	key := func(i int) schemas.EpisodeKey {
		return schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: int32(i)}
	}
	const tries, calls = 300, 6
	most := 0
	for i := range tries {
		for c := range int32(calls) {
			s.Call(key(i), call(key(i), c))
			if i > 0 && c == calls/2 {
				s.Done(key(i - 1)) // two tries open at a time
			}
		}
		most = max(most, len(segments(t, dir)))
	}
	if most > 2+keepEmpty+1 {
		t.Errorf("%d segment files at once for two open tries", most)
	}
	// The process dies here: the last try is open.
	_, orphans := nextProcess(t, dir)
	if len(orphans) != 1 || orphans[0].Key != key(tries-1) || len(orphans[0].Calls) != calls {
		t.Fatalf("orphans %+v, want the last try's %d calls", orphans, calls)
	}
	for i, c := range orphans[0].Calls {
		if c.CallIndex != int32(i) || c.EpisodeID != key(tries-1).ID() {
			t.Fatalf("the last try's calls %+v", orphans[0].Calls)
		}
	}
}

// An emptied segment keeps its old frames past the new ones. A host crash
// that wrote back a page with an old frame but not the end mark before it
// does not bring that frame back: its checksum is of the old generation.
func TestOldGenerationDoesNotRead(t *testing.T) {
	s, dir := newSpool(t)
	x := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 1}
	y := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 2}
	s.Call(x, call(x, 0))
	s.mu.Lock()
	second := s.seg.size // where x's second frame starts
	s.mu.Unlock()
	s.Call(x, call(x, 1))
	path := segments(t, dir)[0]
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Done(x)
	s.Call(y, call(y, 0)) // the same size as x's first: its end mark is over x's second frame
	f, _ := os.OpenFile(path, os.O_WRONLY, 0)
	f.WriteAt(old[second:second+8], int64(second))
	f.Close()
	_, orphans := nextProcess(t, dir)
	if len(orphans) != 1 || orphans[0].Key != y || len(orphans[0].Calls) != 1 {
		t.Fatalf("orphans %+v, want y's one call", orphans)
	}
}

// A segment whose file is cut under its mapping (a full disk on a
// filesystem that cannot reserve faults the same way) costs the records in
// it, not the process: the log goes on in a new segment.
func TestFaultMovesToANewSegment(t *testing.T) {
	s, dir := newSpool(t)
	a := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train"}
	s.Call(a, call(a, 0))
	if err := os.Truncate(segments(t, dir)[0], 0); err != nil {
		t.Fatal(err)
	}
	s.Call(a, call(a, 1)) // faults
	s.Call(a, call(a, 2))
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
	if !slices.Equal(got, []int32{2}) {
		t.Fatalf("recovered calls %v, want 2 (0 went with the file, 1 faulted)", got)
	}
}

// While no segment can be made, records are not spooled and Call returns;
// once one can, they are again.
func TestNoSegmentThenOne(t *testing.T) {
	s, dir := newSpool(t)
	logs := filepath.Join(dir, logDir)
	os.Remove(logs)
	os.WriteFile(logs, nil, 0o644) // a file where the folder should be
	a := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train"}
	s.Call(a, call(a, 0))
	s.Call(a, call(a, 1))
	os.Remove(logs)
	os.Mkdir(logs, 0o755)
	s.Call(a, call(a, 2))
	_, orphans := nextProcess(t, dir)
	if len(orphans) != 1 || len(orphans[0].Calls) != 1 || orphans[0].Calls[0].CallIndex != 2 {
		t.Fatalf("orphans %+v, want a with call 2", orphans)
	}
}

// Pending sees a worker's open tries from outside, done ones not (a try
// done while another keeps its segment is known by its done frame), and
// leaves the folder as it was.
func TestPending(t *testing.T) {
	s, dir := newSpool(t)
	a := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 1}
	b := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 2}
	s.Call(a, call(a, 0))
	s.Call(b, call(b, 0))
	s.Call(a, call(a, 1))
	segs := segments(t, dir)
	for _, want := range [][]schemas.EpisodeKey{{a, b}, {b}, nil} {
		open, err := Pending(dir)
		if err != nil || !slices.Equal(open, want) {
			t.Fatalf("pending %v, %v; want %v", open, err, want)
		}
		if now := segments(t, dir); !slices.Equal(now, segs) {
			t.Fatalf("segments %v, then %v", segs, now)
		}
		if len(want) > 0 {
			s.Done(want[0])
		}
	}
}

// A segment of the format before the mapped log (frames from the first
// byte, checksums unseeded), left by a worker of that build, is recovered.
func TestFormatOneSegment(t *testing.T) {
	dir := t.TempDir()
	a := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 3}
	var file []byte
	for i := range int32(2) {
		c := call(a, i)
		p := appendCall(appendKey([]byte{kindCall}, a), &c)
		file = binary.LittleEndian.AppendUint32(file, uint32(len(p)))
		file = binary.LittleEndian.AppendUint32(file, crc32.Checksum(p, castagnoli))
		file = append(file, p...)
	}
	os.MkdirAll(filepath.Join(dir, logDir), 0o755)
	path := filepath.Join(dir, logDir, "1-1-1.spool")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	s, orphans := nextProcess(t, dir)
	if len(orphans) != 1 || orphans[0].Key != a || len(orphans[0].Calls) != 2 || orphans[0].Calls[1].CallIndex != 1 {
		t.Fatalf("orphans %+v, want a's 2 calls", orphans)
	}
	s.Forget(orphans[0])
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Error("the old segment stays after its orphan was stored")
	}
}

// A segment is full when its last frame leaves fewer bytes than a frame's
// head: that tail (an end mark, or bytes of an earlier use) is the log's
// end, not a damaged record.
func TestFullSegmentEndsCleanly(t *testing.T) {
	a := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train"}
	c := call(a, 0)
	p := appendCall(appendKey([]byte{kindCall}, a), &c)
	for tail := range 8 {
		path := filepath.Join(t.TempDir(), "1-1-1.spool")
		g, err := createSegment(path, headerBytes+8+len(p)+tail)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.put(p); err != nil {
			t.Fatal(err)
		}
		g.unmap()
		var logs bytes.Buffer
		n := 0
		err = readSegment(path, slog.New(slog.NewTextHandler(&logs, nil)), func(byte, schemas.EpisodeKey, schemas.Call) { n++ })
		if err != nil || n != 1 || logs.Len() != 0 {
			t.Errorf("%d bytes after the last frame: %d frames, %v, logged %q", tail, n, err, logs.String())
		}
	}
}
