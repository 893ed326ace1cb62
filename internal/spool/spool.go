// Package spool keeps the call records of a worker's episode tries on local
// disk as they arrive, and their images as content-addressed files, so a
// worker that dies mid-episode leaves the records of its answered calls
// behind: the next worker process on the machine finds them and stores
// them as orphaned tries, never as training data.
//
// Records go to a log shared by all of the process's tries, written by one
// goroutine in batches (group commit): a call costs its proxy a copy into
// memory, not a system call, and the log reaches the kernel within
// flushDelay of the answer. A log segment is deleted once every try with
// records in it is done; a try's end is also logged, so that a segment kept
// for other tries does not bring a stored try back as an orphan.
package spool

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

const (
	// flushDelay is how long the writer gathers records before a write:
	// the most a process that dies loses of records whose answers went
	// out. At a few thousand calls a second it puts tens of records in a
	// write.
	flushDelay = 2 * time.Millisecond
	// segmentBytes is the size at which the log moves to a new segment, so
	// that a long-running worker's disk use follows its tries in flight.
	segmentBytes = 16 << 20
	// maxPending bounds the records waiting for the writer (a stalled
	// disk): past it, Call waits, and so does the proxy's harness.
	maxPending = 64 << 20
	// logDir holds the segments, under the spool's folder.
	logDir = "log"
)

