// Package prereq checks what the dev stack and the test suite need from the
// machine beyond Go, before anything starts: a run that would only fail
// minutes later (a trainer without torch, retried with back-off) stops at
// once with the command that fixes it, or, as root, installs it first.
package prereq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/proc"
)

// DebianPython is the interpreter Debian's python3-torch installs into; the
// minimal harness's trainer runs it.
const DebianPython = "/usr/bin/python3"

// Need is one thing a command needs from the machine.
type Need struct {
	Name   string   // what it is, for people
	For    string   // who needs it
	Debian []string // Debian packages that provide it; empty: apt cannot
	Fix    string   // what to run when apt cannot help (or "" for the apt line)
	Check  func(ctx context.Context) error
}

// checkTimeout bounds one check: an interpreter importing torch takes a few
// seconds on a cold cache, never minutes.
const checkTimeout = 60 * time.Second

// packages names the Debian and pip packages of a module whose names are
// not python3-<module> and <module>.
var packages = map[string]struct{ debian, pip string }{
	"PIL": {"python3-pil", "pillow"},
}

// Python needs interpreter python to import the given modules.
func Python(python, forWhom string, modules ...string) Need {
	list := strings.Join(modules, " and ")
	if len(modules) > 2 {
		list = strings.Join(modules[:len(modules)-1], ", ") + " and " + modules[len(modules)-1]
	}
	n := Need{
		Name: fmt.Sprintf("Python at %s with %s", python, list),
		For:  forWhom,
		Check: func(ctx context.Context) error {
			return importCheck(ctx, python, modules)
		},
	}
	var debian, pip []string // Debian names most Python modules python3-<module>
	for _, m := range modules {
		d, p := "python3-"+m, m
		if k, ok := packages[m]; ok {
			d, p = k.debian, k.pip
		}
		debian, pip = append(debian, d), append(pip, p)
	}
	if python == DebianPython {
		n.Debian = debian
	} else {
		// Someone else's interpreter: apt would install into the wrong one.
		n.Fix = fmt.Sprintf("%s -m pip install %s  (or use Debian's: --var python=%s after `sudo apt-get install %s`)",
			python, strings.Join(pip, " "), DebianPython, strings.Join(debian, " "))
	}
	return n
}

// Command needs a program on PATH, from the given Debian packages.
func Command(name, forWhom string, debian ...string) Need {
	return Need{
		Name:   name,
		For:    forWhom,
		Debian: debian,
		Check: func(context.Context) error {
			if _, err := exec.LookPath(name); err != nil {
				return fmt.Errorf("%s is not on PATH", name)
			}
			return nil
		},
	}
}

func importCheck(ctx context.Context, python string, modules []string) error {
	if _, err := os.Stat(python); err != nil {
		if _, lerr := exec.LookPath(python); lerr != nil {
			return fmt.Errorf("%s not found", python)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", "import "+strings.Join(modules, ", "))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s -c 'import %s' did not finish in %s", python, strings.Join(modules, ", "), checkTimeout)
		}
		if l := proc.LastLine(out.String()); l != "" {
			return errors.New(l)
		}
		return err
	}
	return nil
}

// Installer installs Debian packages; Apt is the real one.
type Installer func(ctx context.Context, out io.Writer, pkgs []string) error

// installTimeout bounds apt-get: torch is a few hundred MB.
const installTimeout = 20 * time.Minute

// Apt runs apt-get update and apt-get install, as .ci/run does.
func Apt(ctx context.Context, out io.Writer, pkgs []string) error {
	ctx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", args[0], err)
		}
		return nil
	}
	if err := run("update", "-q"); err != nil {
		return err
	}
	return run(append([]string{"install", "-y", "-q", "--no-install-recommends"}, pkgs...)...)
}

// Options say how Ensure may fix what is missing.
type Options struct {
	// Install is allowed (root with apt-get and no ROUNDHOUSE_NO_INSTALL):
	// see CanInstall.
	Install bool
	Apt     Installer // nil: Apt
	Out     io.Writer // progress lines; nil: os.Stderr
}

// CanInstall says whether this process may install Debian packages itself:
// it runs as root, apt-get exists, and ROUNDHOUSE_NO_INSTALL is not set.
func CanInstall() bool {
	if os.Getenv("ROUNDHOUSE_NO_INSTALL") != "" || os.Geteuid() != 0 {
		return false
	}
	_, err := exec.LookPath("apt-get")
	return err == nil
}

// Missing is the error Ensure returns: every need that is still unmet and
// the one command that would meet them.
type Missing struct {
	Needs  []Need
	Causes []error
}

func (m *Missing) Error() string {
	var b strings.Builder
	b.WriteString("missing prerequisites:\n")
	var apt []string
	var other []string
	for i, n := range m.Needs {
		fmt.Fprintf(&b, "  - %s (for %s): %v\n", n.Name, n.For, m.Causes[i])
		switch {
		case n.Fix != "":
			other = append(other, n.Fix)
		case len(n.Debian) > 0:
			apt = append(apt, n.Debian...)
		}
	}
	b.WriteString("fix with:\n")
	if len(apt) > 0 {
		sudo := "sudo "
		if os.Geteuid() == 0 {
			sudo = ""
		}
		fmt.Fprintf(&b, "  %sapt-get install %s\n", sudo, strings.Join(dedup(apt), " "))
	}
	for _, f := range other {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	b.WriteString("then run the same command again.")
	return b.String()
}

// Ensure checks every need; with opts.Install it installs the missing
// Debian packages in one apt-get call (saying so in one line first) and
// checks again. What is still missing comes back as *Missing.
func Ensure(ctx context.Context, needs []Need, opts Options) error {
	out := opts.Out
	if out == nil {
		out = os.Stderr
	}
	missing := check(ctx, needs)
	if missing == nil {
		return nil
	}
	var pkgs []string
	for _, n := range missing.Needs {
		if n.Fix == "" {
			pkgs = append(pkgs, n.Debian...)
		}
	}
	if !opts.Install || len(pkgs) == 0 {
		return missing
	}
	pkgs = dedup(pkgs)
	var names []string
	for _, n := range missing.Needs {
		names = append(names, n.Name)
	}
	fmt.Fprintf(out, "installing %s with apt-get (missing: %s)\n", strings.Join(pkgs, " "), strings.Join(names, "; "))
	inst := opts.Apt
	if inst == nil {
		inst = Apt
	}
	if err := inst(ctx, out, pkgs); err != nil {
		m := check(ctx, needs)
		if m == nil {
			return nil
		}
		return fmt.Errorf("installing %s: %w\n%v", strings.Join(pkgs, " "), err, m)
	}
	if m := check(ctx, needs); m != nil {
		return m
	}
	return nil
}

func check(ctx context.Context, needs []Need) *Missing {
	var m Missing
	for _, n := range needs {
		if err := n.Check(ctx); err != nil {
			m.Needs = append(m.Needs, n)
			m.Causes = append(m.Causes, err)
		}
	}
	if len(m.Needs) == 0 {
		return nil
	}
	return &m
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	var r []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			r = append(r, x)
		}
	}
	return r
}
