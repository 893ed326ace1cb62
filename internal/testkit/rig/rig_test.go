package rig

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	itest.Cleanup()
	os.Exit(code)
}

func TestRoutePrefixes(t *testing.T) {
	out := `default via 192.0.2.1 dev eth0
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2
10.201.7.254 via 10.201.7.1 dev rh1-1
local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1
broadcast 127.255.255.255 dev lo table local proto kernel scope link src 127.0.0.1
blackhole 10.9.0.0/16
`
	got, err := routePrefixes(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"192.0.2.0/24", "10.201.7.254/32", "127.0.0.0/8", "127.255.255.255/32", "10.9.0.0/16"}
	var s []string
	for _, p := range got {
		s = append(s, p.String())
	}
	if !slices.Equal(s, want) {
		t.Errorf("prefixes = %v, want %v (default left out)", s, want)
	}
	if _, err := routePrefixes("nonsense/99 dev x\n"); err == nil {
		t.Error("a destination that is no prefix was accepted")
	}
}

func TestPickSubnetAvoidsUsed(t *testing.T) {
	used := []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16"), netip.MustParsePrefix("10.201.7.254/32"),
		netip.MustParsePrefix("10.201.8.0/23")}
	draws := []string{"10.200.3.0/24", "10.201.7.0/24", "10.201.9.0/24", "10.201.10.0/24"}
	next := func() netip.Prefix { p := netip.MustParsePrefix(draws[0]); draws = draws[1:]; return p }
	p, err := pickSubnet(used, next)
	if err != nil || p.String() != "10.201.10.0/24" {
		t.Errorf("picked %v (%v), want 10.201.10.0/24, the first draw no used prefix overlaps", p, err)
	}
	calls := 0
	if _, err := pickSubnet([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, func() netip.Prefix { calls++; return randomSlash24() }); err == nil || calls != 100 {
		t.Errorf("with 10.0.0.0/8 used: %v after %d draws, want an error after 100", err, calls)
	}
	for range 1000 {
		p := randomSlash24()
		if b := p.Addr().As4(); b[0] != 10 || b[1] < 200 || b[1] > 249 || b[3] != 0 || p.Bits() != 24 {
			t.Fatalf("drew %s, not a /24 of 10.200.0.0–10.249.255.0", p)
		}
	}
}

func TestAddresses(t *testing.T) {
	p := netip.MustParsePrefix("10.211.3.0/24")
	hub, host := linkAddrs(p, 2)
	if hub.String() != "10.211.3.9/30" || host.String() != "10.211.3.10/30" {
		t.Errorf("link 2 = %s, %s; want 10.211.3.9/30, 10.211.3.10/30", hub, host)
	}
	// The last host's /30 stays below the hub's service addresses.
	_, last := linkAddrs(p, maxHosts)
	if !last.Addr().Less(nth(p, 253)) || last.Contains(nth(p, 253)) {
		t.Errorf("host %d's %s reaches the services' .253", maxHosts, last)
	}
}

func TestCheckSpecs(t *testing.T) {
	for _, bad := range [][]HostSpec{
		nil,
		{{Name: "hub", Roles: "rollout"}},
		{{Name: "toolongname", Roles: "rollout"}},
		{{Name: "R1", Roles: "rollout"}},
		{{Name: "r1", Roles: "rollout"}, {Name: "r1", Roles: "train"}},
		{{Name: "r1"}},
	} {
		if err := checkSpecs(bad); err == nil {
			t.Errorf("checkSpecs(%+v) accepted", bad)
		}
	}
	if err := checkSpecs(DefaultHosts()); err != nil {
		t.Error(err)
	}
}