// Frame kinds.
const (
	kindCall = 'c'
	kindDone = 'd'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Spool is safe for concurrent use by many episodes.
type Spool struct {
	dir string
	log *slog.Logger
	// segmentBytes and maxPending are the constants but for tests;
	// beforeWrite, when set, runs before each batch's write (tests stall
	// the writer with it).
	segmentBytes, maxPending int
	beforeWrite              func()

	mu      sync.Mutex
	drained *sync.Cond // the writer wrote a batch
	tries   map[schemas.EpisodeKey]*try
	blobs   map[schemas.EpisodeKey]map[string]bool
	seg     *segment // where new records go; nil until the next call
	nseg    int      // segments created, for their names
	pending []chunk  // frames for the writer, in order
	bytes   int      // their size
	free    [][]byte // written chunks' memory, for reuse
	dead    []*segment
	seq     uint64 // frames appended
	written uint64 // frames the writer has handed to the kernel
	werr    error  // the writer's last failure, for Sync
	waiting int    // calls waiting for the writer to catch up
	closed  bool
	kick    chan struct{}
	stopped chan struct{}

	// recovering counts, per leftover file, the orphans read from it that
	// are not yet stored (Forget).
	recovering map[string]int
}

// try is an open try: the segments holding its records.
type try struct{ segs []*segment }

// segment is a file of the log. live counts the open tries with records in
// it; at zero it is dead and the writer deletes it. A segment a write
// failed on is broken: what follows a torn frame does not read back, so
// the log moves to a new segment. f is the writer's.
type segment struct {
	path   string
	size   int
	live   int
	dead   bool
	broken bool
	f      *os.File
}

// chunk is frames bound for one segment.
type chunk struct {
	seg *segment
	b   []byte
}

// New spools under dir, creating it, and starts the spool's writer; Close
// stops it.
func New(dir string, log *slog.Logger) (*Spool, error) {
	if err := os.MkdirAll(filepath.Join(dir, logDir), 0o755); err != nil {
		return nil, fmt.Errorf("spool dir %s: %w", dir, err)
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Spool{dir: dir, log: log, segmentBytes: segmentBytes, maxPending: maxPending,
		tries: map[schemas.EpisodeKey]*try{}, blobs: map[schemas.EpisodeKey]map[string]bool{},
		kick: make(chan struct{}, 1), stopped: make(chan struct{})}
	s.drained = sync.NewCond(&s.mu)
	go s.write()
	return s, nil
}

// BlobPath is where a run's blob is kept locally.
func (s *Spool) BlobPath(run, name string) string { return filepath.Join(s.dir, run, "blobs", name) }

// Call logs a record; it is the proxy's OnCall. It copies the record into
// the writer's next batch and returns, unless the writer is behind by more
// than maxPending. No fsync: a process crash keeps what was written, a
// host crash may not, and an fsync per batch would cost more than the
// records are worth.
func (s *Spool) Call(ep schemas.EpisodeKey, c schemas.Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.bytes > s.maxPending && !s.closed {
		s.waiting++
		s.drained.Wait()
		s.waiting--
	}
	if s.closed {
		s.log.Warn("spool: call after Close, not spooled", "episode", ep.ID(), "call", c.CallIndex)
		return
	}
	if s.seg == nil || s.seg.size >= s.segmentBytes || s.seg.broken {
		s.nseg++
		name := fmt.Sprintf("%d-%d-%d.spool", time.Now().UnixNano(), os.Getpid(), s.nseg)
		s.seg = &segment{path: filepath.Join(s.dir, logDir, name)}
	}
	t := s.tries[ep]
	if t == nil {
		t = &try{}
		s.tries[ep] = t
	}
	if !slices.Contains(t.segs, s.seg) {
		t.segs = append(t.segs, s.seg)
		s.seg.live++
	}
	s.frame(s.seg, kindCall, ep, &c)
}

// frame appends a frame for seg to the pending chunks: its payload's
// length and CRC-32C, then the payload (kind, try, record). Under s.mu.
func (s *Spool) frame(seg *segment, kind byte, ep schemas.EpisodeKey, c *schemas.Call) {
	if len(s.pending) == 0 || s.pending[len(s.pending)-1].seg != seg {
		var b []byte
		if n := len(s.free); n > 0 {
			b, s.free = s.free[n-1], s.free[:n-1]
		}
		s.pending = append(s.pending, chunk{seg: seg, b: b})
	}
	ch := &s.pending[len(s.pending)-1]
	start := len(ch.b)
	b := append(ch.b, 0, 0, 0, 0, 0, 0, 0, 0, kind)
	b = appendKey(b, ep)
	if c != nil {
		b = appendCall(b, c)
	}
	payload := b[start+8:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	ch.b = b
	n := len(b) - start
	seg.size += n
	s.bytes += n
	s.seq++
	if s.bytes == n {
		s.wake() // once per batch, not per record
	}
}

// wake tells the writer there is work, unless it has been told already.
func (s *Spool) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func appendKey(b []byte, ep schemas.EpisodeKey) []byte {
	b = appendStr(b, ep.Run)
	b = binary.AppendVarint(b, int64(ep.Round))
	b = appendStr(b, ep.Phase)
	b = binary.AppendVarint(b, int64(ep.Group))
	b = binary.AppendVarint(b, int64(ep.Attempt))
	return binary.AppendVarint(b, int64(ep.Retry))
}

func readKey(r *reader) schemas.EpisodeKey {
	return schemas.EpisodeKey{Run: r.str(), Round: r.int32(), Phase: r.str(), Group: r.int32(), Attempt: r.int32(), Retry: r.int32()}
}

// write is the spool's writer: it waits for records, lets a batch gather,
// and hands it to the kernel in one write per segment.
func (s *Spool) write() {
	defer close(s.stopped)
	for {
		_, more := <-s.kick
		if more {
			time.Sleep(flushDelay)
		}
		s.flush()
		if !more {
			return
		}
	}
}

func (s *Spool) flush() {
	s.mu.Lock()
	// Dead segments stay in s.dead until removed, so that Orphans does not
	// take one for an earlier process's.
	batch, dead, upto := s.pending, slices.Clone(s.dead), s.seq
	s.pending, s.bytes = nil, 0
	skip := make([]bool, len(batch))
	for i, ch := range batch {
		skip[i] = ch.seg.dead || ch.seg.broken
	}
	s.mu.Unlock()
	if s.beforeWrite != nil {
		s.beforeWrite()
	}
	var werr error
	var broken []*segment
	for i, ch := range batch {
		if skip[i] || slices.Contains(broken, ch.seg) {
			continue
		}
		if err := ch.seg.append(ch.b); err != nil {
			s.log.Error("spool: write failed; the log goes on in a new segment, these records are kept in memory only",
				"path", ch.seg.path, "error", err)
			werr = err
			broken = append(broken, ch.seg)
		}
	}
	for _, seg := range dead {
		if seg.f != nil {
			seg.f.Close()
		}
		if err := os.Remove(seg.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Error("spool: remove a segment whose tries are all done", "path", seg.path, "error", err)
		}
	}
	s.mu.Lock()
	for _, g := range broken {
		g.broken = true
		if s.seg == g {
			s.seg = nil
		}
	}
	s.dead = s.dead[len(dead):] // Done only appends
	for _, ch := range batch {
		if cap(ch.b) <= 4<<20 { // an image-heavy batch's memory is not kept
			s.free = append(s.free, ch.b[:0])
		}
	}
	s.written, s.werr = upto, werr
	s.drained.Broadcast()
	s.mu.Unlock()
}

func (g *segment) append(b []byte) error {
	if g.f == nil {
		f, err := os.OpenFile(g.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		g.f = f
	}
	_, err := g.f.Write(b)
	return err
}

// Sync returns once every record logged before it has been written, with
// the writer's error if that write failed.
func (s *Spool) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	upto := s.seq
	for s.written < upto && !s.closed {
		s.drained.Wait()
	}
	return s.werr
}

// Close writes what is pending and stops the writer. Segments of tries not
// done stay for the next process to recover; later calls are not spooled.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.drained.Broadcast() // a Call waiting for room gives up
	close(s.kick)
	s.mu.Unlock()
	<-s.stopped
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tries {
		for _, g := range t.segs {
			if g.f != nil {
				g.f.Close()
				g.f = nil
			}
		}
	}
	return s.werr
}

// Blob stores an image once per run (the name is its hash) and notes that
// this try references it; it is the proxy's OnBlob.
func (s *Spool) Blob(ep schemas.EpisodeKey, name string, data []byte) {
	p := s.BlobPath(ep.Run, name)
	if _, err := os.Stat(p); err != nil {
		if err := writeAtomic(p, data); err != nil {
			s.log.Error("spool: blob", "path", p, "err", err)
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blobs[ep] == nil {
		s.blobs[ep] = map[string]bool{}
	}
	s.blobs[ep][name] = true
}

// Blobs lists the blob names a try referenced.
func (s *Spool) Blobs(ep schemas.EpisodeKey) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.blobs[ep] {
		out = append(out, n)
	}
	return out
}

// Done forgets a try whose records are stored: its end is logged in every
// segment that other tries keep, and a segment left with no open try is
// deleted.
func (s *Spool) Done(ep schemas.EpisodeKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.blobs, ep)
	t := s.tries[ep]
	if t == nil {
		return nil
	}
	delete(s.tries, ep)
	for _, g := range t.segs {
		if g.live--; g.live > 0 {
			if !s.closed {
				s.frame(g, kindDone, ep, nil)
			}
			continue
		}
		g.dead = true
		if g == s.seg {
			s.seg = nil
		}
		if s.closed {
			if err := os.Remove(g.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("spool: remove %s: %w", g.path, err)
			}
			continue
		}
		s.dead = append(s.dead, g)
		s.seq++ // so that Sync waits for its removal too
		if len(s.pending) == 0 {
			s.wake()
		}
	}
	return nil
}

// Orphan is a spooled try that no episode activity stored: its worker died
// or the try failed.
type Orphan struct {
	Key   schemas.EpisodeKey
	Calls []schemas.Call // in call order
	files []string       // where they were read from
}

// Orphans reads the tries that earlier processes spooled and did not mark
// done. A leftover file none of whose tries is an orphan is deleted; the
// others go once Forget has been called for each of their orphans.
func (s *Spool) Orphans() ([]Orphan, error) {
	s.mu.Lock()
	own := map[string]bool{}
	if s.seg != nil {
		own[s.seg.path] = true
	}
	for _, t := range s.tries {
		for _, g := range t.segs {
			own[g.path] = true
		}
	}
	for _, g := range s.dead {
		own[g.path] = true
	}
	s.mu.Unlock()

	byKey := map[schemas.EpisodeKey]*Orphan{}
	done := map[schemas.EpisodeKey]bool{}
	var files []string
	add := func(path string, ep schemas.EpisodeKey, c schemas.Call) {
		o := byKey[ep]
		if o == nil {
			o = &Orphan{Key: ep}
			byKey[ep] = o
		}
		o.Calls = append(o.Calls, c)
		if !slices.Contains(o.files, path) {
			o.files = append(o.files, path)
		}
	}
	segs, err := filepath.Glob(filepath.Join(s.dir, logDir, "*.spool"))
	if err != nil {
		return nil, fmt.Errorf("spool: list %s: %w", s.dir, err)
	}
	for _, p := range segs {
		if own[p] {
			continue
		}
		files = append(files, p)
		if err := readSegment(p, s.log, func(kind byte, ep schemas.EpisodeKey, c schemas.Call) {
			if kind == kindDone {
				done[ep] = true
			} else {
				add(p, ep, c)
			}
		}); err != nil {
			return nil, err
		}
	}
	legacy, err := s.legacyFiles()
	if err != nil {
		return nil, err
	}
	for _, lf := range legacy {
		files = append(files, lf.path)
		calls, err := readLines(lf.path)
		if err != nil {
			return nil, err
		}
		if len(calls) == 0 {
			// An empty file still names a try, as spool files of that
			// layout did: it is recovered, with no calls to store.
			byKey[lf.key] = &Orphan{Key: lf.key, files: []string{lf.path}}
		}
		for _, c := range calls {
			add(lf.path, lf.key, c)
		}
	}

	var out []Orphan
	refs := map[string]int{}
	for ep, o := range byKey {
		if done[ep] {
			continue
		}
		slices.SortStableFunc(o.Calls, func(a, b schemas.Call) int { return cmp.Compare(a.CallIndex, b.CallIndex) })
		for _, f := range o.files {
			refs[f]++
		}
		out = append(out, *o)
	}
	for _, f := range files {
		if refs[f] == 0 {
			if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("spool: remove %s, whose tries are all done: %w", f, err)
			}
		}
	}
	s.mu.Lock()
	s.recovering = refs
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Orphan) int { return compareKeys(a.Key, b.Key) })
	return out, nil
}

