package runs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Local weights are described and named by their digest, as they will be
// published; anything else is a weights id of the run, left to CheckEval.
// The harness is loaded with the vars, and what the caller set is kept.
func TestResolveEval(t *testing.T) {
	const config, w0 = "../../harnesses/minimal/harness.yaml", "../../harnesses/minimal/weights/w0"
	in := Eval{Run: "r", Tag: "t", InitKey: "val_init_ids", Config: config, Shard: Shard{I: 1, N: 2}, Flag: "--weights"}
	ev, err := ResolveEval(in, []string{"bin=/opt/bin"}, w0)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := FindWeights(w0, ev.Harness.Model.WeightsFile)
	desc, _ := weights.Describe(files)
	d := schemas.WeightsDigest(desc)
	if ev.Files == nil || ev.Digest != d || ev.WeightsID != "ext-"+d[:12] || len(ev.Desc) != len(desc) {
		t.Errorf("local weights: id %s digest %s, %d files; want ext-%.12s, %s, %d", ev.WeightsID, ev.Digest, len(ev.Files), d, d, len(desc))
	}
	if ev.Harness.Name == "" || ev.Run != "r" || ev.Tag != "t" || ev.Shard != in.Shard || ev.Flag != "--weights" {
		t.Errorf("resolved %+v", ev)
	}
	if ev.Harness.Vars["bin"] != "/opt/bin" {
		t.Errorf("--var bin=/opt/bin not applied: vars %v", ev.Harness.Vars)
	}

	ev, err = ResolveEval(in, nil, "r2")
	if err != nil || ev.WeightsID != "r2" || ev.Files != nil || ev.Digest != "" {
		t.Errorf("weights id: %+v, %v", ev, err)
	}
	for _, c := range []struct {
		vars    []string
		weights string
		want    string
	}{
		{[]string{"novalue"}, "r2", `--var "novalue"`},
		{nil, filepath.Join(t.TempDir(), "w9"), "does not exist"},
	} {
		if _, err := ResolveEval(in, c.vars, c.weights); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("vars %v weights %s: error %v, want %q", c.vars, c.weights, err, c.want)
		}
	}
}

func TestLocalWeights(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "w"), nil, 0o644)
	for w, want := range map[string]bool{dir: true, "./w0": true, "a/b": true, "w0": false, "r12": false, "ext-0123": false} {
		if got := LocalWeights(w); got != want {
			t.Errorf("LocalWeights(%q) = %v, want %v", w, got, want)
		}
	}
}
