package proc

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Server is a long-running process started with Start: a harness service or
// model server of a rollout host, or a server of the dev stack.
type Server struct {
	Name string
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs a server command with its output appended to logPath. With
// detach the process gets its own session so it outlives the caller (the
// demo leaves the stack running); otherwise it dies with its process group
// and with the caller.
func Start(name string, args, env []string, logPath string, detach bool) (*Server, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("start %s: empty command", name)
	}
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
	p := &Server{Name: name, Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// Stop ends the process and its group (SIGTERM, then SIGKILL after grace).
func (p *Server) Stop(grace time.Duration) {
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

// Kill ends the process and its group at once (SIGKILL, kill -9): no
// shutdown runs, as when a machine dies.
func (p *Server) Kill() {
	if p == nil || p.Cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Exited reports whether the process has ended, and how.
func (p *Server) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// WaitReady polls check until it succeeds, the process exits or timeout
// passes; errors name logPath, where the reason usually is.
func WaitReady(ctx context.Context, p *Server, timeout time.Duration, check func(context.Context) error, logPath string) error {
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

// LastLine is the last non-empty line of s, trimmed, or "": where a log
// tail or a Python traceback puts the reason something failed.
func LastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}

// LogTail returns the last n bytes of a log on one line, for error messages.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.Join(strings.Fields(string(b)), " ")
}
