// Package proc runs and supervises every subprocess Roundhouse starts: an
// argument list (no shell), its own process group so a stop, timeout or
// cancel reaches its children too, and output to a log file. Run is a
// process waited for (an episode, the trainer), with a heartbeat while it
// runs; Start is a server kept running (a harness service, the model
// server, a dev-stack server) with WaitReady and its readiness checks.
package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
)

// Spec describes one run.
type Spec struct {
	// Name labels the run in its span ("episode", "trainer"); default: the
	// program's base name.
	Name    string
	Args    []string
	Env     map[string]string
	Dir     string
	Log     string        // file receiving stdout and stderr
	Timeout time.Duration // 0: no limit beyond ctx
	// Beat is called every BeatEvery while the process runs (e.g. activity.RecordHeartbeat).
	Beat      func()
	BeatEvery time.Duration
}

// Result says how the process ended.
type Result struct {
	ExitCode int
	TimedOut bool
	Duration time.Duration
}

// Run starts the process and waits for it. A non-zero exit is reported in
// Result, not as an error; errors mean it could not run or was cancelled.
// Each run is a span "proc.run" with the program, exit code and duration.
func Run(ctx context.Context, s Spec) (res Result, err error) {
	if len(s.Args) == 0 {
		return res, errors.New("empty command")
	}
	name := s.Name
	if name == "" {
		name = filepath.Base(s.Args[0])
	}
	ctx, span := instr.Tracer.Start(ctx, "proc.run", trace.WithAttributes(
		attribute.String("proc.name", name), attribute.String("process.command", s.Args[0])))
	defer func() {
		span.SetAttributes(attribute.Int("process.exit.code", res.ExitCode), attribute.Bool("proc.timed_out", res.TimedOut),
			attribute.Float64("proc.duration_s", res.Duration.Seconds()))
		instr.End(span, err)
	}()
	if err := os.MkdirAll(filepath.Dir(s.Log), 0o755); err != nil {
		return res, fmt.Errorf("log dir for %s: %w", s.Args[0], err)
	}
	lf, err := os.Create(s.Log)
	if err != nil {
		return res, fmt.Errorf("log for %s: %w", s.Args[0], err)
	}
	defer lf.Close()
	cmd := exec.Command(s.Args[0], s.Args[1:]...)
	cmd.Dir = s.Dir
	cmd.Env = os.Environ()
	for k, v := range s.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// The span's context as TRACEPARENT (the environment carrier of W3C
	// trace context): a traced harness can continue the trace.
	if sc := span.SpanContext(); sc.IsValid() {
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		for k, v := range carrier {
			cmd.Env = append(cmd.Env, strings.ToUpper(k)+"="+v)
		}
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	// Own process group: killing -pid reaches grandchildren (torchrun ranks,
	// services an episode spawned). Pdeathsig: a dead worker leaves no orphan.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start %s: %w", s.Args[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timeout <-chan time.Time
	if s.Timeout > 0 {
		t := time.NewTimer(s.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	every := s.BeatEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	kill := func() error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return <-done
	}
	for {
		select {
		case err := <-done:
			res.Duration = time.Since(start)
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				res.ExitCode = ee.ExitCode()
				return res, nil
			}
			if err != nil {
				return res, fmt.Errorf("wait %s: %w", s.Args[0], err)
			}
			return res, nil
		case <-tick.C:
			if s.Beat != nil {
				s.Beat()
			}
		case <-timeout:
			kill()
			res.Duration = time.Since(start)
			res.TimedOut = true
			res.ExitCode = -1
			return res, nil
		case <-ctx.Done():
			kill()
			res.Duration = time.Since(start)
			return res, fmt.Errorf("%s stopped: %w", s.Args[0], ctx.Err())
		}
	}
}
