// Package ports hands out TCP ports on a host so that several workers on one
// machine never give two services the same port — the collisions users of
// the upstream controller avoid by hand with --var model_port=…
//
// A port is free for us when the kernel lets us bind it and no other
// Roundhouse process holds the lock file of that port in the shared
// directory. The lock is held (an open file with flock) until Release, and
// the kernel drops it when a process dies, so a crashed worker's ports come
// back by themselves.
package ports

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Dir is the shared lock directory: $ROUNDHOUSE_PORTS_DIR or a folder in
// the system temp dir, the same for every worker of the machine.
func Dir() string {
	if d := os.Getenv("ROUNDHOUSE_PORTS_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "roundhouse-ports")
}

// Lease is an allocated port.
type Lease struct {
	Port int
	f    *os.File
}

// Release gives the port back.
func (l *Lease) Release() {
	if l != nil && l.f != nil {
		os.Remove(l.f.Name())
		l.f.Close()
		l.f = nil
	}
}

// Allocate returns a port that is bindable now and locked for this process.
func Allocate() (*Lease, error) {
	dir := Dir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("port lock dir %s (set ROUNDHOUSE_PORTS_DIR): %w", dir, err)
	}
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("allocate a port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		lease, err := lock(dir, port)
		if err != nil || lease != nil {
			return lease, err
		}
		// another worker's service holds it
	}
	return nil, errors.New("no free port after 100 tries")
}

// lock takes port's lock file in dir: nil, nil when another process
// holds it.
func lock(dir string, port int) (*Lease, error) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("port lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("port lock: %w", err)
	}
	return &Lease{Port: port, f: f}, nil
}

// AllocateBelow is Allocate for a port under max (at least 1024 ports
// above 20000): for a listener whose port lands in a narrow column, as
// Temporal's membership port in PostgreSQL's smallint.
func AllocateBelow(max int) (*Lease, error) {
	const low = 20000
	if max < low+1024 {
		return nil, fmt.Errorf("allocate a port below %d: want at least %d", max, low+1024)
	}
	dir := Dir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("port lock dir %s (set ROUNDHOUSE_PORTS_DIR): %w", dir, err)
	}
	for i := 0; i < 200; i++ {
		port := low + rand.IntN(max-low)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // taken
		}
		l.Close()
		lease, err := lock(dir, port)
		if err != nil || lease != nil {
			return lease, err
		}
		// another worker's service holds it
	}
	return nil, fmt.Errorf("no free port below %d after 200 tries", max)
}

// Held reports whether some process holds the lock of port (for tests and
// diagnostics).
func Held(port int) bool {
	f, err := os.OpenFile(filepath.Join(Dir(), strconv.Itoa(port)+".lock"), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
