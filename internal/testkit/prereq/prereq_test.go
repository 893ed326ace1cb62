package prereq

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakePython writes an interpreter stand-in that fails like Python does on
// a missing module until the file marker exists.
func fakePython(t *testing.T, marker string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "python3")
	script := "#!/bin/sh\n[ -e " + marker + " ] && exit 0\n" +
		"echo 'Traceback (most recent call last):' >&2\necho '  File \"<string>\", line 1, in <module>' >&2\n" +
		"echo \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMissingNamesCauseAndFix(t *testing.T) {
	py := fakePython(t, filepath.Join(t.TempDir(), "never"))
	err := Ensure(context.Background(), []Need{Python(py, "the trainer", "torch", "numpy")}, Options{Out: io.Discard})
	var m *Missing
	if !errors.As(err, &m) {
		t.Fatalf("want *Missing, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{py + " with torch and numpy", "ModuleNotFoundError: No module named 'torch'",
		py + " -m pip install torch numpy", "the trainer"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
}

func TestDebianPythonFixIsApt(t *testing.T) {
	n := Python(DebianPython, "the trainer", "torch", "numpy", "PIL")
	n.Check = func(context.Context) error { return errors.New("No module named 'torch'") }
	msg := Ensure(context.Background(), []Need{n, Command("no-such-program-xyz", "a test", "xyz-pkg")}, Options{Out: io.Discard}).Error()
	if !strings.Contains(msg, "apt-get install python3-torch python3-numpy python3-pil xyz-pkg") || !strings.Contains(msg, "with torch, numpy and PIL") {
		t.Errorf("want one apt-get line with every package:\n%s", msg)
	}
}

func TestInstallsThenChecksAgain(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "installed")
	n := Python(DebianPython, "the trainer", "torch", "numpy")
	py := fakePython(t, marker)
	n.Check = func(ctx context.Context) error { return importCheck(ctx, py, []string{"torch", "numpy"}) }
	var got []string
	var out bytes.Buffer
	apt := func(_ context.Context, _ io.Writer, pkgs []string) error {
		got = pkgs
		return os.WriteFile(marker, nil, 0o644)
	}
	if err := Ensure(context.Background(), []Need{n, n}, Options{Install: true, Apt: apt, Out: &out}); err != nil {
		t.Fatalf("after install: %v", err)
	}
	if strings.Join(got, " ") != "python3-torch python3-numpy" {
		t.Errorf("installed %v, want python3-torch python3-numpy once each", got)
	}
	if line := out.String(); !strings.HasPrefix(line, "installing python3-torch python3-numpy with apt-get") || strings.Count(line, "\n") != 1 {
		t.Errorf("want one line saying what is installed, got %q", line)
	}
}

func TestInstallThatDoesNotHelpReportsWhatIsMissing(t *testing.T) {
	n := Python(DebianPython, "the trainer", "torch")
	n.Check = func(context.Context) error { return errors.New("No module named 'torch'") }
	apt := func(context.Context, io.Writer, []string) error { return errors.New("E: Unable to locate package") }
	err := Ensure(context.Background(), []Need{n}, Options{Install: true, Apt: apt, Out: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "Unable to locate package") || !strings.Contains(err.Error(), "apt-get install python3-torch") {
		t.Fatalf("want the apt error and the fix, got %v", err)
	}
}

func TestNoInstallForOtherInterpreters(t *testing.T) {
	py := fakePython(t, filepath.Join(t.TempDir(), "never"))
	called := false
	apt := func(context.Context, io.Writer, []string) error { called = true; return nil }
	if err := Ensure(context.Background(), []Need{Python(py, "the trainer", "torch")}, Options{Install: true, Apt: apt, Out: io.Discard}); err == nil {
		t.Fatal("a python without torch passed")
	}
	if called {
		t.Error("apt-get ran for an interpreter apt does not own")
	}
}

func TestCommand(t *testing.T) {
	if err := Command("sh", "x").Check(context.Background()); err != nil {
		t.Errorf("sh: %v", err)
	}
	if err := Command("no-such-program-xyz", "x").Check(context.Background()); err == nil {
		t.Error("a missing program passed")
	}
}

func TestCanInstallHonoursOptOut(t *testing.T) {
	t.Setenv("ROUNDHOUSE_NO_INSTALL", "1")
	if CanInstall() {
		t.Error("ROUNDHOUSE_NO_INSTALL=1 still installs")
	}
}
