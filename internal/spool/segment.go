package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// A segment is a file of the log, of fixed size, mapped into memory: a
// record is copied into the kernel's page cache with no system call, and
// a segment whose tries are all done is reset and taken again, so its pages
// are written over rather than fresh ones allocated and freed (measured,
// for 4.7 KB records: 2.0 µs a record with a write to a fresh file, 0.75 µs
// with a write over a file's cached pages, 0.07 µs copied into a mapping).
// What a call has copied is the kernel's as soon as it returns, so a
// process that dies loses none of it; a host that crashes may.
//
// Layout: magic, generation (8 bytes each), then frames: payload length
// and CRC-32C (4 bytes each), payload (kind, try, record). A zero length
// ends the log; it is written past each frame before the frame's own
// length, so a death mid-copy leaves the log ending before that frame. The
// generation is counted up at each reset and seeds the frames' CRC, so
// frames left from an earlier use of the file never read as this one's,
// even if the host crashed with only some pages written back.
type segment struct {
	path string
	m    []byte // the file, mapped; nil once unmapped
	gen  uint64
	crc0 uint32 // the frames' CRC seed, from gen
	size int    // bytes in use, header included
	// reserved is room kept for the done frames of the tries with records
	// here (one each): a segment kept for other tries must be able to say
	// that a try is done, or it would bring the try back as an orphan.
	reserved int
	live     int  // open tries with records here
	broken   bool // touching the mapping faulted; takes nothing more
}

const headerBytes = 16

// magic opens a segment; its last byte is the log's format. Segments
// written before the log was mapped have no header (format 1).
var magic = [8]byte{'r', 'h', 's', 'p', 'o', 'o', 'l', 2}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func seed(gen uint64) uint32 {
	return crc32.Checksum(binary.LittleEndian.AppendUint64(nil, gen), castagnoli)
}

// createSegment makes a segment file of size bytes, its blocks reserved
// (a full disk fails here, not as a fault on a later copy), and maps it.
func createSegment(path string, size int) (*segment, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the mapping keeps the file
	m, err := mapFile(f, size)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	g := &segment{path: path, m: m, gen: 1, crc0: seed(1), size: headerBytes}
	copy(m, magic[:])
	binary.LittleEndian.PutUint64(m[8:], g.gen)
	return g, nil
}

func mapFile(f *os.File, size int) ([]byte, error) {
	err := unix.Fallocate(int(f.Fd()), 0, 0, int64(size))
	if errors.Is(err, unix.EOPNOTSUPP) {
		// A filesystem that cannot reserve: a full disk then faults on a
		// copy, which put turns into an error.
		err = f.Truncate(int64(size))
	}
	if err != nil {
		return nil, fmt.Errorf("reserve %d bytes: %w", size, err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map: %w", err)
	}
	return m, nil
}

// fits says whether n more bytes of frames go in, beside the room kept.
func (g *segment) fits(n int) bool { return g.size+g.reserved+n <= len(g.m) }

// put appends a frame with payload p. A fault on the mapping (the file
// cut under it, a full disk on a filesystem that could not reserve) is an
// error, not the process's end, and breaks the segment.
func (g *segment) put(p []byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer g.fault(&err)
	off, end := g.size, g.size+8+len(p)
	binary.LittleEndian.PutUint32(g.m[off+4:], crc32.Update(g.crc0, castagnoli, p))
	copy(g.m[off+8:], p)
	if end+4 <= len(g.m) {
		binary.LittleEndian.PutUint32(g.m[end:], 0)
	}
	binary.LittleEndian.PutUint32(g.m[off:], uint32(len(p))) // last: the frame is in the log
	g.size = end
	return nil
}

// fault, deferred with the goroutine's faults made panics, turns a fault
// on the mapping into err and breaks the segment; other panics go on.
func (g *segment) fault(err *error) {
	r := recover()
	if r == nil {
		return
	}
	if _, fault := r.(interface{ Addr() uintptr }); !fault {
		panic(r)
	}
	g.broken = true
	*err = fmt.Errorf("spool: %s: %v", g.path, r)
}

// reset empties a segment for reuse: its next generation, no frames.
func (g *segment) reset() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer g.fault(&err)
	// The end mark first: a death between the two leaves an empty log of
	// the old generation, not the old frames under the new one.
	binary.LittleEndian.PutUint32(g.m[headerBytes:], 0)
	g.gen++
	g.crc0 = seed(g.gen)
	binary.LittleEndian.PutUint64(g.m[8:], g.gen)
	g.size, g.reserved, g.live = headerBytes, 0, 0
	return nil
}

// unmap releases the mapping; the file stays.
func (g *segment) unmap() {
	if g.m != nil {
		unix.Munmap(g.m)
		g.m = nil
	}
}

var errFormat = errors.New("a segment of another format")

// readSegment calls fn for each frame of a segment file. It stops at the
// log's end, or at a frame that is cut short or does not match its
// checksum (a host that crashed before all pages were written back).
func readSegment(path string, log *slog.Logger, fn func(kind byte, ep schemas.EpisodeKey, c schemas.Call)) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	var crc0 uint32
	mapped := len(b) >= headerBytes && [8]byte(b[:8]) == magic
	if mapped {
		crc0 = seed(binary.LittleEndian.Uint64(b[8:]))
		b = b[headerBytes:]
	} else if len(b) >= 8 && string(b[:7]) == string(magic[:7]) {
		log.Warn("spool: a segment of a format this build does not read is left alone; a build of its version recovers it",
			"path", path, "format", b[7])
		return errFormat
	}
	damaged := func() {
		log.Warn("spool: a segment ends in a damaged record; the records before it are kept", "path", path)
	}
	for len(b) >= 8 {
		n := int(binary.LittleEndian.Uint32(b))
		if n == 0 {
			return nil
		}
		if n > len(b)-8 || crc32.Update(crc0, castagnoli, b[8:8+n]) != binary.LittleEndian.Uint32(b[4:]) {
			damaged()
			return nil
		}
		payload := b[8 : 8+n]
		b = b[8+n:]
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
	// A mapped segment is full when fewer bytes than a frame's head are
	// left; one of format 1 was appended to, so such a tail is a frame cut
	// short.
	if len(b) > 0 && !mapped {
		damaged()
	}
	return nil
}
