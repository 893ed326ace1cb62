// Package itest starts the real servers for integration tests: a headless
// Temporal dev server and versitygw, each on free ports with data in the
// test's temp dir, plus this repository's binaries built once per test binary.
package itest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/ports"
	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/cluster"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/devstack"
)

// Stack is a running Temporal + S3 pair.
type Stack struct {
	Endpoints connect.Endpoints
	Store     *store.Store
	Dir       string
	UI        string // the Temporal UI's base URL (StartWithUI only)
}

// Env returns the environment a worker or starter process needs for the stack.
func (s Stack) Env() []string { return s.Endpoints.Env() }

// Start brings up the servers and stops them when the test ends. Missing
// tools fail the test with the command that builds them.
func Start(t testing.TB) Stack {
	t.Helper()
	return start(t, false)
}

// Slow skips a test under -short: integration tests that take more than
// about 15 seconds (a kill and recovery, a stop and resume, a timeout that
// must run out) stay out of `go tool task test:short`, the inner loop.
func Slow(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow integration test: runs in `go tool task test`, not under -short")
	}
}

// StartWithUI is Start with the Temporal UI served on a free port.
func StartWithUI(t testing.TB) Stack {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, withUI bool) Stack {
	t.Helper()
	dir := t.TempDir()
	tbin, err := devstack.TemporalTool.Find()
	if err != nil {
		t.Fatal(err)
	}
	vbin, err := devstack.VersitygwTool.Find()
	if err != nil {
		t.Fatal(err)
	}
	taddr, ui := startTemporal(t, tbin, dir, withUI)
	cfg, st := startS3(t, vbin, dir)
	return Stack{Endpoints: connect.Endpoints{Temporal: taddr, Namespace: "default", S3: cfg}, Store: st, Dir: dir, UI: ui}
}

// StartCluster is Start with the production-shaped Temporal of
// internal/testkit/cluster (PostgreSQL, four services, mTLS) in place of
// the dev server, on free ports, in a new namespace: as root, with
// Debian's PostgreSQL and the cluster's tools (built when missing). The
// cluster is the test's to fault (Kill, Start).
func StartCluster(t testing.TB, namespace string) (Stack, *cluster.Cluster) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the production-shaped cluster runs PostgreSQL as its own user: run as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute) // a cold build of the tools included
	defer cancel()
	dir := t.TempDir()
	vbin, err := devstack.VersitygwTool.Find()
	if err != nil {
		t.Fatal(err)
	}
	cp := cluster.Ports{GRPC: map[string]int{}, Membership: map[string]int{}, HTTP: Port(t), Postgres: Port(t), UI: Port(t)}
	for _, s := range cluster.Services {
		cp.GRPC[s] = Port(t)
		// PostgreSQL keeps membership ports in a smallint.
		l, err := ports.AllocateBelow(cluster.MaxMembershipPort + 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Release)
		cp.Membership[s] = l.Port
	}
	log, err := os.Create(filepath.Join(dir, "cluster-up.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	c, err := cluster.Up(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), IP: "127.0.0.1", Ports: cp, Namespace: namespace,
		DynamicConfig: filepath.Join(Root(t), cluster.DynamicConfigFile), Log: log})
	if err != nil {
		t.Fatalf("production-shaped cluster: %v", err)
	}
	t.Cleanup(func() {
		c.Down()
		c.Purge()
	})
	cfg, st := startS3(t, vbin, dir)
	e := c.Endpoints()
	e.S3 = cfg
	return Stack{Endpoints: e, Store: st, Dir: dir}, c
}

// startS3 starts versitygw on a free port with its bucket.
func startS3(t testing.TB, vbin, dir string) (store.Config, *store.Store) {
	t.Helper()
	ctx := context.Background()
	sport := Port(t)
	cfg := store.Config{Endpoint: "http://127.0.0.1:" + strconv.Itoa(sport), Region: "us-east-1", Bucket: "roundhouse-test",
		AccessKey: "itest", SecretKey: "itest-secret"}
	slog := filepath.Join(dir, "s3.log")
	if err := os.MkdirAll(filepath.Join(dir, "s3"), 0o755); err != nil {
		t.Fatal(err)
	}
	sp, err := proc.Start("versitygw", devstack.VersitygwArgs(vbin, filepath.Join(dir, "s3"), sport), devstack.VersitygwEnv(cfg.AccessKey, cfg.SecretKey), slog, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Stop(5 * time.Second) })
	if err := proc.WaitReady(ctx, sp, time.Minute, proc.HTTPCheck(cfg.Endpoint), slog); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	return cfg, st
}

