package proc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExitCodeAndLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "out.log")
	res, err := Run(context.Background(), Spec{Args: []string{"sh", "-c", "echo hello $X; exit 3"}, Env: map[string]string{"X": "there"}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.TimedOut {
		t.Fatalf("result %+v, want exit 3", res)
	}
	b, _ := os.ReadFile(log)
	if strings.TrimSpace(string(b)) != "hello there" {
		t.Fatalf("log = %q", b)
	}
}

func TestTimeoutKillsChildren(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "child-survived")
	// The child sleeps then writes a marker; killing the group must stop it.
	script := "(sleep 1; touch " + marker + ") & sleep 30"
	res, err := Run(context.Background(), Spec{Args: []string{"sh", "-c", script}, Log: filepath.Join(dir, "log"), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut {
		t.Fatalf("want timeout, got %+v", res)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("child process outlived the timeout kill")
	}
}

func TestMissingBinary(t *testing.T) {
	_, err := Run(context.Background(), Spec{Args: []string{"/nonexistent/bin"}, Log: filepath.Join(t.TempDir(), "log")})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/bin") {
		t.Fatalf("want an error naming the binary, got %v", err)
	}
}

func TestLastLine(t *testing.T) {
	if got := LastLine("Traceback\n  File x\nModuleNotFoundError: no torch\n\n  \n"); got != "ModuleNotFoundError: no torch" {
		t.Errorf("LastLine = %q", got)
	}
	if got := LastLine("\n \n"); got != "" {
		t.Errorf("LastLine of nothing = %q", got)
	}
}
