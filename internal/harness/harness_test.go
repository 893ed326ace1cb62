package harness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

const good = `name: t
vars:
  bin: .bin
  port_base: "18100"
model_server:
  command: ["{bin}/model", "--weights", "{weights}", "--listen", "127.0.0.1:{port}"]
  served_name: toy
  weights_file: policy.json
episode:
  command: ["{bin}/episode", "--base-url", "{base_url}", "--task", "{task}"]
  timeout: 30s
  outcome: {adapter: minimal, file: outcome.json}
tasks:
  - {id: 0, name: a}
splits: {train_init_ids: "11-44", val_init_ids: "45-49", eval_init_ids: "1-10"}
collect: {groups: 2, attempts: 2}
trainer:
  command: ["python3", "train.py", "--lr", "{lr}", "--out", "{weights_out}"]
  hyper: {lr: "0.1"}
`

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "harness.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFillsVarsAndKeepsRuntimeValues(t *testing.T) {
	h, err := Load(write(t, good), map[string]string{"bin": "/opt/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.Model.Command, " "); got != "/opt/bin/model --weights {weights} --listen 127.0.0.1:{port}" {
		t.Fatalf("model command = %q", got)
	}
	if got := strings.Join(h.Trainer.Command, " "); got != "python3 train.py --lr 0.1 --out {weights_out}" {
		t.Fatalf("trainer command = %q", got)
	}
	if h.Episode.Timeout.D().Seconds() != 30 || h.Digest == "" {
		t.Fatalf("timeout %v digest %q", h.Episode.Timeout.D(), h.Digest)
	}
	other, _ := Load(write(t, good), map[string]string{"bin": "/other"})
	if other.Digest == h.Digest {
		t.Fatal("a different var must change the config digest")
	}
	args, err := FillArgs(h.Model.Command, map[string]string{"weights": "w.json", "port": "9"})
	if err != nil || args[4] != "127.0.0.1:9" {
		t.Fatalf("FillArgs = %v, %v", args, err)
	}
	if _, err := FillArgs(h.Model.Command, map[string]string{"weights": "w.json"}); err == nil || !strings.Contains(err.Error(), "{port}") {
		t.Fatalf("an unfilled placeholder must fail, got %v", err)
	}
}

func TestBadInputNamesTheProblem(t *testing.T) {
	cases := []struct {
		name, body string
		vars       map[string]string
		want       []string
	}{
		{"unknown var", good, map[string]string{"colour": "red"}, []string{"--var colour=red", "no var \"colour\"", "bin, port_base"}},
		{"a var of the single-host controller", good, map[string]string{"model_port": "8000"}, []string{"--var model_port=8000", "free port", "drop it"}},
		{"malformed yaml", "name: [unclosed\n", nil, []string{"not valid", "line"}},
		{"unknown field", good + "colect: {}\n", nil, []string{"colect"}},
		{"overlapping splits", strings.Replace(good, `val_init_ids: "45-49"`, `val_init_ids: "40-49"`, 1), nil, []string{"init id 40", "train_init_ids", "val_init_ids"}},
		{"undeclared placeholder", strings.Replace(good, "{bin}/episode", "{bindir}/episode", 1), nil, []string{"{bindir}", "episode.command"}},
		{"one attempt", strings.Replace(good, "attempts: 2", "attempts: 1", 1), nil, []string{"attempts", "at least 2"}},
		{"unknown selection rule", strings.Replace(good, "attempts: 2}", "attempts: 2, selection: best}", 1), nil, []string{"collect.selection", "best"}},
		{"bad duration", strings.Replace(good, "timeout: 30s", "timeout: soon", 1), nil, []string{"soon", "duration"}},
		{"model servers per host without their share", strings.Replace(good, "served_name: toy", "served_name: toy\n  per_host: 2", 1), nil, []string{"model_server.per_host", "memory_share"}},
		{"model servers that do not fit beside the services", strings.Replace(good, "served_name: toy", "served_name: toy\n  per_host: 3\n  memory_share: 0.3", 1) +
			"services:\n  - {name: vla, command: [vla], memory_share: 0.15}\n  - {name: sam3, command: [sam3], memory_share: 0.1}\n", nil,
			[]string{"model_server.per_host", "3 model servers × memory_share 0.3 + services (vla 0.15, sam3 0.1) = 1.15", "2 fit", "lower per_host"}},
		{"logits declared as the logprobs mode", strings.Replace(good, "served_name: toy", "served_name: toy\n  sampling: {logprobs_mode: processed_logits}", 1), nil,
			[]string{"model_server.sampling.logprobs_mode", "logits are not logprobs", "raw_logprobs or processed_logprobs"}},
		{"processed logprobs the command does not ask for", strings.Replace(good, "served_name: toy", "served_name: toy\n  sampling: {logprobs_mode: processed_logprobs}", 1), nil,
			[]string{"model_server.sampling.logprobs_mode", "does not pass --logprobs-mode", `"--logprobs-mode", "processed_logprobs"`}},
		{"a generation config the command contradicts", strings.Replace(strings.Replace(good, "served_name: toy", "served_name: toy\n  sampling: {generation_config: vllm}", 1),
			`"127.0.0.1:{port}"]`, `"127.0.0.1:{port}", "--generation-config=auto"]`, 1), nil,
			[]string{"model_server.sampling.generation_config", "is vllm but model_server.command starts the server with --generation-config auto"}},
	}
	for _, c := range cases {
		p := write(t, c.body)
		_, err := Load(p, c.vars)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error spans several lines: %q", c.name, err)
		}
		for _, w := range append(c.want, p) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.name, err, w)
			}
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), nil); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := ParseVars([]string{"novalue"}); err == nil || !strings.Contains(err.Error(), "name=value") {
		t.Errorf("malformed --var: %v", err)
	}
}