func compareKeys(a, b schemas.EpisodeKey) int {
	return cmp.Or(cmp.Compare(a.Run, b.Run), cmp.Compare(a.Phase, b.Phase), cmp.Compare(a.Round, b.Round),
		cmp.Compare(a.Group, b.Group), cmp.Compare(a.Attempt, b.Attempt), cmp.Compare(a.Retry, b.Retry))
}

// Forget drops a stored orphan: a leftover file goes once all the orphans
// Orphans read from it are forgotten.
func (s *Spool) Forget(o Orphan) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range o.files {
		if s.recovering[f]--; s.recovering[f] > 0 {
			continue
		}
		delete(s.recovering, f)
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("spool: remove %s: %w", f, err)
		}
	}
	return nil
}

// readSegment calls fn for each frame of a segment. It stops at the first
// frame that is cut short or does not match its checksum: a process dies
// mid-write only at the end of what it wrote.
func readSegment(path string, log *slog.Logger, fn func(kind byte, ep schemas.EpisodeKey, c schemas.Call)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var payload []byte
	for {
		payload, err = readFrame(br, payload)
		switch {
		case err == io.EOF:
			return nil
		case errors.Is(err, errDamaged):
			log.Warn("spool: a segment ends in a damaged record; the records before it are kept", "path", path, "error", err)
			return nil
		case err != nil:
			return fmt.Errorf("spool: read %s: %w", path, err)
		}
		r := &reader{b: payload[1:]}
		ep := readKey(r)
		if r.err != nil {
			log.Warn("spool: a record's try does not read; the record is skipped", "path", path, "error", r.err)
			continue
		}
		switch payload[0] {
		case kindDone:
			fn(kindDone, ep, schemas.Call{})
		case kindCall:
			c, err := readCall(r.b)
			if err != nil {
				log.Warn("spool: a record does not read; it is skipped", "path", path, "error", err)
				continue
			}
			fn(kindCall, ep, c)
		default:
			log.Warn("spool: a record of an unknown kind is skipped", "path", path, "kind", payload[0])
		}
	}
}