// startTemporal starts the dev server on leased ports and waits until it
// answers (and its UI, when asked for). The dev server also opens ports of
// its own choosing, which can meet another test package's server; such a
// start is retried on other ports, twice at most.
func startTemporal(t testing.TB, bin, dir string, withUI bool) (addr, ui string) {
	t.Helper()
	ctx := context.Background()
	quiet := quietLogger()
	var last error
	for try := 1; try <= 3; try++ {
		tport := Port(t)
		uport := 0 // headless
		if withUI {
			uport = Port(t)
		}
		log := filepath.Join(dir, fmt.Sprintf("temporal-%d.log", try))
		p, err := proc.Start("temporal", devstack.TemporalArgs(bin, filepath.Join(dir, fmt.Sprintf("temporal-%d.db", try)), tport, uport), nil, log, false)
		if err != nil {
			t.Fatal(err)
		}
		addr = "127.0.0.1:" + strconv.Itoa(tport)
		// A Temporal health check, not a bare TCP connect: another process
		// that grabbed the port would pass the latter.
		up := func(ctx context.Context) error {
			if err := proc.TCPCheck(addr)(ctx); err != nil {
				return err // not listening yet: no need to dial
			}
			c, err := client.DialContext(ctx, client.Options{HostPort: addr, Logger: quiet})
			if err != nil {
				return err
			}
			c.Close()
			return nil
		}
		last = proc.WaitReady(ctx, p, 2*time.Minute, up, log)
		if last == nil && withUI {
			ui = "http://127.0.0.1:" + strconv.Itoa(uport)
			last = proc.WaitReady(ctx, p, time.Minute, proc.HTTPCheck(ui+"/"), log)
		}
		if last == nil {
			t.Cleanup(func() { p.Stop(5 * time.Second) })
			return addr, ui
		}
		p.Stop(5 * time.Second)
		t.Logf("temporal dev server, try %d: %v; retrying on other ports", try, last)
	}
	t.Fatal(last)
	return "", ""
}

// Port leases a loopback port from the machine's port locks for the rest of
// the test, as workers lease their services' ports: no other Roundhouse
// process (another test package's servers, a worker's services) is given
// it meanwhile.
func Port(t testing.TB) int {
	t.Helper()
	l, err := ports.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Release)
	return l.Port
}

func quietLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// Root is the repository root (the directory holding go.mod).
func Root(t testing.TB) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

var (
	buildMu sync.Mutex
	built   = map[string]string{} // package list → directory
)

// Build builds the packages (paths relative to the repository root) once per
// test binary into a temporary directory and returns it. Call Cleanup from
// TestMain to remove the directories.
func Build(t testing.TB, pkgs ...string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := strings.Join(pkgs, " ")
	if dir, ok := built[key]; ok {
		return dir
	}
	dir, err := os.MkdirTemp("", "roundhouse-bin-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	cmd.Dir = Root(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("go build %s: %v\n%s", key, err, out)
	}
	built[key] = dir
	return dir
}

// Cleanup removes what Build built.
func Cleanup() {
	buildMu.Lock()
	defer buildMu.Unlock()
	for key, dir := range built {
		os.RemoveAll(dir)
		delete(built, key)
	}
}

// Binaries builds the worker, the starter and the minimal harness programs.
func Binaries(t testing.TB) string {
	return Build(t, "./workers/worker", "./starter", "./harnesses/minimal/cmd/...")
}

// Starter is the starter binary of bins, run against the stack from a
// folder of its own (a STOP file or relative path of one test never meets
// another's); ctx bounds it.
func (s Stack) Starter(ctx context.Context, t testing.TB, bins string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(bins, "starter"), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), s.Env()...)
	return cmd
}

// StartWorker runs the worker binary of bins against the stack as a
// separate process (tests kill -9 it like a crashed host), logging to
// <stack dir>/worker-<name>.log; extra flags follow the defaults, so a
// later --slots wins. One workdir per stack: a restarted worker finds the
// dead one's spool, as on one host.
func (s Stack) StartWorker(t testing.TB, bins, name string, extra ...string) *exec.Cmd {
	t.Helper()
	return s.StartWorkerEnv(t, bins, name, nil, extra...)
}

// StartWorkerEnv is StartWorker with env added last (so it wins), e.g. a
// Temporal address behind a Relay, or a knob for the episodes it runs.
func (s Stack) StartWorkerEnv(t testing.TB, bins, name string, env []string, extra ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"--workdir", filepath.Join(s.Dir, "work"), "--slots", "4"}, extra...)
	cmd := exec.Command(filepath.Join(bins, "worker"), args...)
	cmd.Dir = Root(t)
	cmd.Env = append(append(os.Environ(), s.Env()...), env...)
	logf, err := os.Create(filepath.Join(s.Dir, "worker-"+name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	return cmd
}
