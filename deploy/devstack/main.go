// Command devstack brings up Roundhouse's embedded default on one machine:
// a real Temporal dev server (UI included, history kept in a database file),
// a real S3 server (versitygw on a local folder) and the workers. It leaves
// them running for the Temporal UI; `down` stops them.
//
//	devstack tools | prereqs demo|test|cluster | up | down | demo
//	devstack cluster up | demo | down
//
// `cluster` runs the same with a production-shaped Temporal instead of the
// dev server (internal/testkit/cluster; as root): PostgreSQL, the four
// services as separate processes, mTLS, the UI server.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/cluster"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/devstack"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/prereq"
)

// Fixed dev ports; override with the environment of the same names.
var (
	temporalPort = envInt("ROUNDHOUSE_TEMPORAL_PORT", 7233)
	uiPort       = envInt("ROUNDHOUSE_UI_PORT", 8233)
	s3Port       = envInt("ROUNDHOUSE_S3_PORT", 9100)
	stateDir     = ".dev" // git-ignored: database, S3 data, logs, pid files
	binDir       = ".bin" // git-ignored: this repo's binaries
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: devstack tools [cluster]|prereqs demo|test|cluster|up|down|demo [starter train flags...]|cluster up|demo|down")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "tools":
		if len(os.Args) == 3 && os.Args[2] == "cluster" {
			err = clusterTools(ctx)
		} else {
			err = tools(ctx)
		}
	case "prereqs":
		if len(os.Args) != 3 || (os.Args[2] != "demo" && os.Args[2] != "test" && os.Args[2] != "cluster") {
			err = errors.New("usage: devstack prereqs demo|test|cluster")
			break
		}
		err = ensure(ctx, os.Args[2], nil)
	case "up":
		if err = ensure(ctx, "demo", nil); err == nil {
			err = up(ctx)
		}
	case "down":
		err = down()
	case "cluster":
		err = clusterCmd(ctx, os.Args[2:])
	case "demo":
		// Everything is checked before anything is built or started.
		if err = ensure(ctx, "demo", os.Args[2:]); err == nil {
			if err = up(ctx); err == nil {
				err = demo(ctx, os.Args[2:])
			}
		}
	default:
		err = fmt.Errorf("unknown command %q: use tools, prereqs, up, down or demo", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

func tools(ctx context.Context) error {
	return ensureTools(ctx, devstack.TemporalTool, devstack.VersitygwTool)
}

// ensureTools builds the tools that are missing and says where each is.
func ensureTools(ctx context.Context, ts ...devstack.Tool) error {
	for _, t := range ts {
		p, err := t.Ensure(ctx, os.Stderr)
		if err != nil {
			return err
		}
		fmt.Printf("%s %s: %s\n", t.Name, t.Version, p)
	}
	return nil
}

// clusterTools builds what the tests need beyond tools when they can run
// the production-shaped Temporal (as root, PostgreSQL installed): its
// server, schema tool and UI server. Elsewhere they would only skip.
func clusterTools(ctx context.Context) error {
	if err := tools(ctx); err != nil {
		return err
	}
	if _, err := cluster.PostgresBin(); os.Geteuid() != 0 || err != nil {
		fmt.Println("the production-shaped Temporal's tests skip here (they need root and PostgreSQL): its server is not built")
		return nil
	}
	return ensureTools(ctx, devstack.ClusterTools...)
}

// demoConfig is the harness `go tool task demo` trains on.
const demoConfig = "harnesses/minimal/harness.yaml"

// needs lists what a command needs from the machine beyond Go. The demo
// needs the Python its harness's trainer runs (the harness file's python
// var, or --var python=… among the demo's extra flags); the test suite
// also needs Node.js with npm (the official openai client against the
// proxy) and Chromium (the Temporal UI check).
func needs(what string, extra []string) ([]prereq.Need, error) {
	python, err := trainerPython(extra)
	if err != nil {
		return nil, err
	}
	ns := []prereq.Need{prereq.Python(python, "the minimal harness's trainer", "torch", "numpy", "PIL")}
	if what == "test" {
		ns = append(ns,
			prereq.Command("node", "the proxy's client tests", "nodejs"),
			prereq.Command("npm", "the proxy's client tests", "npm"),
			prereq.Command("chromium", "the Temporal UI check", "chromium"))
		// The production-shaped Temporal's tests (they run as root, as
		// the drill's do).
		if os.Geteuid() == 0 {
			ns = append(ns, clusterNeeds()...)
		}
	}
	return ns, nil
}

// trainerPython is the program the demo harness's trainer command runs,
// after the --config and --var flags among extra (starter train's flags;
// the others are the starter's business and skipped).
func trainerPython(extra []string) (string, error) {
	fs := pflag.NewFlagSet("demo", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	config := fs.String("config", demoConfig, "")
	vars := fs.StringArray("var", nil, "")
	if err := fs.Parse(extra); err != nil {
		return "", fmt.Errorf("demo flags %q: %w", strings.Join(extra, " "), err)
	}
	overrides, err := harness.ParseVars(*vars)
	if err != nil {
		return "", err
	}
	h, err := harness.Load(*config, overrides)
	if err != nil {
		return "", fmt.Errorf("harness %s: %w", *config, err)
	}
	if len(h.Trainer.Command) == 0 {
		return "", fmt.Errorf("harness %s has no trainer command", *config)
	}
	return h.Trainer.Command[0], nil
}

// ensure checks what `what` needs; as root (unless ROUNDHOUSE_NO_INSTALL is
// set) it installs the missing Debian packages the way .ci/run does.
func ensure(ctx context.Context, what string, extra []string) error {
	cl := what == "cluster"
	if cl {
		what = "demo"
	}
	ns, err := needs(what, extra)
	if err != nil {
		return err
	}
	if cl {
		ns = append(ns, clusterNeeds()...)
	}
	return prereq.Ensure(ctx, ns, prereq.Options{Install: prereq.CanInstall()})
}

// env points the worker and starter at the dev stack's servers, or at
// the production-shaped cluster's when it runs (its endpoints file).
func env() []string {
	e := connect.FromEnv()
	// The dev stack is plaintext and local: Temporal Cloud settings in the
	// developer's shell must not follow the worker here.
	e.TLS, e.APIKey, e.APIKeyFile = connect.TLS{}, "", ""
	e.Temporal = "127.0.0.1:" + strconv.Itoa(temporalPort)
	ui := "http://127.0.0.1:" + strconv.Itoa(uiPort)
	if c, ok := clusterEndpoints(); ok {
		e.Temporal, e.Namespace, e.TLS = c.Temporal, c.Namespace, c.TLS
		ui = "http://127.0.0.1:" + strconv.Itoa(cluster.DefaultPorts().UI)
	}
	e.S3.Endpoint = "http://127.0.0.1:" + strconv.Itoa(s3Port)
	return append(e.Env(), "ROUNDHOUSE_UI="+ui)
}

func up(ctx context.Context) error {
	if err := tools(ctx); err != nil {
		return err
	}
	if _, ok := clusterEndpoints(); ok {
		return errors.New("the production-shaped cluster runs (`devstack cluster down` first, or `devstack cluster up` to use it)")
	}
	abs, _ := filepath.Abs(stateDir)
	logs := filepath.Join(abs, "logs")
	temporalAddr := "127.0.0.1:" + strconv.Itoa(temporalPort)
	if proc.TCPCheck(temporalAddr)(ctx) == nil {
		fmt.Printf("Temporal already listening on %s\n", temporalAddr)
	} else {
		bin, _ := devstack.TemporalTool.Find()
		log := filepath.Join(logs, "temporal.log")
		p, err := proc.Start("temporal", devstack.TemporalArgs(bin, filepath.Join(abs, "temporal.db"), temporalPort, uiPort), nil, log, true)
		if err != nil {
			return err
		}
		writePid("temporal", p)
		if err := proc.WaitReady(ctx, p, 2*time.Minute, proc.TCPCheck(temporalAddr), log); err != nil {
			return fmt.Errorf("temporal: %w", err)
		}
		if err := proc.WaitReady(ctx, p, time.Minute, proc.HTTPCheck("http://127.0.0.1:"+strconv.Itoa(uiPort)), log); err != nil {
			return fmt.Errorf("temporal UI: %w", err)
		}
	}
	return upRest(ctx, fmt.Sprintf("%s (UI http://127.0.0.1:%d)", temporalAddr, uiPort))
}

// upRest starts S3, builds the programs and (re)starts the worker, against
// whichever Temporal env() names; temporal describes it for the summary.
func upRest(ctx context.Context, temporal string) error {
	abs, _ := filepath.Abs(stateDir)
	logs := filepath.Join(abs, "logs")
	s3url := "http://127.0.0.1:" + strconv.Itoa(s3Port)
	if proc.HTTPCheck(s3url)(ctx) == nil {
		fmt.Printf("S3 already listening on %s\n", s3url)
	} else {
		bin, _ := devstack.VersitygwTool.Find()
		data := filepath.Join(abs, "s3")
		if err := os.MkdirAll(data, 0o755); err != nil {
			return err
		}
		s := store.FromEnv()
		log := filepath.Join(logs, "s3.log")
		p, err := proc.Start("versitygw", devstack.VersitygwArgs(bin, data, s3Port), devstack.VersitygwEnv(s.AccessKey, s.SecretKey), log, true)
		if err != nil {
			return err
		}
		writePid("s3", p)
		if err := proc.WaitReady(ctx, p, time.Minute, proc.HTTPCheck(s3url), log); err != nil {
			return fmt.Errorf("versitygw: %w", err)
		}
	}
	cfg := store.FromEnv()
	cfg.Endpoint = s3url
	s, err := store.New(ctx, cfg)
	if err != nil {
		return err
	}
	if err := s.EnsureBucket(ctx); err != nil {
		return err
	}
	if err := build(ctx); err != nil {
		return err
	}
	// The worker restarts on every `up` so it always runs the code just built.
	stopPid("worker")
	wlog := filepath.Join(logs, "worker.log")
	p, err := proc.Start("worker", []string{filepath.Join(binDir, "worker"), "--workdir", filepath.Join(abs, "work")}, env(), wlog, true)
	if err != nil {
		return err
	}
	writePid("worker", p)
	time.Sleep(time.Second)
	if done, werr := p.Exited(); done {
		return fmt.Errorf("worker exited at start (%v); see %s", werr, wlog)
	}
	fmt.Printf("dev stack up:\n  Temporal  %s\n  S3        %s bucket %s (data in %s)\n  worker    pid %d, log %s\n",
		temporal, s3url, cfg.Bucket, filepath.Join(abs, "s3"), p.Cmd.Process.Pid, wlog)
	return nil
}

// build compiles the worker, the starter and the minimal harness's programs.
func build(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", binDir+"/", "./workers/worker", "./starter", "./harnesses/minimal/cmd/...")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	return nil
}

func demo(ctx context.Context, extra []string) error {
	args := []string{"train", "--config", "harnesses/minimal/harness.yaml", "--run", "demo",
		"--weights", "harnesses/minimal/weights/w0", "--rounds", "2", "--groups", "6", "--replace"}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "starter"), append(args, extra...)...)
	cmd.Env = append(os.Environ(), env()...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	fmt.Printf("\n$ starter %s\n", strings.Join(append(args, extra...), " "))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("starter train: %w", err)
	}
	ui, down := uiPort, "go tool task down"
	if _, ok := clusterEndpoints(); ok {
		ui, down = cluster.DefaultPorts().UI, "go tool task cluster:down"
	}
	fmt.Printf("\nThe stack keeps running: open http://127.0.0.1:%d to see the run; `%s` stops it.\n", ui, down)
	return nil
}

func down() error {
	for _, name := range []string{"worker", "s3", "temporal"} {
		stopPid(name)
	}
	fmt.Println("dev stack stopped (data kept in .dev/)")
	return nil
}

func pidFile(name string) string { return filepath.Join(stateDir, name+".pid") }

func writePid(name string, p *proc.Server) {
	_ = os.WriteFile(pidFile(name), []byte(strconv.Itoa(p.Cmd.Process.Pid)), 0o644)
}

// stopPid ends the process group recorded in the pid file, if alive.
func stopPid(name string) {
	b, err := os.ReadFile(pidFile(name))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	for i := 0; i < 50; i++ {
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	os.Remove(pidFile(name))
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}
