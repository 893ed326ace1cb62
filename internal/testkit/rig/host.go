package rig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/proc"
)

const (
	hostDev = "rig0" // the host's end of its veth, inside its namespace
	// healthPort serves the worker's /livez and /readyz on the host's own
	// loopback: every host has one, so one port does for all.
	healthPort   = 8090
	startTimeout = time.Minute
	killTimeout  = 20 * time.Second
	fillName     = ".rig-disk-filler"
)

// Host is one namespace with its worker process.
type Host struct {
	Name    string
	Netns   string     // the namespace, rh-<pid>-<n>-<name>
	Addr    netip.Addr // its address on its veth to the hub
	WorkDir string     // the worker's --workdir (and so its spool); kept across restarts
	Log     string     // the worker's output, appended across restarts

	spec    HostSpec
	rig     *Rig
	hubDev  string // the hub's end of the veth
	made    bool   // the namespace exists
	mounted bool   // WorkDir is the host's tmpfs

	mu     sync.Mutex
	worker *worker
	net    netState
}

// worker is a running worker process.
type worker struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited and been waited for
}

// netState is the faults in force on a host's link; tc is set up from it
// as a whole, so faults combine and each heal undoes only its own.
type netState struct {
	partitioned  bool  // nothing passes
	temporalDown bool  // nothing to or from Temporal passes
	s3Rate       int64 // S3 traffic limited to this many bits/s each way; 0: not
}

// Start runs the host's worker inside its namespace and waits until its
// /livez answers (its SDK workers poll), a minute at most. It is how a
// killed host comes back: same work directory, so the new worker finds the
// dead one's spool.
func (h *Host) Start(ctx context.Context) error {
	h.mu.Lock()
	if h.worker != nil {
		h.mu.Unlock()
		return fmt.Errorf("host %s: worker already running (pid %d)", h.Name, h.worker.cmd.Process.Pid)
	}
	args := []string{"netns", "exec", h.Netns, filepath.Join(h.rig.bins, "worker"),
		"--workdir", h.WorkDir, "--roles", h.spec.Roles, "--health-listen", "127.0.0.1:" + strconv.Itoa(healthPort)}
	if h.spec.Slots > 0 {
		args = append(args, "--slots", strconv.Itoa(h.spec.Slots))
	}
	args = append(args, h.spec.Args...)
	logf, err := os.OpenFile(h.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		h.mu.Unlock()
		return fmt.Errorf("host %s: worker log: %w", h.Name, err)
	}
	// As itest.StartWorker does, but inside the namespace. `ip netns exec`
	// execs the worker in place, so the pid is the worker's; its own
	// process group lets Kill reach everything it started, and Pdeathsig
	// ends it with the test process.
	cmd := exec.Command("ip", args...)
	cmd.Dir = h.rig.root
	cmd.Env = append(append(os.Environ(), h.rig.Endpoints.Env()...), h.spec.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		h.mu.Unlock()
		return fmt.Errorf("host %s: start worker: %w", h.Name, err)
	}
	w := &worker{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(w.done)
	}()
	h.worker = w
	h.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var last error
	for {
		select {
		case <-w.done:
			h.mu.Lock()
			if h.worker == w {
				h.worker = nil // so Start may try again
			}
			h.mu.Unlock()
			return fmt.Errorf("host %s: worker exited before it was live (%v); log %s: %s", h.Name, cmd.ProcessState, h.Log, proc.LogTail(h.Log, 600))
		default:
		}
		if last = h.probe(ctx, "/livez"); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("host %s: worker not live (waited at most %s: %w; last: %v); log %s: %s", h.Name, startTimeout, ctx.Err(), last, h.Log, proc.LogTail(h.Log, 600))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// SetEnv replaces the host's HostSpec.Env; it applies from the next Start
// (a killed host coming back slower, say).
func (h *Host) SetEnv(env []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.spec.Env = append([]string(nil), env...)
}

// probe asks the worker's health endpoint, from inside the namespace.
func (h *Host) probe(ctx context.Context, path string) error {
	code, body, err := h.Health(ctx, path)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("%s: %d %s", path, code, strings.TrimSpace(body))
	}
	return nil
}

// Health GETs the worker's /livez or /readyz from inside the host's
// namespace (the worker serves them on the host's loopback) and returns
// the status and body; /readyz lists the worker's own checks of Temporal
// and S3.
func (h *Host) Health(ctx context.Context, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(healthPort)+path, nil)
	if err != nil {
		return 0, "", fmt.Errorf("host %s: %w", h.Name, err)
	}
	resp, err := h.HTTPClient().Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("host %s: %w", h.Name, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, io.LimitReader(resp.Body, 64<<10)); err != nil {
		return resp.StatusCode, b.String(), fmt.Errorf("host %s: read %s: %w", h.Name, path, err)
	}
	return resp.StatusCode, b.String(), nil
}

