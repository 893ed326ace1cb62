// Package spool keeps the call records of a worker's episode tries on local
// disk as they arrive, and their images as content-addressed files, so a
// worker that dies mid-episode leaves the records of its answered calls
// behind: the next worker process on the machine finds them and stores
// them as orphaned tries, never as training data.
//
// Records go to a log shared by all of the process's tries: segments of
// fixed size, mapped into memory (segment.go), so a call costs its proxy a
// copy and no system call. A segment whose tries are all done is emptied
// and reused; a try's end is also logged, so that a segment kept for other
// tries does not bring a stored try back as an orphan.
package spool

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
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
	// segmentBytes is a segment's size: a record larger than a segment gets
	// one of its own.
	segmentBytes = 16 << 20
	// keepEmpty is how many emptied segments stay mapped for reuse; a
	// worker's spool then holds its segments in use plus these.
	keepEmpty = 2
	// logDir holds the segments, under the spool's folder.
	logDir = "log"
)

// Frame kinds.
const (
	kindCall = 'c'
	kindDone = 'd'
)

// Spool is safe for concurrent use by many episodes.
type Spool struct {
	dir string
	log *slog.Logger
	// segmentBytes is the constant but for tests.
	segmentBytes int

	mu    sync.Mutex
	tries map[schemas.EpisodeKey]*try
	blobs map[schemas.EpisodeKey]map[string]bool
	seg   *segment   // where new records go; nil until the next call
	empty []*segment // emptied segments, for reuse
	nseg  int        // segments created, for their names
	buf   []byte     // the frame being made
	// failing is set while segments cannot be made, so that the error is
	// logged once, not on every call.
	failing bool
	closed  bool

	// recovering counts, per leftover file, the orphans read from it that
	// are not yet stored (Forget).
	recovering map[string]int
}

// try is an open try: the segments holding its records.
type try struct{ segs []*segment }

// New spools under dir, creating it.
func New(dir string, log *slog.Logger) (*Spool, error) {
	if err := os.MkdirAll(filepath.Join(dir, logDir), 0o755); err != nil {
		return nil, fmt.Errorf("spool dir %s: %w", dir, err)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Spool{dir: dir, log: log, segmentBytes: segmentBytes,
		tries: map[schemas.EpisodeKey]*try{}, blobs: map[schemas.EpisodeKey]map[string]bool{}}, nil
}

// BlobPath is where a run's blob is kept locally.
func (s *Spool) BlobPath(run, name string) string { return filepath.Join(s.dir, run, "blobs", name) }

// Call logs a record; it is the proxy's OnCall. No fsync: a process crash
// keeps what was copied, a host crash may not, and an fsync per call would
// cost more than the records are worth. A record the spool cannot take (no
// segment can be made: a full disk) is logged as lost from the spool; the
// episode still has it.
func (s *Spool) Call(ep schemas.EpisodeKey, c schemas.Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.log.Warn("spool: call after Close, not spooled", "episode", ep.ID(), "call", c.CallIndex)
		return
	}
	s.buf = appendCall(appendKey(append(s.buf[:0], kindCall), ep), &c)
	t := s.tries[ep]
	// Room for the try's end as well, in case this is its first record in
	// the segment.
	end := doneBytes(ep)
	g, err := s.room(8 + len(s.buf) + end)
	if err == nil {
		if t == nil {
			t = &try{}
			s.tries[ep] = t
		}
		if !slices.Contains(t.segs, g) {
			t.segs = append(t.segs, g)
			g.live++
			g.reserved += end
		}
		err = g.put(s.buf)
	}
	if err != nil {
		if !s.failing {
			s.log.Error("spool: a record is not spooled (the episode still has it); others will be, once the spool can write",
				"episode", ep.ID(), "call", c.CallIndex, "error", err)
		}
		s.failing = true
		if g != nil && g.broken && s.seg == g {
			s.seg = nil
		}
		return
	}
	if s.failing {
		s.log.Info("spool: records are spooled again", "episode", ep.ID(), "call", c.CallIndex)
		s.failing = false
	}
}

