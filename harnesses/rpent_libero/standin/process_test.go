package standin

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/outcome"
	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestMain(m *testing.M) {
	code := m.Run()
	itest.Cleanup()
	os.Exit(code)
}

// standinBinaries builds rpent and rpc-service once per test binary.
func standinBinaries(t *testing.T) string {
	return itest.Build(t, "./harnesses/rpent_libero/standin/cmd/...")
}

// alive says whether pid runs (a zombie has exited: it only awaits reaping).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func readPIDs(t *testing.T, dir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "pids.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, p)
	}
	return pids
}

func waitDead(pids []int, within time.Duration) []int {
	deadline := time.Now().Add(within)
	for {
		var live []int
		for _, p := range pids {
			if alive(p) {
				live = append(live, p)
			}
		}
		if len(live) == 0 || time.Now().After(deadline) {
			return live
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func rpentArgs(base, out string, task int) []string {
	return []string{"--robot", "libero", "--libero-type", "pro", "--suite", "libero_object_swap", "--task", strconv.Itoa(task),
		"--seed", "12", "--planner", "api", "--model", "openai-chat:toy", "--base-url", base, "--max-turns", "8",
		"--output-dir", out}
}

// Without endpoints rpent spawns env, VLA and SAM3 itself, as RPent does,
// and stops them when the episode ends.
func TestSpawnedServicesEndWithTheEpisode(t *testing.T) {
	bins := standinBinaries(t)
	model, _ := toyModel(t)
	out := t.TempDir()
	res, err := proc.Run(context.Background(), proc.Spec{Args: append([]string{filepath.Join(bins, "rpent")}, rpentArgs(model.URL+"/v1", out, 1)...),
		Env: map[string]string{"OPENAI_API_KEY": "EMPTY"}, Log: filepath.Join(out, "episode.log"), Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 || res.TimedOut {
		b, _ := os.ReadFile(filepath.Join(out, "episode.log"))
		t.Fatalf("rpent: %+v %v\n%s", res, err, b)
	}
	pids := readPIDs(t, out)
	if len(pids) != 4 {
		t.Fatalf("pids.txt lists %v, want rpent and 3 spawned services", pids)
	}
	if live := waitDead(pids, 5*time.Second); len(live) > 0 {
		t.Fatalf("processes %v outlived the episode", live)
	}
	log, _ := os.ReadFile(filepath.Join(out, "run.log"))
	for _, want := range []string{"[env] " + ReadyLine, "[vla] " + ReadyLine, "[sam3] " + ReadyLine, "episode done"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("run.log lacks %q", want)
		}
	}
	if r := outcome.Decide(rpentSpec, out, outcome.Exit{}); !r.Valid {
		t.Errorf("outcome %+v", r)
	}
}

// A hanging rpent is killed with its process group on timeout; killing
// rpent alone would leave its services running, so the group kill matters.
func TestHangingEpisodeIsKilledWithItsGroup(t *testing.T) {
	bins := standinBinaries(t)
	model, _ := toyModel(t)
	env := map[string]string{"OPENAI_API_KEY": "EMPTY", "RPENT_STANDIN_HANG_TASKS": "0,3", "RPENT_STANDIN_HANG_FOR": "2m"}

	// First: SIGKILL to rpent alone leaves its children.
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(bins, "rpent"), rpentArgs(model.URL+"/v1", out, 3)...)
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=EMPTY", "RPENT_STANDIN_HANG_TASKS=0,3", "RPENT_STANDIN_HANG_FOR=2m")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	waitFor(t, filepath.Join(out, "run.log"), "hanging for")
	pids := readPIDs(t, out)
	cmd.Process.Kill()
	cmd.Wait()
	time.Sleep(300 * time.Millisecond)
	for _, p := range pids[1:] {
		if !alive(p) {
			t.Fatalf("child %d died with rpent alone: the group-kill check below would prove nothing", p)
		}
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	// Then: Roundhouse's runner kills the whole group on timeout.
	out = t.TempDir()
	res, err := proc.Run(context.Background(), proc.Spec{Args: append([]string{filepath.Join(bins, "rpent")}, rpentArgs(model.URL+"/v1", out, 0)...),
		Env: env, Log: filepath.Join(out, "episode.log"), Timeout: 2 * time.Second})
	if err != nil || !res.TimedOut {
		t.Fatalf("want a timeout, got %+v %v", res, err)
	}
	pids = readPIDs(t, out)
	if len(pids) != 4 {
		t.Fatalf("pids %v", pids)
	}
	if live := waitDead(pids, 3*time.Second); len(live) > 0 {
		t.Fatalf("processes %v survived the timeout", live)
	}
	// A planner that hangs while everything else is healthy ran out of time:
	// its own failure. With a service down it is the service's.
	if r := outcome.Decide(rpentSpec, out, outcome.Exit{Code: res.ExitCode, TimedOut: true}); !r.Valid || r.FailureClass != schemas.FailureTask {
		t.Fatalf("outcome %+v", r)
	}
	if r := outcome.Decide(rpentSpec, out, outcome.Exit{Code: res.ExitCode, TimedOut: true, Health: outcome.Health{ServicesDown: []string{"sam3"}}}); r.Valid || r.FailureClass != schemas.FailureInfra {
		t.Fatalf("outcome with a service down %+v", r)
	}
}

func waitFor(t *testing.T, path, text string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), text) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(path)
	t.Fatalf("%s never said %q:\n%s", path, text, b)
}

// startService runs rpc-service and returns its first stdout lines as they come.
func startService(t *testing.T, env []string, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(standinBinaries(t), "rpc-service"), args...)
	cmd.Env = append(os.Environ(), env...)
	pr, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, lines
}

func readyURL(t *testing.T, lines <-chan string, within time.Duration) (string, []string) {
	t.Helper()
	var seen []string
	timeout := time.After(within)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return "", seen
			}
			seen = append(seen, l)
			if u, ok := strings.CutPrefix(l, ReadyLine); ok {
				return u, seen
			}
		case <-timeout:
			return "", seen
		}
	}
}