// errDamaged is a frame cut short (a death mid-write) or not matching its
// checksum.
var errDamaged = errors.New("a record cut short or not matching its checksum")

// readFrame reads the next frame's payload into buf; io.EOF at the end.
func readFrame(br *bufio.Reader, buf []byte) ([]byte, error) {
	var head [8]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errDamaged
		}
		return nil, err
	}
	n := binary.LittleEndian.Uint32(head[:])
	if n == 0 || n > 1<<30 {
		return nil, errDamaged
	}
	buf = slices.Grow(buf[:0], int(n))[:n]
	if _, err := io.ReadFull(br, buf); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errDamaged
		}
		return nil, err
	}
	if crc32.Checksum(buf, castagnoli) != binary.LittleEndian.Uint32(head[4:]) {
		return nil, errDamaged
	}
	return buf, nil
}

// legacyFile is a try's file of JSON lines, as workers wrote them before the
// log: <run>/round=R/phase=P/<episode>.try-N.jsonl, or earlier
// <episode>/try-N.jsonl.
type legacyFile struct {
	key  schemas.EpisodeKey
	path string
}

var legacyPath = regexp.MustCompile(`^([^/]+)/round=(\d+)/phase=([^/]+)/([^/]+)(?:/|\.)try-(\d+)\.jsonl$`)

func (s *Spool) legacyFiles() ([]legacyFile, error) {
	var out []legacyFile
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == logDir || d.Name() == "blobs" {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(s.dir, p)
		m := legacyPath.FindStringSubmatch(filepath.ToSlash(rel))
		if m == nil {
			return nil
		}
		ep, err := schemas.ParseEpisodeID(m[1], m[4])
		if err != nil || strconv.Itoa(int(ep.Round)) != m[2] || ep.Phase != m[3] {
			s.log.Warn("spool: not a try's file; left alone", "path", p)
			return nil
		}
		retry, _ := strconv.Atoi(m[5])
		ep.Retry = int32(retry)
		out = append(out, legacyFile{key: ep, path: p})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("spool: list %s: %w", s.dir, err)
	}
	return out, nil
}

// readLines reads a legacy file; a torn last line is skipped.
func readLines(path string) ([]schemas.Call, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	var out []schemas.Call
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		var c schemas.Call
		if json.Unmarshal(sc.Bytes(), &c) == nil {
			out = append(out, c)
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("spool: read %s: %w", path, err)
	}
	return out, nil
}

func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".blob-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