// room is the segment for need more bytes: the current one if they fit,
// else an emptied one or a new one. Under s.mu.
func (s *Spool) room(need int) (*segment, error) {
	if s.seg != nil && s.seg.fits(need) {
		return s.seg, nil
	}
	s.seg = nil // full; its tries keep it
	if n := len(s.empty); n > 0 && s.empty[n-1].fits(need) {
		s.seg, s.empty = s.empty[n-1], s.empty[:n-1]
		return s.seg, nil
	}
	size := s.segmentBytes
	if headerBytes+need > size { // a record larger than a segment
		size = headerBytes + need
	}
	s.nseg++
	name := fmt.Sprintf("%d-%d-%d.spool", time.Now().UnixNano(), os.Getpid(), s.nseg)
	g, err := createSegment(filepath.Join(s.dir, logDir, name), size)
	if err != nil {
		return nil, fmt.Errorf("spool: new segment: %w", err)
	}
	s.seg = g
	return g, nil
}

func doneBytes(ep schemas.EpisodeKey) int {
	var b [64]byte
	return 8 + len(appendKey(append(b[:0], kindDone), ep))
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

// Close unmaps the log; later calls are not spooled. Segments of tries not
// done stay for the next process to recover; emptied ones are removed.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, g := range s.empty {
		g.unmap()
		errs = append(errs, remove(g.path))
	}
	// The current segment is among the tries' below: the call that took
	// it added its try.
	s.empty, s.seg = nil, nil
	for _, t := range s.tries {
		for _, g := range t.segs {
			g.unmap()
		}
	}
	return errors.Join(errs...)
}

func remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool: remove %s: %w", path, err)
	}
	return nil
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
// emptied for reuse (or removed).
func (s *Spool) Done(ep schemas.EpisodeKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.blobs, ep)
	t := s.tries[ep]
	if t == nil {
		return nil
	}
	delete(s.tries, ep)
	s.buf = appendKey(append(s.buf[:0], kindDone), ep) // the try's end, as each segment kept logs it
	var errs []error
	for _, g := range t.segs {
		g.live--
		g.reserved -= 8 + len(s.buf) // the room Call kept for it (doneBytes)
		if g.live > 0 {
			if g.m != nil && !g.broken {
				if err := g.put(s.buf); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		}
		if g == s.seg {
			s.seg = nil
		}
		if g.m != nil && !g.broken && len(g.m) == s.segmentBytes && len(s.empty) < keepEmpty {
			if err := g.reset(); err == nil {
				s.empty = append(s.empty, g)
				continue
			}
		}
		g.unmap()
		errs = append(errs, remove(g.path))
	}
	return errors.Join(errs...)
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
	for _, g := range s.empty {
		own[g.path] = true
	}
	if s.seg != nil {
		own[s.seg.path] = true
	}
	for _, t := range s.tries {
		for _, g := range t.segs {
			own[g.path] = true
		}
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
		err := readSegment(p, s.log, func(kind byte, ep schemas.EpisodeKey, c schemas.Call) {
			if kind == kindDone {
				done[ep] = true
			} else {
				add(p, ep, c)
			}
		})
		switch {
		case errors.Is(err, errFormat):
			continue
		case err != nil:
			return nil, err
		}
		files = append(files, p)
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
			if err := remove(f); err != nil {
				return nil, err
			}
		}
	}
	s.mu.Lock()
	s.recovering = refs
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Orphan) int { return compareKeys(a.Key, b.Key) })
	return out, nil
}

// Pending lists the tries with records in the log under a spool folder,
// not done, as a process other than the folder's worker sees them (a test
// waits with it for a worker's tries to be stored). It changes nothing.
func Pending(dir string) ([]schemas.EpisodeKey, error) {
	segs, err := filepath.Glob(filepath.Join(dir, logDir, "*.spool"))
	if err != nil {
		return nil, fmt.Errorf("spool: list %s: %w", dir, err)
	}
	open, done := map[schemas.EpisodeKey]bool{}, map[schemas.EpisodeKey]bool{}
	for _, p := range segs {
		err := readSegment(p, slog.New(slog.DiscardHandler), func(kind byte, ep schemas.EpisodeKey, _ schemas.Call) {
			open[ep] = true
			done[ep] = done[ep] || kind == kindDone
		})
		if err != nil && !errors.Is(err, errFormat) && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	var out []schemas.EpisodeKey
	for ep := range open {
		if !done[ep] {
			out = append(out, ep)
		}
	}
	slices.SortFunc(out, compareKeys)
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
		if err := remove(f); err != nil {
			return err
		}
	}
	return nil
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
