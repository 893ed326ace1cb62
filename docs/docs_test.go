// Package docs holds the project's documentation. Its test keeps the
// references into it resolving: every "design.md §N" cited anywhere in the
// repository names a section heading of design.md, nothing cites the design
// brief that lives outside the repository, and relative links in the
// markdown pages point at files and headings that exist.
package docs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// designPage is the design document, relative to the repository root.
const designPage = "docs/design.md"

// problem is one broken reference, named by file and line.
type problem struct {
	file string
	line int
	msg  string
}

func (p problem) String() string { return fmt.Sprintf("%s:%d: %s", p.file, p.line, p.msg) }

// repo is a set of files by slash-separated path relative to the root.
type repo struct {
	files map[string]bool
	read  func(name string) ([]byte, error)
}

// exists reports whether name is a file of the repository or a directory
// holding one.
func (r repo) exists(name string) bool {
	if name == "." || r.files[name] {
		return true
	}
	for f := range r.files {
		if strings.HasPrefix(f, name+"/") {
			return true
		}
	}
	return false
}

// skipped are folders that hold no references of ours: generated, vendored
// or test fixtures.
func skipped(name string) bool {
	for _, part := range strings.Split(path.Dir(name), "/") {
		switch part {
		case ".git", ".dev", ".bin", "node_modules", "testdata":
			return true
		}
	}
	return false
}

// loadRepo lists the repository's files: those git tracks or would track
// (untracked files that are not ignored count, so a new page works before
// `git add`), or, outside a git checkout, every file under root.
func loadRepo(root string) (repo, error) {
	r := repo{files: map[string]bool{}, read: func(name string) ([]byte, error) {
		return os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	}}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		for _, name := range strings.Split(string(out), "\x00") {
			if name == "" || skipped(name) {
				continue
			}
			// Deleted in the work tree but still in the index: gone.
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(name))); err == nil {
				r.files[name] = true
			}
		}
		return r, nil
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && skipped(rel+"/x") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			r.files[rel] = true
		}
		return nil
	})
	return r, err
}

// sectionHeading is a heading of the design document: "## §N Title".
var sectionHeading = regexp.MustCompile(`^#{1,6}\s+§(\d+)\s`)

// sections returns the section numbers of the design document's headings,
// in order.
func sections(md string) []int {
	var out []int
	for _, l := range lines(md, false) {
		if m := sectionHeading.FindStringSubmatch(l.text); m != nil {
			n, _ := strconv.Atoi(m[1])
			out = append(out, n)
		}
	}
	return out
}

var (
	// sectionRef is a citation of a section of the design document.
	sectionRef = regexp.MustCompile(`design\.md\s*(?:§\s*|section\s+)(\d+)`)
	// briefRef is a citation of the design brief, which is not in the
	// repository.
	briefRef = regexp.MustCompile(`DESIGN\.md`)
	// briefName is the brief's file name, spelled so that this file does
	// not cite it.
	briefName = strings.ToUpper("design") + ".md"
)

// checkRefs finds citations in one file's text that do not resolve.
func checkRefs(name, text string, have map[int]bool) []problem {
	var out []problem
	for i, l := range strings.Split(text, "\n") {
		if briefRef.MatchString(l) {
			out = append(out, problem{name, i + 1, "cites " + briefName + ", the brief outside the repository: cite " + designPage + " §N instead"})
		}
		for _, m := range sectionRef.FindAllStringSubmatch(l, -1) {
			n, _ := strconv.Atoi(m[1])
			if !have[n] {
				out = append(out, problem{name, i + 1, fmt.Sprintf("cites %q, but %s has no heading §%d", m[0], designPage, n)})
			}
		}
	}
	return out
}

// line is a line of a markdown file outside fenced code blocks.
type line struct {
	n    int
	text string
}