// TestRemoveLeftovers: a namespace named like a rig of a process that has
// exited, with a process inside, is removed; a live rig's name is not.
func TestRemoveLeftovers(t *testing.T) {
	if err := usable(); err != nil {
		unavailable(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprintf("rh-%d-1-r1", dead.Process.Pid)
	live := fmt.Sprintf("rh-%d-1-r1", os.Getppid()) // go test's own process: alive
	for _, ns := range []string{old, live} {
		if _, err := run(ctx, "ip", "netns", "add", ns); err != nil {
			unavailable(t, err)
		}
		t.Cleanup(func() { _ = deleteNamespace(context.Background(), ns) })
	}
	sleeper := exec.Command("ip", "netns", "exec", old, "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	waitFor(t, 10*time.Second, func() error {
		pids, err := namespacePids(ctx, old)
		if err == nil && len(pids) == 0 {
			err = errors.New("sleep not inside yet")
		}
		return err
	})

	if err := RemoveLeftovers(ctx, t.Logf); err != nil {
		t.Fatal(err)
	}
	if namespaceExists(old) {
		t.Errorf("leftover %s still there", old)
	}
	if !namespaceExists(live) {
		t.Errorf("%s, whose process runs, was removed", live)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("the process inside the leftover namespace still runs")
	}
}

// TestRig builds three rollout hosts and a training host and checks that
// each worker registers, that each host reaches Temporal and S3 and
// nothing else, and every fault and its heal.
func TestRig(t *testing.T) {
	itest.Slow(t)
	hosts := DefaultHosts()
	hosts[0].DiskBytes = 16 << 20
	r := New(t, Config{Hosts: hosts})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r1, r2, r3, t1 := r.Host("r1"), r.Host("r2"), r.Host("r3"), r.Host("t1")

	t.Run("workers register", func(t *testing.T) {
		// Temporal names a poller "<pid>@<hostname>@": the rollout queue
		// must show the three rollout workers, the train queue t1's.
		// The queue names are workflows/api's RolloutQueue and TrainQueue,
		// spelled out: internal/ never imports upward (design §2). A
		// renamed queue shows here as a queue without pollers.
		want := map[string][]int{
			"roundhouse-rollout": sorted(r1.PID(), r2.PID(), r3.PID()),
			"roundhouse-train":   {t1.PID()},
		}
		waitFor(t, 30*time.Second, func() error {
			for queue, pids := range want {
				resp, err := r.Client.DescribeTaskQueue(ctx, queue, enums.TASK_QUEUE_TYPE_ACTIVITY)
				if err != nil {
					return err
				}
				var got []int
				for _, p := range resp.GetPollers() {
					pid, _, _ := strings.Cut(p.GetIdentity(), "@")
					n, err := strconv.Atoi(pid)
					if err != nil {
						return fmt.Errorf("identity %q", p.GetIdentity())
					}
					if !slices.Contains(got, n) {
						got = append(got, n)
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, pids) {
					return fmt.Errorf("%s pollers %v, want the workers %v", queue, got, pids)
				}
			}
			return nil
		})
	})

	t.Run("hosts reach the hub and nothing else", func(t *testing.T) {
		outside := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
		addrs, err := net.InterfaceAddrs() // the test's namespace: the machine's interfaces
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() && !r.Subnet.Contains(p.Addr()) {
				outside = append(outside, p.Addr())
			}
		}
		for _, h := range r.Hosts {
			// The worker's own view: /readyz checks Temporal and S3.
			waitFor(t, 20*time.Second, func() error { return h.probe(ctx, "/readyz") })
			mustDial(t, h, r.TemporalAddr())
			mustDial(t, h, r.S3Addr())
			// No default route: the machine's own addresses, and any
			// other outside the rig, are unreachable.
			for _, a := range outside {
				if err := dial(ctx, h, netip.AddrPortFrom(a, 22).String()); err == nil {
					t.Errorf("%s reached %s, outside the rig", h.Name, a)
				}
			}
		}
	})

	t.Run("partition", func(t *testing.T) {
		if err := r1.Partition(ctx); err != nil {
			t.Fatal(err)
		}
		mustNotDial(t, r1, r.TemporalAddr())
		mustNotDial(t, r1, r.S3Addr())
		mustDial(t, r2, r.TemporalAddr()) // one host's fault only
		if err := r1.HealPartition(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 15*time.Second, func() error { return dial(ctx, r1, r.TemporalAddr()) })
		mustDial(t, r1, r.S3Addr())
	})

	t.Run("partial partition", func(t *testing.T) {
		if err := r2.PartitionTemporal(ctx); err != nil {
			t.Fatal(err)
		}
		mustNotDial(t, r2, r.TemporalAddr())
		mustDial(t, r2, r.S3Addr())
		// The worker sees it too: Temporal fails its readiness, S3 passes.
		waitFor(t, 30*time.Second, func() error {
			code, body, err := r2.Health(ctx, "/readyz")
			if err != nil {
				return err
			}
			if code == http.StatusOK || !strings.Contains(body, "temporal: Temporal not reachable") || !strings.Contains(body, "s3: ok") {
				return fmt.Errorf("/readyz %d %q", code, body)
			}
			return nil
		})
		if err := r2.HealTemporal(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 15*time.Second, func() error { return dial(ctx, r2, r.TemporalAddr()) })
		waitFor(t, 30*time.Second, func() error { return r2.probe(ctx, "/readyz") })
	})

	t.Run("slow S3", func(t *testing.T) {
		if err := r3.SlowS3(ctx, 1_000_000); err != nil {
			t.Fatal(err)
		}
		// S3 still answers, and its bytes went through the limited class
		// on both ends; Temporal's did not.
		get(t, r3, "http://"+r.S3Addr()+"/")
		mustDial(t, r3, r.TemporalAddr())
		for _, side := range []struct{ ns, dev string }{{r3.Netns, hostDev}, {r.Hub, r3.hubDev}} {
			out, err := run(ctx, "tc", "-n", side.ns, "-s", "class", "show", "dev", side.dev, "classid", "1:30")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "rate 1Mbit") || sentBytes(out) == 0 {
				t.Errorf("%s %s: the S3 class saw no traffic or has another rate:\n%s", side.ns, side.dev, out)
			}
		}
		if err := r3.HealS3(ctx); err != nil {
			t.Fatal(err)
		}
		out, err := run(ctx, "tc", "-n", r3.Netns, "qdisc", "show", "dev", hostDev, "root")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "htb") {
			t.Errorf("after HealS3 the qdisc is still %s", out)
		}
		get(t, r3, "http://"+r.S3Addr()+"/")
	})

	t.Run("faults combine and heal one by one", func(t *testing.T) {
		if err := r3.SlowS3(ctx, 1_000_000); err != nil {
			t.Fatal(err)
		}
		if err := r3.PartitionTemporal(ctx); err != nil {
			t.Fatal(err)
		}
		mustNotDial(t, r3, r.TemporalAddr())
		get(t, r3, "http://"+r.S3Addr()+"/")
		if err := r3.Partition(ctx); err != nil {
			t.Fatal(err)
		}
		mustNotDial(t, r3, r.S3Addr())
		if err := r3.HealPartition(ctx); err != nil { // Temporal stays cut
			t.Fatal(err)
		}
		mustNotDial(t, r3, r.TemporalAddr())
		waitFor(t, 15*time.Second, func() error { return dial(ctx, r3, r.S3Addr()) })
		if err := r3.HealNetwork(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 15*time.Second, func() error { return dial(ctx, r3, r.TemporalAddr()) })
	})

	t.Run("disk full", func(t *testing.T) {
		probe := filepath.Join(r1.WorkDir, "probe")
		if err := r1.FillDisk(ctx); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(probe, make([]byte, 4096), 0o644); !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("writing to the filled work directory: %v, want ENOSPC", err)
		}
		if err := r1.FreeDisk(ctx); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(probe, make([]byte, 4096), 0o644); err != nil {
			t.Errorf("after FreeDisk: %v", err)
		}
		if err := r2.FillDisk(ctx); err == nil {
			t.Error("FillDisk on a host without a disk of its own succeeded")
		}
	})

	t.Run("kill -9", func(t *testing.T) {
		old := t1.PID()
		// A child in a process group of its own, as the worker's services
		// are: a crashed host leaves that behind no more than the worker.
		stray := t1.Command(ctx, "setsid", "sleep", "600")
		if err := stray.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = stray.Wait() }()
		waitFor(t, 10*time.Second, func() error {
			pids, err := t1.Pids(ctx)
			if err == nil && len(pids) < 2 {
				err = fmt.Errorf("pids %v", pids)
			}
			return err
		})
		if err := t1.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		if pids, err := t1.Pids(ctx); err != nil || len(pids) != 0 {
			t.Errorf("after Kill, processes %v in %s (%v)", pids, t1.Netns, err)
		}
		if err := syscall.Kill(old, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("worker %d after Kill: %v, want it gone", old, err)
		}
		if t1.PID() != 0 {
			t.Errorf("PID() = %d after Kill", t1.PID())
		}
		// Heal: the worker comes back in the same namespace.
		if err := t1.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if p := t1.PID(); p == 0 || p == old {
			t.Errorf("restarted worker's pid %d (was %d)", p, old)
		}
	})
}