// PID is the worker's process id (0 when it is not running). Temporal
// shows it at the start of the worker's identity, "<pid>@<hostname>@".
func (h *Host) PID() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.worker == nil {
		return 0
	}
	return h.worker.cmd.Process.Pid
}

// Pids lists every process inside the host's namespace.
func (h *Host) Pids(ctx context.Context) ([]int, error) {
	pids, err := namespacePids(ctx, h.Netns)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", h.Name, err)
	}
	return pids, nil
}

// Kill is a host crash: kill -9 of the worker's process group, then of
// every process still in the namespace (the services and model servers a
// worker starts get process groups of their own), until none is left, 20 s
// at most. Start brings the worker back.
func (h *Host) Kill(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	h.mu.Lock()
	w := h.worker
	h.worker = nil
	h.mu.Unlock()
	if w != nil {
		_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL) // an exited group is fine
	}
	if err := killNamespace(ctx, h.Netns); err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	if w != nil {
		select {
		case <-w.done:
		case <-ctx.Done():
			return fmt.Errorf("host %s: worker %d not reaped after kill -9: %w", h.Name, w.cmd.Process.Pid, ctx.Err())
		}
	}
	return nil
}

// DialContext connects from inside the host's namespace, as its worker
// would; address is an IP and port.
func (h *Host) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return dialIn(ctx, h.Netns, network, address)
}

// HTTPClient makes its connections from inside the host's namespace; URLs
// must name IP addresses.
func (h *Host) HTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}
}

// Command is a program to run inside the host's namespace (not started);
// ctx bounds it.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Netns, name}, args...)...)
}

// Partition cuts the host off the hub: nothing passes its veth either way,
// silently, as on a dead link (a connect times out rather than fails at
// once). HealPartition undoes it.
func (h *Host) Partition(ctx context.Context) error {
	return h.setNet(ctx, func(s *netState) { s.partitioned = true })
}

// HealPartition undoes Partition; other faults stay.
func (h *Host) HealPartition(ctx context.Context) error {
	return h.setNet(ctx, func(s *netState) { s.partitioned = false })
}

// PartitionTemporal is a partial partition: packets to and from
// Temporal's address are dropped while S3 still answers. HealTemporal
// undoes it.
func (h *Host) PartitionTemporal(ctx context.Context) error {
	return h.setNet(ctx, func(s *netState) { s.temporalDown = true })
}

// HealTemporal undoes PartitionTemporal.
func (h *Host) HealTemporal(ctx context.Context) error {
	return h.setNet(ctx, func(s *netState) { s.temporalDown = false })
}

// SlowS3 limits the host's traffic with S3 to bitsPerSecond in each
// direction (an htb class; the rest of its traffic is not shaped). The
// kernels this runs on lack netem, so the link is slow rather than
// delayed: a transfer of B bytes takes at least 8·B/bitsPerSecond seconds,
// a small request about a packet's worth (1500 bytes at 100 kbit/s: 0.12 s).
// HealS3 undoes it.
func (h *Host) SlowS3(ctx context.Context, bitsPerSecond int64) error {
	if bitsPerSecond <= 0 {
		return fmt.Errorf("host %s: SlowS3 needs a positive rate, got %d", h.Name, bitsPerSecond)
	}
	return h.setNet(ctx, func(s *netState) { s.s3Rate = bitsPerSecond })
}

// HealS3 undoes SlowS3.
func (h *Host) HealS3(ctx context.Context) error {
	return h.setNet(ctx, func(s *netState) { s.s3Rate = 0 })
}

// HealNetwork undoes every network fault of the host.
func (h *Host) HealNetwork(ctx context.Context) error {
	return h.setNet(ctx, func(s *netState) { *s = netState{} })
}

