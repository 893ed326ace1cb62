// Package rig builds several "hosts" on this one machine out of Linux
// network namespaces, for integration tests that need more than one machine:
// rollout and training hosts that each run their own worker process, a hub
// where Temporal and S3 run, and faults injected on one host at a time
// (kill -9, partition, Temporal-only partition, slow S3, full disk).
//
// What New builds, for a rig with id rh-<pid>-<n> (pid: the test process):
//
//	root namespace (the test)      hub namespace rh-<pid>-<n>-hub        host namespace rh-<pid>-<n>-r1 …
//	rh<pid>-<n> 10.X.Y.2/30 ─veth─ root 10.X.Y.1/30
//	                               lo 10.X.Y.254 Temporal :7233 (*)
//	                               lo 10.X.Y.253 S3 (versitygw) :9000
//	                               h-r1 10.X.Y.5/30 ─────────veth───────── rig0 10.X.Y.6/30
//	                               h-r2 10.X.Y.9/30 ─────────veth───────── rig0 10.X.Y.10/30 (rh-<pid>-<n>-r2)
//
// (*) The dev server listens on every address of the hub (Rig.startServers
// says why); the hosts and the test reach it at 10.X.Y.254.
//
// 10.X.Y.0/24 is drawn at random from 10.200.0.0–10.249.255.0 and taken
// only when no route or address of the root namespace overlaps it. Host k
// (from 1) gets the /30 at 10.X.Y.4k. Each host routes only Temporal's and
// S3's /32 through its veth; nothing in the rig has a default route, so no
// packet of the rig can reach a real interface.
//
// The hub is a namespace of its own rather than the root namespace: the
// Temporal dev server opens ports of its own choosing, which there cannot
// meet another test's servers, and the hub holds nothing but loopback and
// the rig's veths. The root namespace gets one veth and two /32 routes, so
// the test process (its Temporal client, its Store) reaches Temporal and S3
// at the same addresses the hosts use.
//
// Faults act on one host and undo with a matching call: Kill / Start,
// Partition / HealPartition, PartitionTemporal / HealTemporal, SlowS3 /
// HealS3, FillDisk / FreeDisk (HealNetwork undoes all network faults).
// Two act on the hub, for every host at once: RestartTemporal, and
// StopS3 / StartS3; both servers keep their data. A host's worker gets
// HostSpec.Env (SetEnv changes it for the next Start), which reaches what
// the worker runs: a harness's knobs, such as MINIMAL_EPISODE_DELAY.
// The network ones set tc up on both ends of the host's veth, so they
// touch that host alone and combine. A partition is a pfifo qdisc of
// limit 0, which drops every packet silently, as a dead link does
// (connects time out, they are not refused). The partial partition is an
// htb qdisc whose u32 filter puts packets to Temporal's address (host
// end) and from it (hub end) into a class with such a pfifo; that is why
// Temporal and S3 have addresses of their own. SlowS3 puts S3's packets
// into an htb class of a given rate. The kernel this was written on has
// no netem, prio or gact and the machine no iptables or nft, hence pfifo
// and htb, which it has.
//
// Network configuration shells out to ip and tc (the iproute2 commands)
// rather than using a netlink library: the commands are the ones a person
// types to inspect or undo the rig, they appear verbatim in errors, and
// creating a named namespace from Go means switching an OS thread into it.
// Every command runs under a timeout (cmdTimeout) and fails with its output.
// Programs enter a host through `ip netns exec`, which execs them in place
// (the pid is the program's, so a kill reaches it); the test's own
// connections from a host (Host.DialContext) make their socket on an OS
// thread switched into the namespace with setns, and switched back.
//
// Cleaning up by hand, after a test binary was killed before its cleanup
// ran (New also removes such leftovers of processes that no longer run):
//
//	ip netns list | grep '^rh-'          # the rig's namespaces
//	ip netns pids rh-<pid>-<n>-r1        # processes still inside one
//	ip netns del rh-<pid>-<n>-r1         # after killing those
//	ip -o link | grep ' rh[0-9]'         # a root-side veth left over
//	grep /rh- /proc/mounts               # a host's tmpfs work directory
package rig

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/cluster"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/devstack"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
)

// Fixed ports are fine: every rig has a hub namespace of its own.
const (
	temporalPort = 7233
	s3Port       = 9000
	maxHosts     = 62 // /30s at 10.X.Y.4k below the hub's .253 and .254
)

