package rig

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	tlog "go.temporal.io/sdk/log"
	"golang.org/x/sys/unix"
)

// cmdTimeout bounds every ip and tc command: each takes milliseconds, so
// one that hangs this long is stuck (a kernel lock, a wedged namespace).
const cmdTimeout = 15 * time.Second

// run runs one command under its own timeout within ctx and returns its
// output; an error carries the command line and what it printed.
func run(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.WaitDelay = time.Second // a child holding the pipes open cannot hang us
	out, err := cmd.CombinedOutput()
	line := strings.Join(args, " ")
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("%s: no answer within %s: %w", line, cmdTimeout, ctx.Err())
	}
	if err != nil {
		return string(out), fmt.Errorf("%s: %s: %w", line, strings.TrimSpace(string(out)), err)
	}
	return string(out), nil
}

// lockMachine takes a machine-wide lock shared by every rig, polling so
// that ctx bounds the wait; the kernel drops it if the process dies.
func lockMachine(ctx context.Context) (unlock func(), err error) {
	path := filepath.Join(os.TempDir(), "roundhouse-rig.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("rig lock: %w", err)
	}
	for i := 0; ; i++ {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("rig lock %s: %w", path, err)
		}
		if i >= 600 { // 60 s: the holder's few commands take well under a second
			f.Close()
			return nil, fmt.Errorf("rig lock %s: still held after 60s", path)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("rig lock %s: %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// routeTypes are the words `ip route` may put before a destination.
var routeTypes = map[string]bool{"unicast": true, "local": true, "broadcast": true, "multicast": true,
	"throw": true, "unreachable": true, "prohibit": true, "blackhole": true, "nat": true, "anycast": true}

// routePrefixes reads the destinations of `ip -4 route show table all`,
// default routes left out: a rig's more specific routes win over them.
func routePrefixes(out string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && routeTypes[f[0]] {
			f = f[1:]
		}
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		dst := f[0]
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		p, err := netip.ParsePrefix(dst)
		if err != nil {
			return nil, fmt.Errorf("ip route line %q: %w", line, err)
		}
		ps = append(ps, p.Masked())
	}
	return ps, nil
}

// pickSubnet returns the first of up to 100 draws that overlaps none of
// used.
func pickSubnet(used []netip.Prefix, draw func() netip.Prefix) (netip.Prefix, error) {
	for range 100 {
		p := draw()
		if !slices.ContainsFunc(used, p.Overlaps) {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("rig: no /24 of 10.200.0.0–10.249.255.0 free of the machine's routes after 100 draws")
}

// randomSlash24 is a /24 from 10.200.0.0–10.249.255.0: inside 10/8, away
// from the low ranges networks and container runtimes tend to use.
func randomSlash24() netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + rand.IntN(50)), byte(rand.IntN(256)), 0}), 24)
}

// nth is the address at offset i in the /24 p.
func nth(p netip.Prefix, i int) netip.Addr {
	b := p.Addr().As4()
	b[3] = byte(i)
	return netip.AddrFrom4(b)
}

// linkAddrs are the two ends of link k's /30 at 10.X.Y.4k: the hub's
// (.4k+1) and the other namespace's (.4k+2). Link 0 joins the root.
func linkAddrs(p netip.Prefix, k int) (hub, other netip.Prefix) {
	return netip.PrefixFrom(nth(p, 4*k+1), 30), netip.PrefixFrom(nth(p, 4*k+2), 30)
}

// namespacePids lists the processes inside namespace ns.
func namespacePids(ctx context.Context, ns string) ([]int, error) {
	out, err := run(ctx, "ip", "netns", "pids", ns)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("ip netns pids %s: %q is not a pid", ns, f)
		}
		pids = append(pids, p)
	}
	return pids, nil
}

// killNamespace kills -9 every process inside ns until none is left, 100
// rounds at most within ctx: a process may fork while its siblings die.
func killNamespace(ctx context.Context, ns string) error {
	for range 100 {
		pids, err := namespacePids(ctx, ns)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL) // gone already is fine
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kill the processes of %s: %v still there: %w", ns, pids, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	pids, _ := namespacePids(ctx, ns)
	return fmt.Errorf("kill the processes of %s: %v still there after 100 rounds", ns, pids)
}