// Model servers per host that fit load; so does a harness without shares.
func TestModelServersPerHostThatFit(t *testing.T) {
	body := strings.Replace(good, "served_name: toy", "served_name: toy\n  per_host: 2\n  memory_share: 0.4", 1) +
		"services:\n  - {name: vla, command: [vla], memory_share: 0.15}\n"
	h, err := Load(write(t, body), nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.Model.PerHost != 2 || h.Model.MemoryShare != 0.4 || h.Services[0].MemoryShare != 0.15 {
		t.Errorf("model %+v, services %+v", h.Model, h.Services)
	}
}

func TestParseIDs(t *testing.T) {
	ids, err := ParseIDs("1,3, 5-7,3")
	if err != nil || len(ids) != 5 || ids[0] != 1 || ids[4] != 7 {
		t.Fatalf("ParseIDs = %v, %v", ids, err)
	}
	for _, bad := range []string{"7-5", "a-b", "x"} {
		if _, err := ParseIDs(bad); err == nil {
			t.Errorf("ParseIDs(%q) accepted", bad)
		}
	}
}

func TestShippedHarnessesLoad(t *testing.T) {
	files, _ := filepath.Glob("../../harnesses/*/harness.yaml")
	if len(files) == 0 {
		t.Fatal("no harness files found")
	}
	for _, f := range files {
		if _, err := Load(f, nil); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestPacedVariant: the minimal harness paces nothing by default; its
// paced variant sets 1 s episodes and a 20 s trainer through the same
// vars, and the round shape issue 26's benchmark assumes (49 validation
// cells, 35 collection episodes, validation and training init ids apart).
func TestPacedVariant(t *testing.T) {
	base, err := Load("../../harnesses/minimal/harness.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	paced, err := Load("../../harnesses/minimal/paced.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	flag := func(cmd []string, name string) string {
		for i := range cmd[:len(cmd)-1] {
			if cmd[i] == name {
				return cmd[i+1]
			}
		}
		return "missing"
	}
	for _, c := range []struct {
		h                 schemas.Harness
		episode, training string
	}{{base, "0", "0"}, {paced, "1", "15"}} {
		if e, tr := flag(c.h.Episode.Command, "--min-seconds"), flag(c.h.Trainer.Command, "--min-seconds"); e != c.episode || tr != c.training {
			t.Errorf("%s: episode --min-seconds %s, trainer %s; want %s, %s", c.h.Name, e, tr, c.episode, c.training)
		}
	}
	val, err := ParseIDs(paced.Splits.Val)
	if err != nil {
		t.Fatal(err)
	}
	train, err := ParseIDs(paced.Splits.Train)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(val) * len(paced.Tasks); n != 49 || paced.Collect.Groups*paced.Collect.Attempts != 35 {
		t.Errorf("paced round: %d validation cells, %d × %d collection episodes; want 49 and 35", n, paced.Collect.Groups, paced.Collect.Attempts)
	}
	for _, id := range val {
		if slices.Contains(train, id) {
			t.Errorf("init id %d is in both the validation and the training split", id)
		}
	}
}