func healthz(url string) (int, string) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Post(url+"/call", "application/json", strings.NewReader(`{"method":"healthz"}`))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRPCServiceReadinessAndFailures(t *testing.T) {
	// Ready: the line names the address, healthz answers {"ok":true,…}.
	_, lines := startService(t, nil, "--component", "vla", "--embodiment", "libero", "--cuda-device", "0", "--transport", "http", "--host", "127.0.0.1", "--port", "0")
	url, seen := readyURL(t, lines, 10*time.Second)
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("no ready line: %q", seen)
	}
	if code, body := healthz(url); code != 200 || !strings.Contains(body, `"ok":true`) {
		t.Fatalf("healthz: %d %s", code, body)
	}

	// Fails to start: exits non-zero with the cause, before any ready line.
	for name, env := range map[string][]string{
		"fail-start exit":    {"RPC_STANDIN_FAIL_START=exit"},
		"missing checkpoint": {"SAM3_CHECKPOINT_PATH=/nonexistent/sam3.pt"},
	} {
		cmd, lines := startService(t, env, "--component", "sam3", "--port", "0")
		if u, seen := readyURL(t, lines, 10*time.Second); u != "" || !strings.Contains(strings.Join(seen, "\n"), "rpc-service:") {
			t.Errorf("%s: ready at %q, output %q", name, u, seen)
		}
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("%s: exit %v, want 1", name, err)
		}
	}

	// Never ready: keeps running, prints no ready line, healthz says 503.
	port := itest.Port(t)
	cmd, lines := startService(t, []string{"RPC_STANDIN_FAIL_START=never-ready"}, "--component", "sam3", "--port", strconv.Itoa(port))
	if u, _ := readyURL(t, lines, time.Second); u != "" {
		t.Fatalf("never-ready printed a ready line %q", u)
	}
	if done := cmd.ProcessState; done != nil {
		t.Fatal("never-ready exited")
	}
	if code, body := healthz("http://127.0.0.1:" + strconv.Itoa(port)); code != http.StatusServiceUnavailable || !strings.Contains(body, `"ok":false`) {
		t.Fatalf("never-ready healthz: %d %s", code, body)
	}
}
