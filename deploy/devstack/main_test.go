package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testConfig = "../../harnesses/minimal/harness.yaml"

// The demo's check follows the harness's python var, including an override
// among the demo's flags, and names the fix for that interpreter.
func TestDemoStopsOnTrainerPythonWithoutTorch(t *testing.T) {
	py := filepath.Join(t.TempDir(), "python3")
	script := "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	err := ensure(context.Background(), "demo", []string{"--config", testConfig, "--rounds", "1", "--replace", "--var", "python=" + py})
	if err == nil {
		t.Fatal("a trainer python without torch passed the demo's check")
	}
	for _, want := range []string{py + " with torch, numpy and PIL", "No module named 'torch'", py + " -m pip install torch numpy pillow"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestNeeds(t *testing.T) {
	demo, err := needs("demo", []string{"--config=" + testConfig})
	if err != nil {
		t.Fatal(err)
	}
	if len(demo) != 1 || demo[0].Name != "Python at /usr/bin/python3 with torch, numpy and PIL" {
		t.Errorf("demo needs %+v", demo)
	}
	all, err := needs("test", []string{"--config", testConfig})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range all {
		names = append(names, n.Name)
	}
	want := "Python at /usr/bin/python3 with torch, numpy and PIL, node, npm, chromium"
	if os.Geteuid() == 0 {
		// As root the production-shaped Temporal's tests run too.
		want += ", PostgreSQL's server (/usr/lib/postgresql/*/bin/postgres)"
	}
	if got := strings.Join(names, ", "); got != want {
		t.Errorf("test needs %s, want %s", got, want)
	}
	if _, err := needs("demo", []string{"--config", "no/such/harness.yaml"}); err == nil || !strings.Contains(err.Error(), "no/such/harness.yaml") {
		t.Errorf("a missing harness file: %v", err)
	}
}