func namespaceExists(ns string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", ns))
	return err == nil
}

// deleteNamespace kills what runs inside ns and deletes it; a namespace
// that does not exist is not an error. Processes left inside would keep
// the namespace, and its veths, alive after the name is gone.
func deleteNamespace(ctx context.Context, ns string) error {
	if !namespaceExists(ns) {
		return nil
	}
	if err := killNamespace(ctx, ns); err != nil {
		return err
	}
	_, err := run(ctx, "ip", "netns", "del", ns)
	return err
}

var (
	leftNetns = regexp.MustCompile(`^rh-(\d+)-(\d+)-[a-z0-9]+$`)
	leftLink  = regexp.MustCompile(`^rh(\d+)-(\d+)$`)
	leftMount = regexp.MustCompile(`/rh-(\d+)-(\d+)/[a-z0-9]+/work$`)
)

// stale reports whether rig pid-seq is a leftover: its process is gone, or
// it is this process's but no live rig of it has that id (its pid reused).
func stale(pid, seq string) bool {
	p, err := strconv.Atoi(pid)
	if err != nil {
		return false
	}
	if p == os.Getpid() {
		liveMu.Lock()
		defer liveMu.Unlock()
		return !liveIDs["rh-"+pid+"-"+seq]
	}
	return errors.Is(syscall.Kill(p, 0), syscall.ESRCH)
}

// RemoveLeftovers deletes what rigs of processes that no longer run left
// behind (a test binary killed before its cleanup): their namespaces with
// the processes inside, root-side veths and tmpfs work directories. New
// calls it; it never touches a rig whose process is alive.
func RemoveLeftovers(ctx context.Context, logf func(string, ...any)) error {
	var errs []error
	// Mounts first: they pin nothing, but a leftover test directory cannot
	// be removed while they are there.
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 5 {
				continue
			}
			if m := leftMount.FindStringSubmatch(fs[4]); m != nil && stale(m[1], m[2]) {
				logf("rig: unmounting leftover %s", fs[4])
				if err := syscall.Unmount(fs[4], syscall.MNT_DETACH); err != nil {
					errs = append(errs, fmt.Errorf("unmount %s: %w", fs[4], err))
				}
			}
		}
		f.Close()
	}
	out, err := run(ctx, "ip", "netns", "list")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if m := leftNetns.FindStringSubmatch(f[0]); m != nil && stale(m[1], m[2]) {
			logf("rig: deleting leftover namespace %s", f[0])
			if err := deleteNamespace(ctx, f[0]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list interfaces: %w", err))...)
	}
	for _, i := range ifs {
		if m := leftLink.FindStringSubmatch(i.Name); m != nil && stale(m[1], m[2]) {
			logf("rig: deleting leftover interface %s", i.Name)
			// Gone meanwhile with its namespace is fine.
			if out, err := run(ctx, "ip", "link", "del", i.Name); err != nil && !strings.Contains(out, "Cannot find device") {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// dialIn connects from inside namespace ns. The socket is made on an OS
// thread switched into ns and keeps that namespace for life, wherever it is
// later used. address must be an IP and port: a name would be resolved
// by goroutines outside the namespace.
func dialIn(ctx context.Context, ns, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("dial %s in %s: %w", address, ns, err)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return nil, fmt.Errorf("dial %s in %s: the host must be an IP address: %w", address, ns, err)
	}
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	// A goroutine of its own: if switching back fails, its locked thread
	// ends with it instead of running other goroutines inside ns.
	go func() {
		c, err := dialLocked(ctx, ns, network, address)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

func dialLocked(ctx context.Context, ns, network, address string) (net.Conn, error) {
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("dial in %s: %w", ns, err)
	}
	defer self.Close()
	target, err := os.Open(filepath.Join("/run/netns", ns))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("dial in %s: %w", ns, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("dial in %s: setns: %w", ns, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, address)
	if rerr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); rerr != nil {
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("dial in %s: back to our namespace: %w", ns, rerr) // thread stays locked
	}
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", address, ns, err)
	}
	return c, nil
}

func quietLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
}