func sorted(xs ...int) []int { slices.Sort(xs); return xs }

// waitFor retries f every 200 ms until it succeeds or d passes.
func waitFor(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %v", d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// dial is a bounded TCP connect from inside h's namespace.
func dial(ctx context.Context, h *Host, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := h.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

func mustDial(t *testing.T, h *Host, addr string) {
	t.Helper()
	if err := dial(context.Background(), h, addr); err != nil {
		t.Errorf("%s cannot reach %s: %v", h.Name, addr, err)
	}
}

func mustNotDial(t *testing.T, h *Host, addr string) {
	t.Helper()
	if err := dial(context.Background(), h, addr); err == nil {
		t.Errorf("%s reached %s", h.Name, addr)
	} else if ne := net.Error(nil); !errors.As(err, &ne) {
		t.Errorf("%s to %s failed, but not on the network: %v", h.Name, addr, err)
	}
}

// get is an HTTP GET from inside h; any answer will do (S3 refuses the
// anonymous request, which still crosses the link both ways).
func get(t *testing.T, h *Host, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("%s GET %s: %v", h.Name, url, err)
	}
	resp.Body.Close()
}

// sentBytes reads "Sent N bytes" from `tc -s class show`.
func sentBytes(out string) int64 {
	_, rest, ok := strings.Cut(out, "Sent ")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
	return n
}
