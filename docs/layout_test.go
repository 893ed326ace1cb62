package docs

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// module is the import path every package of the repository starts with.
const module = "github.com/roundhouse-rl/roundhouse"

// room is one row of design §2's table of rooms: the packages it names and
// what their non-test files may import of ours.
type room struct {
	names []string // `p` names package p; `p/…` names p and every package below it
	may   []string // patterns as in names; `internal/…` leaves out internal/testkit
	line  string
}

// pkg is one package as `go list` sees it, paths relative to the module.
type pkg struct {
	path        string
	imports     []string // non-test files
	testImports []string // _test.go files, in the package and beside it
}

var backticked = regexp.MustCompile("`([^`]+)`")

// roomsTable reads the table under "### Rooms" in the design page: the rows
// whose first cell names packages in backticks.
func roomsTable(design string) ([]room, error) {
	i := strings.Index(design, "\n### Rooms\n")
	if i < 0 {
		return nil, fmt.Errorf("%s has no ### Rooms section", designPage)
	}
	sec := design[i+len("\n### Rooms\n"):]
	if j := strings.Index(sec, "\n### "); j >= 0 {
		sec = sec[:j]
	}
	var rooms []room
	for _, l := range strings.Split(sec, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		if len(cells) != 3 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`") {
			continue
		}
		r := room{line: strings.TrimSpace(l)}
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			r.names = append(r.names, m[1])
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
			r.may = append(r.may, m[1])
		}
		rooms = append(rooms, r)
	}
	if len(rooms) == 0 {
		return nil, fmt.Errorf("%s: ### Rooms has no table rows", designPage)
	}
	return rooms, nil
}

// matches reports whether pattern names package p, and how closely: the
// length of the pattern, or -1.
func matches(pattern, p string) int {
	base, all := strings.CutSuffix(pattern, "/…")
	switch {
	case p == base:
		return len(pattern)
	case all && strings.HasPrefix(p, base+"/"):
		if base == "internal" && strings.HasPrefix(p, "internal/testkit/") {
			return -1 // the production libraries only
		}
		return len(base)
	}
	return -1
}

// roomOf is the row that names p most closely, or nil.
func roomOf(rooms []room, p string) *room {
	var best *room
	bestLen := -1
	for i := range rooms {
		for _, n := range rooms[i].names {
			if l := matches(n, p); l > bestLen {
				best, bestLen = &rooms[i], l
			}
		}
	}
	return best
}

// upward are the rooms above internal/: nothing under internal/ imports
// them, tests included.
var upward = []string{"activities", "workflows", "workers", "starter", "deploy"}

// layoutProblems compares the table with the packages: every package has a
// row, every name of a row has a package, and every import of ours is one
// its row allows.
func layoutProblems(rooms []room, pkgs []pkg) []string {
	var out []string
	used := map[string]bool{}
	for _, p := range pkgs {
		r := roomOf(rooms, p.path)
		if r == nil {
			out = append(out, fmt.Sprintf("package %s has no row in design §2's table of rooms: add one", p.path))
			continue
		}
		for _, n := range r.names {
			if matches(n, p.path) >= 0 {
				used[n] = true
			}
		}
		for _, imp := range p.imports {
			if roomOf(rooms, imp) == r {
				continue
			}
			if !slices.ContainsFunc(r.may, func(m string) bool { return matches(m, imp) >= 0 }) {
				out = append(out, fmt.Sprintf("%s imports %s, which its row allows no import of (%s)", p.path, imp, strings.Join(r.may, ", ")))
			}
		}
		if strings.HasPrefix(p.path, "internal/") {
			for _, imp := range append(slices.Clone(p.imports), p.testImports...) {
				top, _, _ := strings.Cut(imp, "/")
				if slices.Contains(upward, top) {
					out = append(out, fmt.Sprintf("%s imports %s: internal/ never imports upward, in tests too", p.path, imp))
				}
			}
		}
	}
	for _, r := range rooms {
		for _, n := range r.names {
			if !used[n] {
				out = append(out, fmt.Sprintf("design §2 names %s, which is no package: %s", n, r.line))
			}
		}
	}
	return out
}

// ours keeps the imports inside the module, relative to it.
func ours(imps []string) []string {
	var out []string
	for _, i := range imps {
		if rest, ok := strings.CutPrefix(i, module+"/"); ok {
			out = append(out, rest)
		}
	}
	return out
}

// The design document's table of rooms matches `go list`: a package added,
// moved or importing what its room may not fails here.
func TestRoomsMatchGoList(t *testing.T) {
	b, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	rooms, err := roomsTable(string(b))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}|{{join .TestImports \",\"}},{{join .XTestImports \",\"}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	var pkgs []pkg
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(l, "|")
		if len(f) != 3 {
			t.Fatalf("go list line %q", l)
		}
		path, ok := strings.CutPrefix(f[0], module+"/")
		if !ok {
			t.Fatalf("package %s outside the module", f[0])
		}
		pkgs = append(pkgs, pkg{path: path, imports: ours(strings.Split(f[1], ",")), testImports: ours(strings.Split(f[2], ","))})
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: not the repository?", len(pkgs))
	}
	for _, p := range layoutProblems(rooms, pkgs) {
		t.Error(p)
	}
}

func TestLayoutProblems(t *testing.T) {
	design := "## §2\n\n### Rooms\n\n| room | holds | imports of ours |\n|---|---|---|\n" +
		"| `schemas` | shapes | — |\n" +
		"| `internal/store` | S3 | `internal/…` |\n" +
		"| `internal/testkit/rig` | rig | `internal/…`, `internal/testkit/…` |\n" +
		"| `workflows/api` | contract | `schemas`, `internal/…` |\n" +
		"| `harnesses/toy/…` | toy | `harnesses/toy/…` |\n" +
		"| `gone` | moved away | — |\n" +
		"\n### Where to look\n\n| `notaroom` | x | y |\n"
	rooms, err := roomsTable(design)
	if err != nil {
		t.Fatal(err)
	}
	if len(rooms) != 6 {
		t.Fatalf("%d rooms, want 6 (the table under ### Rooms only)", len(rooms))
	}
	pkgs := []pkg{
		{path: "schemas"},
		{path: "internal/store", imports: []string{"internal/testkit/rig"}},     // production linking the testkit
		{path: "internal/testkit/rig", testImports: []string{"workflows/api"}},  // upward, in a test
		{path: "workflows/api", imports: []string{"schemas", "internal/store"}}, // allowed
		{path: "harnesses/toy", imports: []string{"harnesses/toy/env"}},         // its own room
		{path: "harnesses/toy/env", imports: []string{"schemas"}},               // not allowed
		{path: "starter", imports: []string{"workflows/api"}},                   // no row
	}
	got := strings.Join(layoutProblems(rooms, pkgs), "\n")
	for _, want := range []string{
		"internal/store imports internal/testkit/rig",
		"internal/testkit/rig imports workflows/api: internal/ never imports upward",
		"harnesses/toy/env imports schemas",
		"package starter has no row",
		"design §2 names gone, which is no package",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"workflows/api imports", "harnesses/toy imports", "schemas"} {
		for _, l := range strings.Split(got, "\n") {
			if strings.HasPrefix(l, not) {
				t.Errorf("unexpected problem %q", l)
			}
		}
	}
}

// The README is the front door: what Roundhouse is, its two commands, what
// a machine needs and where to look, with the rest in docs/.
func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n >= 200 {
		t.Errorf("README.md has %d lines; keep it under 200 and move the detail into docs/", n)
	}
}
