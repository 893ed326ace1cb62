package proc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A server that exits before its check passes fails WaitReady at once,
// naming its log, instead of waiting out the timeout.
func TestWaitReadyNoticesExit(t *testing.T) {
	log := filepath.Join(t.TempDir(), "srv.log")
	p, err := Start("srv", []string{"sh", "-c", "echo broken config; exit 2"}, nil, log, false)
	if err != nil {
		t.Fatal(err)
	}
	never := func(context.Context) error { return os.ErrNotExist }
	err = WaitReady(context.Background(), p, time.Hour, never, log)
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), log) {
		t.Fatalf("WaitReady = %v, want an early exit naming %s", err, log)
	}
	if b, _ := os.ReadFile(log); !strings.Contains(string(b), "broken config") {
		t.Errorf("log = %q", b)
	}
}

// Stop ends the server's whole process group: a child it started does not
// survive it.
func TestStopEndsChildren(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "child-survived")
	ready := filepath.Join(dir, "ready")
	p, err := Start("srv", []string{"sh", "-c", "(sleep 1; touch " + marker + ") & touch " + ready + "; sleep 30"}, []string{"X=1"}, filepath.Join(dir, "log"), false)
	if err != nil {
		t.Fatal(err)
	}
	fileCheck := func(context.Context) error { _, err := os.Stat(ready); return err }
	if err := WaitReady(context.Background(), p, time.Minute, fileCheck, "log"); err != nil {
		t.Fatal(err)
	}
	p.Stop(5 * time.Second)
	if done, _ := p.Exited(); !done {
		t.Fatal("server still running after Stop")
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the server's child outlived Stop")
	}
}