// lines returns the lines of md outside fenced code blocks; with
// dropCode, inline code spans are blanked out too.
func lines(md string, dropCode bool) []line {
	var out []line
	fence := ""
	for i, t := range strings.Split(md, "\n") {
		trimmed := strings.TrimLeft(t, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if dropCode {
			t = codeSpan.ReplaceAllString(t, "")
		}
		out = append(out, line{i + 1, t})
	}
	return out
}

var (
	codeSpan = regexp.MustCompile("`[^`]*`")
	heading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	// inlineLink is [text](target) or ![alt](target "title").
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// refLink is a reference definition: [label]: target
	refLink = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	// linkText turns [text](target) into text in a heading.
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// slug is the anchor GitHub gives a heading: lower case, punctuation and
// symbols dropped, spaces turned into hyphens.
func slug(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a markdown file's headings; a repeated
// heading gets -1, -2, … as on GitHub.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range lines(md, false) {
		m := heading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if k := seen[s]; k > 0 {
			seen[s]++
			s = fmt.Sprintf("%s-%d", s, k)
		} else {
			seen[s] = 1
		}
		out[s] = true
	}
	return out
}

// link is a link target found on a line.
type link struct {
	line   int
	target string
}

// links returns the link targets of a markdown file, outside code.
func links(md string) []link {
	var out []link
	for _, l := range lines(md, true) {
		for _, m := range inlineLink.FindAllStringSubmatch(l.text, -1) {
			out = append(out, link{l.n, m[1]})
		}
		if m := refLink.FindStringSubmatch(l.text); m != nil {
			out = append(out, link{l.n, m[1]})
		}
	}
	return out
}

// checkLinks finds relative links of the markdown file name that point at
// no file of r, or at a heading its target page does not have.
func checkLinks(r repo, name, md string) []problem {
	var out []problem
	bad := func(l link, format string, args ...any) {
		out = append(out, problem{name, l.line, fmt.Sprintf("link %q: ", l.target) + fmt.Sprintf(format, args...)})
	}
	for _, l := range links(md) {
		if l.target == "" {
			bad(l, "empty target")
			continue
		}
		u, err := url.Parse(l.target)
		if err != nil {
			bad(l, "%v", err)
			continue
		}
		if u.Scheme != "" || u.Host != "" {
			continue // not ours to check
		}
		target := name
		if u.Path != "" {
			target = path.Clean(path.Join(path.Dir(name), u.Path))
			if strings.HasPrefix(u.Path, "/") {
				target = path.Clean(strings.TrimPrefix(u.Path, "/"))
			}
			if target == ".." || strings.HasPrefix(target, "../") {
				bad(l, "points outside the repository")
				continue
			}
			if !r.exists(target) {
				bad(l, "no file or folder %s in the repository", target)
				continue
			}
		}
		if u.Fragment == "" || !strings.HasSuffix(target, ".md") {
			continue
		}
		b, err := r.read(target)
		if err != nil {
			bad(l, "%v", err)
			continue
		}
		if !anchors(string(b))[u.Fragment] {
			bad(l, "%s has no heading with anchor #%s", target, u.Fragment)
		}
	}
	return out
}

// check runs every check over the repository and returns what is broken.
func check(r repo) ([]problem, error) {
	design, err := r.read(designPage)
	if err != nil {
		return nil, fmt.Errorf("the design document: %w", err)
	}
	secs := sections(string(design))
	var out []problem
	have := map[int]bool{}
	for i, n := range secs {
		if n != i+1 {
			out = append(out, problem{designPage, 0, fmt.Sprintf("section headings are numbered %v; want §1, §2, … in order, each once", secs)})
			break
		}
		have[n] = true
	}
	if len(secs) == 0 {
		out = append(out, problem{designPage, 0, "no section headings (## §N Title)"})
	}
	names := make([]string, 0, len(r.files))
	for name := range r.files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		b, err := r.read(name)
		if err != nil {
			return nil, err
		}
		if bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 {
			continue // binary
		}
		out = append(out, checkRefs(name, string(b), have)...)
		if strings.HasSuffix(name, ".md") {
			out = append(out, checkLinks(r, name, string(b))...)
		}
	}
	// Every page under docs/ is reachable from the front door.
	if readme, err := r.read("README.md"); err == nil {
		linked := map[string]bool{}
		for _, l := range links(string(readme)) {
			if u, err := url.Parse(l.target); err == nil && u.Scheme == "" && u.Path != "" {
				linked[path.Clean(u.Path)] = true
			}
		}
		for _, name := range names {
			if path.Dir(name) == "docs" && strings.HasSuffix(name, ".md") && !linked[name] {
				out = append(out, problem{"README.md", 0, fmt.Sprintf("does not link %s", name)})
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return out, nil
}

// TestReferencesResolve runs the checks on the repository itself.
func TestReferencesResolve(t *testing.T) {
	r, err := loadRepo("..")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.files) < 10 || !r.files[designPage] || !r.files["go.mod"] {
		t.Fatalf("found %d files, without %s or go.mod: not the repository root?", len(r.files), designPage)
	}
	problems, err := check(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// fakeRepo is a repository held in memory.
func fakeRepo(files map[string]string) repo {
	r := repo{files: map[string]bool{}, read: func(name string) ([]byte, error) {
		s, ok := files[name]
		if !ok {
			return nil, fmt.Errorf("open %s: %w", name, fs.ErrNotExist)
		}
		return []byte(s), nil
	}}
	for name := range files {
		r.files[name] = true
	}
	return r
}

// The citations below are assembled at run time, so this file does not
// cite anything itself.
var (
	cite    = func(n string) string { return "design" + ".md §" + n }
	section = func(n string) string { return "design" + ".md section " + n }
)

func TestCheckFindsBrokenReferences(t *testing.T) {
	design := "# Design\n\n## §1 The loop\n\ntext\n\n## §2 Parts\n\n```\n## §7 not a heading: in code\n```\n"
	files := map[string]string{
		designPage: design,
		"README.md": "# Roundhouse\n\n[design](docs/design.md) · [loop](docs/design.md#1-the-loop) · [parts](docs/design.md#2-parts)\n" +
			"[missing](docs/missing.md)\n" +
			"[bad anchor](docs/design.md#3-formulas)\n" +
			"[here](#roundhouse) [nowhere](#nowhere)\n" +
			"`[in code](nope.md)` and https://example.com [web](https://example.com/x#y)\n" +
			"[up](../outside.md)\n" +
			"[folder](workflows) [go file](workflows/train.go#L10)\n" +
			"[ref]: docs/gone.md\n",
		"workflows/train.go": "package workflows\n\n// Rounds (" + "docs/" + cite("1") + ").\n// Formulas (" + cite("4") + ").\n// Old (" + briefName + " §1).\n",
		"schemas/x.json":     `{"description": "see ` + section("2") + `, and ` + section("9") + `"}`,
		"docs/orphan.md":     "# Not linked from the README\n",
	}
	got, err := check(fakeRepo(files))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range got {
		lines = append(lines, p.String())
	}
	want := []string{
		"README.md:4: link \"docs/missing.md\": no file or folder docs/missing.md in the repository",
		"README.md:5: link \"docs/design.md#3-formulas\": docs/design.md has no heading with anchor #3-formulas",
		"README.md:6: link \"#nowhere\": README.md has no heading with anchor #nowhere",
		"README.md:8: link \"../outside.md\": points outside the repository",
		"README.md:10: link \"docs/gone.md\": no file or folder docs/gone.md in the repository",
		fmt.Sprintf("schemas/x.json:1: cites %q, but docs/design.md has no heading §9", section("9")),
		fmt.Sprintf("workflows/train.go:4: cites %q, but docs/design.md has no heading §4", cite("4")),
		"workflows/train.go:5: cites " + briefName + ", the brief outside the repository: cite docs/design.md §N instead",
		"README.md:0: does not link docs/orphan.md",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckSectionNumbering(t *testing.T) {
	for _, tc := range []struct {
		name, design string
		ok           bool
	}{
		{"in order", "## §1 A\n## §2 B\n### Sub\n## §3 C\n", true},
		{"gap", "## §1 A\n## §3 C\n", false},
		{"twice", "## §1 A\n## §1 B\n", false},
		{"none", "# Design\n## Loop\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := check(fakeRepo(map[string]string{designPage: tc.design}))
			if err != nil {
				t.Fatal(err)
			}
			if ok := len(got) == 0; ok != tc.ok {
				t.Errorf("problems %v, want ok=%v", got, tc.ok)
			}
		})
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"§1 The loop": "1-the-loop",
		"§3 Data layout and the recording proxy": "3-data-layout-and-the-recording-proxy",
		"The `starter` CLI":                      "the-starter-cli",
		"What runs where?":                       "what-runs-where",
		"Proxy performance (issue 3)":            "proxy-performance-issue-3",
		"From one machine to a cluster":          "from-one-machine-to-a-cluster",
		"Upgrades – rolling":                     "upgrades--rolling",
		"snake_case and UTF-8 “quotes” ünïcode":  "snake_case-and-utf-8-quotes-ünïcode",
		"See [the proxy](proxy.md)":              "see-the-proxy",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAnchorsRepeat(t *testing.T) {
	got := anchors("# A\n## Notes\n```\n# Notes\n```\n## Notes\n")
	for _, want := range []string{"a", "notes", "notes-1"} {
		if !got[want] {
			t.Errorf("anchors %v lack %q", got, want)
		}
	}
	if got["notes-2"] {
		t.Errorf("anchors %v count a heading inside a code block", got)
	}
}

func TestCheckRefs(t *testing.T) {
	have := map[int]bool{1: true, 4: true}
	for _, tc := range []struct {
		text string
		want int
	}{
		{"// (docs/" + cite("4") + ")", 0},
		{"# Init-state protocol (" + cite("1") + "): keep", 0},
		{"// " + cite("12") + " is not there", 1},
		{"see " + cite("4") + " and " + cite("5"), 1},
		{section("4"), 0},
		{section("2"), 1},
		{"the " + briefName + " brief", 1},
		{"docs/design.md without a section", 0},
	} {
		if got := checkRefs("f.go", tc.text, have); len(got) != tc.want {
			t.Errorf("checkRefs(%q) = %v, want %d problem(s)", tc.text, got, tc.want)
		}
	}
}