// HostSpec describes one host.
type HostSpec struct {
	// Name is 1–8 characters of [a-z0-9], starting with a letter ("hub" is
	// taken): it ends the namespace's name and names the hub's veth h-<name>.
	Name string
	// Roles is the worker's --roles, e.g. "rollout" or "train,control".
	Roles string
	// Slots is the worker's --slots; 0 leaves the worker's default.
	Slots int
	// DiskBytes > 0 puts the host's work directory on a tmpfs of that
	// size, which FillDisk can fill.
	DiskBytes int64
	// Args are more worker flags, after the rig's own.
	Args []string
	// Env is added to the worker's environment last (so it wins), and so
	// reaches what the worker starts: e.g. MINIMAL_EPISODE_DELAY, which
	// slows the minimal harness's episodes on this host alone.
	Env []string
}

// Config says which hosts to build.
type Config struct {
	Hosts []HostSpec
	// Bins is a folder holding the worker binary (itest.Binaries or
	// itest.Build); empty builds ./workers/worker.
	Bins string
	// Cluster runs the production-shaped Temporal of
	// internal/testkit/cluster in the hub (PostgreSQL, four services,
	// mTLS) instead of the dev server; its services are then faults of
	// their own (Rig.Cluster's Kill and Start).
	Cluster bool
}

// DefaultHosts is three rollout hosts, r1–r3, and the training host t1,
// which also runs the control role (workflows) so a rig can run rounds.
func DefaultHosts() []HostSpec {
	return []HostSpec{
		{Name: "r1", Roles: "rollout"},
		{Name: "r2", Roles: "rollout"},
		{Name: "r3", Roles: "rollout"},
		{Name: "t1", Roles: "train,control"},
	}
}

// Rig is a running set of namespaces: the hub with Temporal and S3, and the
// hosts with their workers. New tears it all down when the test ends.
type Rig struct {
	ID     string       // rh-<pid>-<n>: the prefix of every namespace of this rig
	Dir    string       // logs, server data, the hosts' folders
	Hub    string       // the hub's namespace
	Subnet netip.Prefix // the /24 every address of the rig is in
	// Endpoints reach Temporal and S3 at their hub addresses, from the
	// test's namespace as from every host.
	Endpoints connect.Endpoints
	Store     *store.Store
	Client    client.Client // a Temporal client of the test, through the root veth
	Hosts     []*Host
	// Cluster is the production-shaped Temporal, with Config.Cluster.
	Cluster *cluster.Cluster

	temporalIP, s3IP netip.Addr
	bins             string
	root             string // the repository, the workers' working directory
	rootLink         string // the root namespace's end of the hub's veth
	servers          []*proc.Server
	// How each server was started, by name, so RestartTemporal and
	// StartS3 start it again on the same data.
	serverSpecs map[string]serverSpec
	serverMu    sync.Mutex
	cluster     bool
}

// serverSpec is one of the hub's servers: its command, environment and log.
type serverSpec struct {
	args, env []string
	log       string
}

// TemporalAddr is Temporal's host:port in the hub.
func (r *Rig) TemporalAddr() string { return r.Endpoints.Temporal }

// S3Addr is the S3 server's host:port in the hub.
func (r *Rig) S3Addr() string { return netip.AddrPortFrom(r.s3IP, s3Port).String() }

// Env is the environment a process in the test's namespace (a starter)
// needs for the rig's Temporal and S3.
func (r *Rig) Env() []string { return r.Endpoints.Env() }

// Stack is the rig's Temporal and S3 as an itest.Stack, for its helpers
// (Starter). Its StartWorker would start a worker outside every host.
func (r *Rig) Stack() itest.Stack {
	return itest.Stack{Endpoints: r.Endpoints, Store: r.Store, Dir: r.Dir}
}

// Host is the host named name, or nil.
func (r *Rig) Host(name string) *Host {
	for _, h := range r.Hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

var (
	rigSeq  atomic.Int64
	liveMu  sync.Mutex
	liveIDs = map[string]bool{} // rigs of this process still in use: never leftovers
)

var hostName = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)

