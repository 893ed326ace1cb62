// Package spool keeps each episode try's call records on local disk as they
// arrive (one JSON line per call) and its images as content-addressed files,
// so a worker that crashes mid-episode loses no record of a call that
// completed (the proxy spools a call right after its answer has gone out):
// the next worker process on the host finds the leftover spool and stores
// it as an orphaned try, never as training data.
package spool

import (
	"bufio"
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

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Spool is safe for concurrent use by many episodes.
type Spool struct {
	dir string
	log *slog.Logger

	mu    sync.Mutex
	open  map[string]*tryFile // by try key
	blobs map[string]map[string]bool
}

// tryFile is a try's open spool file. Its own lock orders the try's lines,
// so that the spool's lock is held only to find the file and calls of
// different tries never wait on each other's writes.
type tryFile struct {
	mu   sync.Mutex
	f    *os.File
	line []byte // the last line, its memory reused for the next
}

// New spools under dir, creating it.
func New(dir string, log *slog.Logger) (*Spool, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("spool dir %s: %w", dir, err)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Spool{dir: dir, log: log, open: map[string]*tryFile{}, blobs: map[string]map[string]bool{}}, nil
}

func tryKey(ep schemas.EpisodeKey) string {
	return ep.Run + "/" + ep.ID() + "/" + strconv.Itoa(int(ep.Retry))
}

// Path is where a try's records are spooled: in its phase's folder, not
// one of its own, since creating a folder per episode cost as much as all
// its calls' writes (and Done left the folder behind).
func (s *Spool) Path(ep schemas.EpisodeKey) string {
	return filepath.Join(s.dir, ep.Run, fmt.Sprintf("round=%d", ep.Round), "phase="+ep.Phase, fmt.Sprintf("%s.try-%d.jsonl", ep.ID(), ep.Retry))
}

// BlobPath is where a run's blob is kept locally.
func (s *Spool) BlobPath(run, name string) string { return filepath.Join(s.dir, run, "blobs", name) }

// Call appends a record; it is the proxy's OnCall. The line reaches the
// kernel, in one write, before Call returns (no fsync: a process crash
// keeps it, a host crash may not, and an fsync per call would cost the
// proxy its latency).
func (s *Spool) Call(ep schemas.EpisodeKey, c schemas.Call) {
	tf, err := s.file(ep)
	if err != nil {
		s.log.Error("spool: open", "episode", ep.ID(), "err", err)
		return
	}
	tf.mu.Lock()
	defer tf.mu.Unlock()
	tf.line = append(c.AppendJSON(tf.line[:0]), '\n')
	if _, err := tf.f.Write(tf.line); err != nil {
		s.log.Error("spool: write", "episode", ep.ID(), "err", err)
	}
	if cap(tf.line) > 1<<20 {
		tf.line = nil // an image-heavy request's line is not kept
	}
}

// file is ep's open spool file, created at its first call.
func (s *Spool) file(ep schemas.EpisodeKey) (*tryFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := tryKey(ep)
	if tf := s.open[k]; tf != nil {
		return tf, nil
	}
	p := s.Path(ep)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", filepath.Dir(p), err)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	tf := &tryFile{f: f}
	s.open[k] = tf
	return tf, nil
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
	k := tryKey(ep)
	if s.blobs[k] == nil {
		s.blobs[k] = map[string]bool{}
	}
	s.blobs[k][name] = true
}

// Blobs lists the blob names a try referenced.
func (s *Spool) Blobs(ep schemas.EpisodeKey) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.blobs[tryKey(ep)] {
		out = append(out, n)
	}
	return out
}

// Done forgets a try whose records are stored, removing its spool file.
func (s *Spool) Done(ep schemas.EpisodeKey) error {
	s.mu.Lock()
	k := tryKey(ep)
	tf := s.open[k]
	delete(s.open, k)
	delete(s.blobs, k)
	s.mu.Unlock()
	if tf != nil {
		tf.mu.Lock() // a write under way finishes first
		tf.f.Close()
		tf.mu.Unlock()
	}
	if err := os.Remove(s.Path(ep)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool: remove %s: %w", s.Path(ep), err)
	}
	return nil
}

// Orphan is a spooled try that no episode activity stored: its worker died
// or the try failed.
type Orphan struct {
	Key  schemas.EpisodeKey
	Path string
}

// orphanPath matches Path, and the <episode>/try-<retry>.jsonl of spools
// written before it.
var orphanPath = regexp.MustCompile(`^([^/]+)/round=(\d+)/phase=([^/]+)/([^/]+)(?:/|\.)try-(\d+)\.jsonl$`)

// Orphans lists the spooled tries not open in this process.
func (s *Spool) Orphans() ([]Orphan, error) {
	var out []Orphan
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(s.dir, p)
		m := orphanPath.FindStringSubmatch(filepath.ToSlash(rel))
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
		s.mu.Lock()
		_, open := s.open[tryKey(ep)]
		s.mu.Unlock()
		if !open {
			out = append(out, Orphan{Key: ep, Path: p})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("spool: list %s: %w", s.dir, err)
	}
	return out, nil
}

// ReadCalls reads a spool file; a torn last line (crash mid-write) is skipped.
func ReadCalls(path string) ([]schemas.Call, error) {
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
	// Calls are spooled as they finish, which for calls close together is
	// not always the order they were made in.
	slices.SortStableFunc(out, func(a, b schemas.Call) int { return int(a.CallIndex - b.CallIndex) })
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("spool: read %s: %w", path, err)
	}
	return out, nil
}

// Remove deletes an orphan's spool file once it is stored.
func Remove(o Orphan) error {
	if err := os.Remove(o.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool: remove %s: %w", o.Path, err)
	}
	return nil
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
