package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// layoutSection is the README's Layout section: from its heading to the
// next heading of the same level, or the end.
func layoutSection(readme string) string {
	i := strings.Index(readme, "\n## Layout\n")
	if i < 0 {
		return ""
	}
	rest := readme[i+len("\n## Layout\n"):]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// missingRooms lists the folders the Layout section does not name: each
// top-level folder as `name/`, each package folder under internal/ as
// `internal/name` or, in the row of the other libraries, `name`.
func missingRooms(layout string, top, internal []string) []string {
	var miss []string
	for _, d := range top {
		if !strings.Contains(layout, "`"+d+"/`") {
			miss = append(miss, d+"/")
		}
	}
	for _, d := range internal {
		if !strings.Contains(layout, "`internal/"+d+"`") && !strings.Contains(layout, "`"+d+"`") {
			miss = append(miss, "internal/"+d)
		}
	}
	return miss
}

// The README's Layout names every room of the repository, so a package
// added without a line there fails here.
func TestLayoutNamesEveryRoom(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	layout := layoutSection(string(b))
	if layout == "" {
		t.Fatal("README.md has no ## Layout section")
	}
	var top, internal []string
	for _, d := range []string{"workflows", "activities", "workers", "starter", "schemas", "deploy", "harnesses", "docs"} {
		if st, err := os.Stat(filepath.Join("..", d)); err != nil || !st.IsDir() {
			t.Fatalf("top-level folder %s/ missing", d)
		}
		top = append(top, d)
	}
	ents, err := os.ReadDir("../internal")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			internal = append(internal, e.Name())
		}
	}
	if len(internal) < 5 {
		t.Fatalf("found %d folders under internal/: not the repository?", len(internal))
	}
	for _, m := range missingRooms(layout, top, internal) {
		t.Errorf("README.md's Layout does not name %s: add a row (or a name in the internal/… row)", m)
	}
}

func TestMissingRooms(t *testing.T) {
	layout := "| `workflows/` | … |\n| `internal/host` | … |\n| `internal/…` | `proxy`, `rl` |\n"
	got := missingRooms(layout, []string{"workflows", "starter"}, []string{"host", "proxy", "spool"})
	if strings.Join(got, " ") != "starter/ internal/spool" {
		t.Errorf("missing = %v, want starter/ and internal/spool", got)
	}
}