// New builds the rig and registers its teardown with t.Cleanup, which runs
// even when the test fails or panics. Where network namespaces cannot be
// made (not root, no ip or tc, `ip netns add` refused) it skips the test,
// or fails it when the environment variable CI is set.
func New(t testing.TB, cfg Config) *Rig {
	t.Helper()
	if err := checkSpecs(cfg.Hosts); err != nil {
		t.Fatal(err)
	}
	if err := usable(); err != nil {
		unavailable(t, err)
	}
	tbin := ""
	if !cfg.Cluster {
		var err error
		if tbin, err = devstack.TemporalTool.Find(); err != nil {
			t.Fatal(err)
		}
	}
	vbin, err := devstack.VersitygwTool.Find()
	if err != nil {
		t.Fatal(err)
	}
	bins := cfg.Bins
	if bins == "" {
		bins = itest.Build(t, "./workers/worker")
	}
	limit := 3 * time.Minute
	if cfg.Cluster {
		limit = 8 * time.Minute // PostgreSQL made, schemas migrated, four services started
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := RemoveLeftovers(ctx, t.Logf); err != nil {
		t.Logf("rig: removing leftovers of earlier runs: %v", err)
	}

	seq := rigSeq.Add(1)
	r := &Rig{ID: fmt.Sprintf("rh-%d-%d", os.Getpid(), seq), bins: bins, root: itest.Root(t),
		rootLink: fmt.Sprintf("rh%d-%d", os.Getpid(), seq), cluster: cfg.Cluster}
	if len(r.rootLink) > 15 {
		t.Fatalf("rig: interface name %s is longer than Linux's 15 characters", r.rootLink)
	}
	r.Hub = r.ID + "-hub"
	r.Dir = filepath.Join(t.TempDir(), r.ID) // leftover mounts are found by the /rh-<pid>-<n>/ in their path
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	liveMu.Lock()
	liveIDs[r.ID] = true
	liveMu.Unlock()
	// Registered before anything exists: teardown skips what is not there.
	t.Cleanup(func() {
		for _, err := range r.teardown() {
			t.Errorf("rig teardown: %v", err)
		}
	})

	// The first namespace doubles as the check that this machine lets us
	// make them at all.
	if _, err := run(ctx, "ip", "netns", "add", r.Hub); err != nil {
		unavailable(t, err)
	}
	if err := r.buildHub(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.startServers(ctx, tbin, vbin); err != nil {
		t.Fatal(err)
	}
	for i, spec := range cfg.Hosts {
		h, err := r.addHost(ctx, i+1, spec)
		if h != nil {
			r.Hosts = append(r.Hosts, h) // before any error, so teardown sees it
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The workers start together and are awaited together: each takes a few
	// seconds to dial Temporal and S3.
	errs := make([]error, len(r.Hosts))
	var wg sync.WaitGroup
	for i, h := range r.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.Start(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return r
}

// unavailable skips the test, or fails it under CI, where the rig cannot work.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("rig: network namespaces are unavailable (%v); CI is set, so this fails rather than skips", err)
	}
	t.Skipf("rig: network namespaces are unavailable, skipped (needs root with ip and tc; with CI set this fails): %v", err)
}

// usable checks what can be checked without changing anything.
func usable() error {
	if os.Geteuid() != 0 {
		return errors.New("not running as root")
	}
	for _, cmd := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return fmt.Errorf("the %s command (iproute2): %w", cmd, err)
		}
	}
	return nil
}

func checkSpecs(specs []HostSpec) error {
	if len(specs) == 0 {
		return errors.New("rig: no hosts")
	}
	if len(specs) > maxHosts {
		return fmt.Errorf("rig: %d hosts, at most %d fit the rig's /24", len(specs), maxHosts)
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if !hostName.MatchString(s.Name) || s.Name == "hub" {
			return fmt.Errorf("rig: host name %q: use 1–8 of [a-z0-9], starting with a letter, not \"hub\"", s.Name)
		}
		if seen[s.Name] {
			return fmt.Errorf("rig: host name %q twice", s.Name)
		}
		seen[s.Name] = true
		if s.Roles == "" {
			return fmt.Errorf("rig: host %s has no roles", s.Name)
		}
	}
	return nil
}

// buildHub picks the rig's /24 and connects the hub to the root namespace.
// The lock keeps two rigs (of any process) from picking the same /24
// between one's look at the routes and its adding them.
func (r *Rig) buildHub(ctx context.Context) error {
	unlock, err := lockMachine(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	out, err := run(ctx, "ip", "-4", "route", "show", "table", "all")
	if err != nil {
		return err
	}
	used, err := routePrefixes(out)
	if err != nil {
		return err
	}
	if r.Subnet, err = pickSubnet(used, randomSlash24); err != nil {
		return err
	}
	r.temporalIP, r.s3IP = nth(r.Subnet, 254), nth(r.Subnet, 253)
	hubEnd, rootEnd := linkAddrs(r.Subnet, 0)
	ipn := func(args ...string) []string { return append([]string{"ip", "-n", r.Hub}, args...) }
	cmds := [][]string{
		ipn("link", "set", "lo", "up"),
		ipn("addr", "add", r.temporalIP.String()+"/32", "dev", "lo"),
		ipn("addr", "add", r.s3IP.String()+"/32", "dev", "lo"),
		// Both ends are created where they live: no name of the hub's side
		// ever appears in the root namespace.
		{"ip", "link", "add", "name", r.rootLink, "type", "veth", "peer", "name", "root", "netns", r.Hub},
		ipn("addr", "add", hubEnd.String(), "dev", "root"),
		ipn("link", "set", "root", "up"),
		{"ip", "addr", "add", rootEnd.String(), "dev", r.rootLink},
		{"ip", "link", "set", r.rootLink, "up"},
		{"ip", "route", "add", r.temporalIP.String() + "/32", "via", hubEnd.Addr().String(), "dev", r.rootLink},
		{"ip", "route", "add", r.s3IP.String() + "/32", "via", hubEnd.Addr().String(), "dev", r.rootLink},
	}
	for _, c := range cmds {
		if _, err := run(ctx, c...); err != nil {
			return fmt.Errorf("rig %s: hub: %w", r.ID, err)
		}
	}
	return nil
}

// startServers runs Temporal and versitygw inside the hub and waits until
// the test's namespace reaches both through the root veth.
func (r *Rig) startServers(ctx context.Context, tbin, vbin string) error {
	s3cfg := store.Config{Endpoint: "http://" + r.S3Addr(), Region: "us-east-1", Bucket: "roundhouse-test",
		AccessKey: "rig", SecretKey: "rig-secret"}
	r.Endpoints = connect.Endpoints{Temporal: netip.AddrPortFrom(r.temporalIP, temporalPort).String(), Namespace: "default", S3: s3cfg}
	inHub := func(args []string) []string { return append([]string{"ip", "netns", "exec", r.Hub}, args...) }
	if r.cluster {
		return r.startCluster(ctx, vbin, s3cfg, inHub)
	}

	// Temporal listens on every address of the hub, not only on its own:
	// the dev server's services dial each other at 127.0.0.1 whatever --ip
	// says, so with --ip 10.X.Y.254 the frontend answers but cannot reach
	// matching (DescribeTaskQueue, polls). The hub has only loopback and
	// the rig's veths, so nothing outside the rig reaches it either way;
	// the hosts and the test use 10.X.Y.254, which the faults match.
	//
	// One partition per task queue: DescribeTaskQueue reports the pollers
	// of the root partition only, so with the default four a worker that
	// polls another partition is missing from it, and tests ask it which
	// hosts' workers poll.
	targs := append(devstack.TemporalArgsOn(tbin, "0.0.0.0", filepath.Join(r.Dir, "temporal.db"), temporalPort, 0),
		"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
		"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1")
	tlog := filepath.Join(r.Dir, "temporal.log")
	r.serverSpecs = map[string]serverSpec{"temporal": {args: inHub(targs), log: tlog}}
	tp, err := proc.Start("temporal", inHub(targs), nil, tlog, false)
	if err != nil {
		return fmt.Errorf("rig %s: %w", r.ID, err)
	}
	r.servers = append(r.servers, tp)
	s3dir := filepath.Join(r.Dir, "s3")
	if err := os.MkdirAll(s3dir, 0o755); err != nil {
		return fmt.Errorf("rig %s: %w", r.ID, err)
	}
	slog := filepath.Join(r.Dir, "s3.log")
	r.serverSpecs["versitygw"] = serverSpec{args: inHub(devstack.VersitygwArgsOn(vbin, r.s3IP.String(), s3dir, s3Port)),
		env: devstack.VersitygwEnv(s3cfg.AccessKey, s3cfg.SecretKey), log: slog}
	sp, err := proc.Start("versitygw", r.serverSpecs["versitygw"].args, r.serverSpecs["versitygw"].env, slog, false)
	if err != nil {
		return fmt.Errorf("rig %s: %w", r.ID, err)
	}
	r.servers = append(r.servers, sp)

	if err := proc.WaitReady(ctx, sp, time.Minute, proc.HTTPCheck(s3cfg.Endpoint), slog); err != nil {
		return fmt.Errorf("rig %s: S3 in the hub: %w", r.ID, err)
	}
	if r.Store, err = store.New(ctx, s3cfg); err != nil {
		return fmt.Errorf("rig %s: %w", r.ID, err)
	}
	if err := r.Store.EnsureBucket(ctx); err != nil {
		return fmt.Errorf("rig %s: %w", r.ID, err)
	}
	if err := proc.WaitReady(ctx, tp, 2*time.Minute, r.temporalUp, tlog); err != nil {
		return fmt.Errorf("rig %s: Temporal in the hub: %w", r.ID, err)
	}
	return r.dial(ctx)
}

// dial makes the test's Temporal client.
func (r *Rig) dial(ctx context.Context) error {
	opts, err := r.Endpoints.ClientOptions()
	if err != nil {
		return fmt.Errorf("rig %s: Temporal client: %w", r.ID, err)
	}
	opts.Logger = quietLogger()
	if r.Client, err = client.DialContext(ctx, opts); err != nil {
		return fmt.Errorf("rig %s: Temporal client: %w", r.ID, err)
	}
	return nil
}

// temporalUp is a Temporal call, not a TCP connect: the frontend listens
// a while before it answers.
func (r *Rig) temporalUp(ctx context.Context) error {
	if err := proc.TCPCheck(r.Endpoints.Temporal)(ctx); err != nil {
		return err
	}
	opts, err := r.Endpoints.ClientOptions()
	if err != nil {
		return err
	}
	opts.Logger = quietLogger()
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

// server is the running process of the hub's server name, or nil.
func (r *Rig) server(name string) (int, *proc.Server) {
	for i, p := range r.servers {
		if p != nil && p.Name == name {
			return i, p
		}
	}
	return -1, nil
}

// RestartTemporal is a Temporal outage of the whole rig: the dev server is
// stopped (SIGTERM, SIGKILL after 5 s) and started again on the same
// database, so histories survive as a real cluster's would; it returns
// once the frontend answers again, 2 minutes at most. down is how long it
// stays stopped.
func (r *Rig) RestartTemporal(ctx context.Context, down time.Duration) error {
	if r.Cluster != nil {
		// Every service at once, the database left running.
		for _, s := range cluster.Services {
			if err := r.Cluster.Kill(s); err != nil {
				return fmt.Errorf("rig %s: %w", r.ID, err)
			}
		}
		select {
		case <-time.After(down):
		case <-ctx.Done():
			return ctx.Err()
		}
		for _, s := range cluster.Services {
			if err := r.Cluster.Start(ctx, s); err != nil {
				return fmt.Errorf("rig %s: %w", r.ID, err)
			}
		}
		return r.waitTemporal(ctx)
	}
	if err := r.restart(ctx, "temporal", down); err != nil {
		return err
	}
	_, p := r.server("temporal")
	if err := proc.WaitReady(ctx, p, 2*time.Minute, r.temporalUp, r.serverSpecs["temporal"].log); err != nil {
		return fmt.Errorf("rig %s: Temporal after restart: %w", r.ID, err)
	}
	return nil
}

// StopS3 stops the S3 server: every host and the test then get
// connection errors from S3 until StartS3. Its data stays.
func (r *Rig) StopS3() {
	r.serverMu.Lock()
	defer r.serverMu.Unlock()
	if i, p := r.server("versitygw"); p != nil {
		p.Stop(5 * time.Second)
		r.servers[i] = nil
	}
}

// StartS3 starts the S3 server again on the same data after StopS3 and
// waits until it answers, a minute at most.
func (r *Rig) StartS3(ctx context.Context) error {
	if err := r.restart(ctx, "versitygw", 0); err != nil {
		return err
	}
	_, p := r.server("versitygw")
	if err := proc.WaitReady(ctx, p, time.Minute, proc.HTTPCheck(r.Endpoints.S3.Endpoint), r.serverSpecs["versitygw"].log); err != nil {
		return fmt.Errorf("rig %s: S3 after restart: %w", r.ID, err)
	}
	return nil
}

// restart stops server name if it runs, waits down, and starts it again
// with the arguments it was first started with.
func (r *Rig) restart(ctx context.Context, name string, down time.Duration) error {
	r.serverMu.Lock()
	defer r.serverMu.Unlock()
	spec, ok := r.serverSpecs[name]
	if !ok {
		return fmt.Errorf("rig %s: no server %s", r.ID, name)
	}
	i, p := r.server(name)
	if p != nil {
		p.Stop(5 * time.Second)
	}
	select {
	case <-time.After(down):
	case <-ctx.Done():
		return fmt.Errorf("rig %s: restart %s: %w", r.ID, name, ctx.Err())
	}
	np, err := proc.Start(name, spec.args, spec.env, spec.log, false)
	if err != nil {
		return fmt.Errorf("rig %s: restart: %w", r.ID, err)
	}
	if i >= 0 {
		r.servers[i] = np
	} else {
		r.servers = append(r.servers, np)
	}
	return nil
}

// addHost makes host k's namespace, its veth to the hub and its work
// directory. A non-nil host comes back even with an error, for teardown.
func (r *Rig) addHost(ctx context.Context, k int, spec HostSpec) (*Host, error) {
	hubEnd, hostEnd := linkAddrs(r.Subnet, k)
	h := &Host{Name: spec.Name, Netns: r.ID + "-" + spec.Name, Addr: hostEnd.Addr(), spec: spec, rig: r,
		hubDev: "h-" + spec.Name}
	dir := filepath.Join(r.Dir, spec.Name)
	h.WorkDir = filepath.Join(dir, "work")
	h.Log = filepath.Join(dir, "worker.log")
	if err := os.MkdirAll(h.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("rig host %s: %w", spec.Name, err)
	}
	if _, err := run(ctx, "ip", "netns", "add", h.Netns); err != nil {
		return nil, fmt.Errorf("rig host %s: %w", spec.Name, err)
	}
	h.made = true
	ipn := func(ns string, args ...string) []string { return append([]string{"ip", "-n", ns}, args...) }
	cmds := [][]string{
		ipn(h.Netns, "link", "set", "lo", "up"), // the worker's proxy and services listen on loopback
		ipn(r.Hub, "link", "add", "name", h.hubDev, "type", "veth", "peer", "name", hostDev, "netns", h.Netns),
		ipn(r.Hub, "addr", "add", hubEnd.String(), "dev", h.hubDev),
		ipn(r.Hub, "link", "set", h.hubDev, "up"),
		ipn(h.Netns, "addr", "add", hostEnd.String(), "dev", hostDev),
		ipn(h.Netns, "link", "set", hostDev, "up"),
		ipn(h.Netns, "route", "add", r.temporalIP.String()+"/32", "via", hubEnd.Addr().String()),
		ipn(h.Netns, "route", "add", r.s3IP.String()+"/32", "via", hubEnd.Addr().String()),
	}
	for _, c := range cmds {
		if _, err := run(ctx, c...); err != nil {
			return h, fmt.Errorf("rig host %s: %w", spec.Name, err)
		}
	}
	if spec.DiskBytes > 0 {
		opts := "size=" + strconv.FormatInt(spec.DiskBytes, 10) + ",mode=0755"
		if err := syscall.Mount("tmpfs", h.WorkDir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
			return h, fmt.Errorf("rig host %s: mount a tmpfs of %d bytes on %s: %w", spec.Name, spec.DiskBytes, h.WorkDir, err)
		}
		h.mounted = true
	}
	return h, nil
}

// teardown undoes New in reverse, step by step, whatever got built; every
// step is bounded. It returns what it could not undo.
func (r *Rig) teardown() []error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	for _, h := range r.Hosts {
		if h.made {
			if err := h.Kill(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if r.Client != nil {
		r.Client.Close()
	}
	r.serverMu.Lock()
	for i := len(r.servers) - 1; i >= 0; i-- {
		r.servers[i].Stop(5 * time.Second) // nil (stopped by StopS3) is fine
	}
	r.serverMu.Unlock()
	if r.Cluster != nil {
		r.Cluster.Down()
		if err := r.Cluster.Purge(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, h := range r.Hosts {
		if h.mounted {
			if err := syscall.Unmount(h.WorkDir, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", h.WorkDir, err))
			}
		}
		if h.made {
			if err := deleteNamespace(ctx, h.Netns); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Deleting the hub deletes its veths and so their root-side ends.
	if err := deleteNamespace(ctx, r.Hub); err != nil {
		errs = append(errs, err)
	}
	// The kernel dismantles a deleted namespace in the background: give
	// the root-side veth a few seconds to go with it before deleting it.
	for i := 0; ; i++ {
		if _, err := net.InterfaceByName(r.rootLink); err != nil {
			break
		}
		if i == 50 {
			if out, err := run(ctx, "ip", "link", "del", r.rootLink); err != nil && !strings.Contains(out, "Cannot find device") {
				errs = append(errs, err)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	liveMu.Lock()
	delete(liveIDs, r.ID)
	liveMu.Unlock()
	return errs
}
