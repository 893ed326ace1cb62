package harness

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// multi is good with two suites: a range entry, a single task with its
// number, and a protocol over both suites.
var multi = strings.Replace(good, "tasks:\n  - {id: 0, name: a}\n", `tasks:
  - {suite: s_swap, numbers: "0-2", first_id: 10}
  - {id: 0, name: a, suite: s_lan, number: 7}
protocol: {name: P, episodes: 40, suites: [s_swap, s_lan]}
`, 1)

func TestRangeEntriesExpandAndNumbersReachTheCommand(t *testing.T) {
	h, err := Load(write(t, multi), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, task := range h.Tasks {
		got = append(got, task.Name+"/"+task.Suite)
		args, err := FillArgs([]string{"--suite", "{suite}", "--task", "{task_number}"}, map[string]string{
			"suite": task.Suite, "task_number": strconv.Itoa(int(task.SuiteNumber()))})
		if err != nil {
			t.Fatal(err)
		}
		if args[1] != task.Suite || args[3] != strconv.Itoa(int(task.SuiteNumber())) {
			t.Errorf("task %d: %q", task.ID, args)
		}
	}
	want := []string{"s_swap_0/s_swap", "s_swap_1/s_swap", "s_swap_2/s_swap", "a/s_lan"}
	if !slices.Equal(got, want) {
		t.Errorf("tasks %v, want %v", got, want)
	}
	if ids := []int32{h.Tasks[0].ID, h.Tasks[2].ID, h.Tasks[3].ID}; !slices.Equal(ids, []int32{10, 12, 0}) {
		t.Errorf("ids %v, want first_id onwards and the single task's own", ids)
	}
	if n := []int32{h.Tasks[1].SuiteNumber(), h.Tasks[3].SuiteNumber()}; !slices.Equal(n, []int32{1, 7}) {
		t.Errorf("numbers %v, want 1 and 7", n)
	}
	if r := h.RequiredTasks(); len(r) != 4 {
		t.Errorf("required %v, want all four", r)
	}
}

func TestProtocolCountIsChecked(t *testing.T) {
	for name, c := range map[string]struct{ from, to, want string }{
		"count":          {"episodes: 40", "episodes: 800", "P has 800 episodes, but its 4 required tasks (s_swap:3 s_lan:1) × 10 eval_init_ids make 40"},
		"suite no tasks": {"suites: [s_swap, s_lan]", "suites: [s_swap, s_lan, s_env]", `suite "s_env" has no task`},
		"subset":         {"suites: [s_swap, s_lan]", "suites: [s_swap]", "P has 40 episodes, but its 3 required tasks (s_swap:3) × 10 eval_init_ids make 30"},
		"range no first": {`, first_id: 10}`, `}`, "needs first_id"},
		"range and name": {`first_id: 10}`, `first_id: 10, name: x}`, "a range entry takes suite, numbers and first_id only"},
		"duplicate id":   {"first_id: 10", "first_id: 0", "id 0 appears twice"},
		"runtime var":    {"  bin: .bin\n", "  bin: .bin\n  suite: x\n", "vars.suite: {suite} is a runtime value"},
	} {
		t.Run(name, func(t *testing.T) {
			body := strings.Replace(multi, c.from, c.to, 1)
			_, err := Load(write(t, body), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// A variant merges into its base: mappings key by key, lists replaced.
func TestBaseMergesMappingsAndReplacesLists(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "harness.yaml"), []byte(multi), 0o644); err != nil {
		t.Fatal(err)
	}
	variant := `base: harness.yaml
name: v
vars: {port_base: "19000"}
tasks:
  - {suite: s_lan, numbers: "0-4", first_id: 0}
protocol: {episodes: 5, suites: [s_lan]}
splits: {eval_init_ids: "1"}
`
	vp := filepath.Join(dir, "v.yaml")
	if err := os.WriteFile(vp, []byte(variant), 0o644); err != nil {
		t.Fatal(err)
	}
	base, err := Load(filepath.Join(dir, "harness.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Load(vp, map[string]string{"bin": "/opt/bin"})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case h.Name != "v" || h.Vars["port_base"] != "19000" || h.Vars["bin"] != "/opt/bin":
		t.Errorf("name %s vars %v: the variant's values and --var must win", h.Name, h.Vars)
	case len(h.Tasks) != 5 || h.Tasks[4].Name != "s_lan_4":
		t.Errorf("tasks %+v: the variant's list replaces the base's", h.Tasks)
	case h.Protocol.Name != "P" || h.Protocol.Episodes != 5 || !slices.Equal(h.Protocol.Suites, []string{"s_lan"}):
		t.Errorf("protocol %+v: name kept from the base, the rest the variant's", h.Protocol)
	case h.Splits.Eval != "1" || h.Splits.Train != "11-44":
		t.Errorf("splits %+v: merged key by key", h.Splits)
	case h.Episode.Command[0] != "/opt/bin/episode" || h.Collect.Groups != 2:
		t.Errorf("episode %q collect %+v: the base's sections stay", h.Episode.Command, h.Collect)
	case h.Digest == base.Digest:
		t.Error("the variant has its base's digest")
	}
	// {harness_dir} is the base's directory wherever the variant lives.
	elsewhere := filepath.Join(t.TempDir(), "v.yaml")
	if err := os.WriteFile(elsewhere, []byte("base: "+filepath.Join(dir, "harness.yaml")+"\nname: far\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if far, err := Load(elsewhere, nil); err != nil || far.Dir != dir {
		t.Errorf("variant in another directory: dir %q (%v), want the base's %q", far.Dir, err, dir)
	}
	// The base's own digest is the file's alone, as before bases existed.
	again, _ := Load(filepath.Join(dir, "harness.yaml"), nil)
	if again.Digest != base.Digest {
		t.Error("loading a file twice gave two digests")
	}
	// A file that is its own base stops.
	if err := os.WriteFile(vp, []byte("base: v.yaml\nname: v\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(vp, nil); err == nil || !strings.Contains(err.Error(), "chain longer") {
		t.Errorf("self base: %v", err)
	}
	if err := os.WriteFile(vp, []byte("base: nowhere.yaml\nname: v\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(vp, nil); err == nil || !strings.Contains(err.Error(), "base nowhere.yaml") {
		t.Errorf("missing base: %v", err)
	}
}

// The shipped RPent files make up the documents' protocols.
func TestShippedProtocols(t *testing.T) {
	for f, want := range map[string]struct {
		name            string
		suites, episode int
	}{
		"../../harnesses/rpent_libero/harness.yaml": {"LIBERO-PRO", 8, 800},
		"../../harnesses/rpent_libero/plus.yaml":    {"LIBERO-Plus", 4, 10030},
		"../../harnesses/rpent_libero/code.yaml":    {"LIBERO-PRO", 8, 800},
	} {
		h, err := Load(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids, _ := IDs(h, "eval_init_ids")
		suites := map[string]bool{}
		for _, task := range h.Tasks {
			suites[task.Suite] = true
		}
		if h.Protocol.Name != want.name || len(suites) != want.suites || len(h.RequiredTasks())*len(ids) != want.episode {
			t.Errorf("%s: protocol %q, %d suites, %d × %d episodes; want %+v", f, h.Protocol.Name, len(suites), len(h.RequiredTasks()), len(ids), want)
		}
		if h.Episode.Command[0] != h.Vars["rpent_env"]+"/bin/rpent" {
			t.Errorf("%s: episode command %q", f, h.Episode.Command)
		}
	}
}