func (h *Host) setNet(ctx context.Context, change func(*netState)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := h.net
	change(&next)
	// Remembered even on failure: every apply sets both ends up from
	// scratch, so the next call (a heal, say) repairs a half-done one.
	h.net = next
	r := h.rig
	for _, side := range []struct{ ns, dev, dir string }{
		{h.Netns, hostDev, "dst"}, // what the host sends to the hub
		{r.Hub, h.hubDev, "src"},  // what the hub sends to the host
	} {
		if err := shape(ctx, side.ns, side.dev, side.dir, next, r.temporalIP, r.s3IP); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
	}
	return nil
}

// shape sets up the root qdisc of dev (in namespace ns) for state s,
// matching Temporal and S3 by their address in direction dir ("dst" or
// "src"). Only what this kernel is known to have is used (no netem, prio
// or gact here): a pfifo of limit 0 drops every packet it is given, and
// htb sends packets no filter matched out unshaped (it has no default
// class).
func shape(ctx context.Context, ns, dev, dir string, s netState, temporal, s3 netip.Addr) error {
	tc := func(args ...string) error {
		_, err := run(ctx, append([]string{"tc", "-n", ns}, args...)...)
		return err
	}
	out, err := run(ctx, "tc", "-n", ns, "qdisc", "show", "dev", dev, "root")
	if err != nil {
		return err
	}
	// tc cannot replace a qdisc by one of another kind: ours (handle 1:)
	// goes first. Without it the device has its default, not deletable.
	if strings.Contains(out, " 1: root") {
		if err := tc("qdisc", "del", "dev", dev, "root"); err != nil {
			return err
		}
	}
	switch {
	case s.partitioned:
		return tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "pfifo", "limit", "0")
	case !s.temporalDown && s.s3Rate == 0:
		return nil
	}
	if err := tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "htb"); err != nil {
		return err
	}
	if s.temporalDown {
		for _, c := range [][]string{
			{"class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate", "1gbit", "quantum", "1514"},
			{"qdisc", "add", "dev", dev, "parent", "1:20", "handle", "20:", "pfifo", "limit", "0"},
			{"filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", dir, temporal.String() + "/32", "flowid", "1:20"},
		} {
			if err := tc(c...); err != nil {
				return err
			}
		}
	}
	if s.s3Rate > 0 {
		rate := strconv.FormatInt(s.s3Rate, 10) + "bit"
		for _, c := range [][]string{
			{"class", "add", "dev", dev, "parent", "1:", "classid", "1:30", "htb", "rate", rate, "ceil", rate, "quantum", "1514"},
			{"filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "2", "u32", "match", "ip", dir, s3.String() + "/32", "flowid", "1:30"},
		} {
			if err := tc(c...); err != nil {
				return err
			}
		}
	}
	return nil
}

// FillDisk fills the host's work directory, a tmpfs of HostSpec.DiskBytes,
// with one file until writes fail with ENOSPC. FreeDisk removes it.
func (h *Host) FillDisk(ctx context.Context) error {
	if !h.mounted {
		return fmt.Errorf("host %s: no disk of its own to fill; set HostSpec.DiskBytes", h.Name)
	}
	path := filepath.Join(h.WorkDir, fillName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("host %s: fill disk: %w", h.Name, err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	// Chunks shrink so the last bytes fill too: 1 MiB, 64 KiB, … 1 byte.
	for size := len(buf); size >= 1; size /= 16 {
		for i := 0; ; i++ {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("host %s: fill disk: %w", h.Name, err)
			}
			if int64(i) > h.spec.DiskBytes/int64(size)+1 {
				return fmt.Errorf("host %s: fill disk: %s took more than its %d bytes", h.Name, path, h.spec.DiskBytes)
			}
			_, err := f.Write(buf[:size])
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				return fmt.Errorf("host %s: fill disk: %w", h.Name, err)
			}
		}
	}
	return nil
}

// FreeDisk undoes FillDisk.
func (h *Host) FreeDisk(ctx context.Context) error {
	if err := os.Remove(filepath.Join(h.WorkDir, fillName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("host %s: free disk: %w", h.Name, err)
	}
	return nil
}
