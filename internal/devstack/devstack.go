// Package devstack builds and starts the real servers Roundhouse uses on one
// machine: the Temporal CLI dev server (with its UI) and versitygw as S3.
// The demo, the integration tests and CI all start them through here.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Pinned tools, built from the Go module proxy with `go install`, each in
// its own GOBIN so their dependencies never touch this module's.
var (
	TemporalTool  = Tool{Name: "temporal", Module: "github.com/temporalio/cli/cmd/temporal", Version: "v1.5.1"}
	VersitygwTool = Tool{Name: "versitygw", Module: "github.com/versity/versitygw/cmd/versitygw", Version: "v1.8.0"}
)

// Tool is a pinned Go-installable binary.
type Tool struct{ Name, Module, Version string }

// ToolsDir is where built tools live: $ROUNDHOUSE_TOOLS, or a folder under
// the user cache dir, which survives fresh clones of the repository.
func ToolsDir() (string, error) {
	if d := os.Getenv("ROUNDHOUSE_TOOLS"); d != "" {
		return d, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache dir (set ROUNDHOUSE_TOOLS to a folder for built tools): %w", err)
	}
	return filepath.Join(c, "roundhouse", "tools"), nil
}

// Path is where the tool's binary is (or will be) installed.
func (t Tool) Path() (string, error) {
	d, err := ToolsDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, t.Name+"-"+t.Version, t.Name), nil
}

// Find returns the binary's path, or an error that says how to build it.
func (t Tool) Find() (string, error) {
	p, err := t.Path()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s %s is not built at %s: run `go tool task tools` first", t.Name, t.Version, p)
	}
	return p, nil
}

// Ensure builds the tool when it is missing. A cold build takes minutes.
func (t Tool) Ensure(ctx context.Context, log io.Writer) (string, error) {
	p, err := t.Path()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	fmt.Fprintf(log, "building %s %s into %s (first time only; several minutes)\n", t.Name, t.Version, filepath.Dir(p))
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", t.Module+"@"+t.Version)
	cmd.Env = append(os.Environ(), "GOBIN="+filepath.Dir(p), "GOFLAGS=-mod=mod", "GOWORK=off")
	cmd.Dir = os.TempDir() // outside this module, so its go.mod is not consulted
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w", t.Module, t.Version, err)
	}
	return p, nil
}

// Proc is a started server process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs a server command with its output appended to logPath. With
// detach the process gets its own session so it outlives the caller (the
// demo leaves the stack running); otherwise it dies with its process group.
func Start(name string, args, env []string, logPath string, detach bool) (*Proc, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: log %s: %w", name, logPath, err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, args[0], err)
	}
	p := &Proc{Name: name, Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// Stop ends the process (SIGTERM, then SIGKILL after grace).
func (p *Proc) Stop(grace time.Duration) {
	if p == nil || p.Cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Exited reports whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// WaitReady polls check until it succeeds, the process exits or timeout passes.
func WaitReady(ctx context.Context, p *Proc, timeout time.Duration, check func(context.Context) error, logPath string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if p != nil {
			if done, err := p.Exited(); done {
				return fmt.Errorf("%s exited before it was ready (%v); see %s", p.Name, err, logPath)
			}
		}
		c, cc := context.WithTimeout(ctx, 2*time.Second)
		last = check(c)
		cc()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s (last: %v); see %s", timeout, last, logPath)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TCPCheck succeeds when addr accepts connections.
func TCPCheck(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// HTTPCheck succeeds when url answers with any status below 500.
func HTTPCheck(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			return fmt.Errorf("%s: status %d", url, resp.StatusCode)
		}
		return nil
	}
}

// FreePort asks the kernel for a free TCP port on loopback.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// TemporalArgs is the dev server command line: a database file keeps
// history across restarts; uiPort 0 runs it headless.
func TemporalArgs(bin, dbFile string, port, uiPort int) []string {
	args := []string{bin, "server", "start-dev", "--ip", "127.0.0.1", "--port", strconv.Itoa(port),
		"--db-filename", dbFile, "--log-level", "warn"}
	if uiPort > 0 {
		args = append(args, "--ui-port", strconv.Itoa(uiPort))
	} else {
		args = append(args, "--headless")
	}
	return args
}

// VersitygwArgs serves dir over S3 on loopback; credentials come from env.
func VersitygwArgs(bin, dir string, port int) []string {
	return []string{bin, "--port", "127.0.0.1:" + strconv.Itoa(port), "posix", dir}
}

// VersitygwEnv sets the root credentials versitygw accepts.
func VersitygwEnv(access, secret string) []string {
	return []string{"ROOT_ACCESS_KEY=" + access, "ROOT_SECRET_KEY=" + secret}
}

// ErrNotRunning is returned when no pid file names a live process.
var ErrNotRunning = errors.New("not running")
