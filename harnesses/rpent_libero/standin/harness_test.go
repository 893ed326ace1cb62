package standin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// standin.yaml must test harness.yaml's wiring: the same episode and
// service command lines after the program, the same services, readiness
// signals, external-endpoint vars, outcome adapter, artifacts and splits.
func TestStandinMirrorsTheRealHarness(t *testing.T) {
	real, stand, _ := mirror(t, "../harness.yaml", "../standin.yaml")
	overridden, err := harness.Load("../harness.yaml", map[string]string{"vla_endpoint": "http://10.0.0.5:8220"})
	if err != nil || overridden.Services[0].External != "http://10.0.0.5:8220" {
		t.Errorf("--var vla_endpoint must make vla external: %+v %v", overridden.Services[0], err)
	}
	if real.Splits.Train != "11-44" || real.Splits.Val != "45-49" || real.Splits.Eval != "1-10" {
		t.Errorf("splits %+v", real.Splits)
	}
	if !slices.Contains(real.Trainer.Command, "--nproc_per_node") || real.Trainer.Command[slices.Index(real.Trainer.Command, "--nproc_per_node")+1] != "8" {
		t.Errorf("trainer must run 8 processes: %q", real.Trainer.Command)
	}
	checkTrainer(t, real, stand)
	// Each episode names its own task's suite and number: one file holds
	// the protocol's suites.
	for _, c := range []schemas.Harness{real, stand} {
		cmd := c.Episode.Command
		if i := slices.Index(cmd, "--suite"); i < 0 || cmd[i+1] != "{suite}" || cmd[slices.Index(cmd, "--task")+1] != "{task_number}" {
			t.Errorf("%s: episode must pass --suite {suite} --task {task_number}: %q", c.Name, cmd)
		}
		for _, task := range c.Tasks {
			if task.Suite == "" || task.Number == nil {
				t.Errorf("%s: task %d needs a suite and its number in it", c.Name, task.ID)
			}
		}
	}
}

// The code-mode pair: standin_code.yaml mirrors code.yaml as standin.yaml
// mirrors harness.yaml, and each variant is its base with only the episode
// in code mode (RPent's flags and limits) and code_policy/ uploaded.
func TestCodeVariantMirrorsTheRealHarness(t *testing.T) {
	_, _, cfg := mirror(t, "../code.yaml", "../standin_code.yaml", "code_timeout_s", "code_max_calls")
	if cfg.PolicyMode != "code" || cfg.CodeTimeoutS != 120 || cfg.CodeMaxCalls != 100 {
		t.Errorf("code.yaml runs mode %q with %gs and %d calls a snippet; want code with RPent's defaults 120 and 100", cfg.PolicyMode, cfg.CodeTimeoutS, cfg.CodeMaxCalls)
	}
	for variantPath, basePath := range map[string]string{"../code.yaml": "../harness.yaml", "../standin_code.yaml": "../standin.yaml"} {
		v, err := harness.Load(variantPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		base, err := harness.Load(basePath, nil)
		if err != nil {
			t.Fatal(err)
		}
		if v.Name == base.Name {
			t.Errorf("%s: the variant keeps its base's name", v.Name)
		}
		flags := []string{"--policy-mode", "code", "--code-timeout-s", v.Vars["code_timeout_s"], "--code-max-calls", v.Vars["code_max_calls"]}
		if want := append(slices.Clone(base.Episode.Command), flags...); !slices.Equal(v.Episode.Command, want) {
			t.Errorf("%s: episode command is not its base's plus %q:\n %q", v.Name, flags, v.Episode.Command)
		}
		if want := append(slices.Clone(base.Episode.Artifacts), "code_policy/*"); !slices.Equal(v.Episode.Artifacts, want) {
			t.Errorf("%s: artifacts %q, want the base's plus code_policy/*", v.Name, v.Episode.Artifacts)
		}
		// Everything else is the base's.
		v.Name, v.Digest, v.Episode.Command, v.Episode.Artifacts = base.Name, base.Digest, base.Episode.Command, base.Episode.Artifacts
		delete(v.Vars, "code_timeout_s")
		delete(v.Vars, "code_max_calls")
		if !reflect.DeepEqual(v, base) {
			t.Errorf("%s differs from %s beyond the episode's code mode", variantPath, basePath)
		}
	}
}

// mirror checks that the stand-in file tests the real file's wiring (the
// same episode and service command lines after the program, services,
// readiness signals, external-endpoint vars, outcome adapter, artifacts and
// splits) and that the stand-in rpent parses the real episode flags, which
// it returns. Both load with the real file's values of max_turns,
// max_steps and of vars, so only the wiring can differ.
func mirror(t *testing.T, realPath, standPath string, vars ...string) (real, stand schemas.Harness, cfg Config) {
	t.Helper()
	real, err := harness.Load(realPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	same := map[string]string{}
	for _, k := range append([]string{"max_turns", "max_steps"}, vars...) {
		same[k] = real.Vars[k]
	}
	stand, err = harness.Load(standPath, same)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := stand.Episode.Command[1:], real.Episode.Command[1:]; !slices.Equal(got, want) {
		t.Errorf("episode flags differ:\n standin %q\n real    %q", got, want)
	}
	for _, flag := range []string{"--robot", "--libero-type", "--suite", "--task", "--seed", "--planner", "--model",
		"--base-url", "--max-turns", "--output-dir", "--vla-endpoint", "--sam3-endpoint"} {
		if !slices.Contains(real.Episode.Command, flag) {
			t.Errorf("real episode command lacks %s", flag)
		}
	}
	// The stand-in parses the real flags (after filling runtime values).
	args, err := harness.FillArgs(real.Episode.Command[1:], map[string]string{"task": "12", "task_number": "2", "suite": "libero_object_swap", "seed": "12", "base_url": "http://127.0.0.1:1/e/x/v1",
		"output_dir": t.TempDir(), "served_name": "planner", "vla_url": "http://127.0.0.1:2", "sam3_url": "http://127.0.0.1:3"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = ParseArgs(args, os.Stderr); err != nil {
		t.Errorf("the stand-in refuses %s's episode flags: %v", realPath, err)
	}
	if len(real.Services) != len(stand.Services) {
		t.Fatalf("services: real %d, standin %d", len(real.Services), len(stand.Services))
	}
	for i, rs := range real.Services {
		ss := stand.Services[i]
		tail := func(cmd []string) []string {
			for j, a := range cmd {
				if a == "--embodiment" || a == "--cuda-device" {
					return cmd[j:]
				}
			}
			return nil
		}
		if ss.Name != rs.Name || !slices.Equal(tail(ss.Command), tail(rs.Command)) || tail(rs.Command) == nil {
			t.Errorf("service %s: flags differ:\n standin %q\n real    %q", rs.Name, ss.Command, rs.Command)
		}
		if rs.External != "" || ss.External != "" {
			t.Errorf("service %s: external endpoints must default to empty", rs.Name)
		}
		if ss.Ready.Log == "" && ss.Ready.Post == "" {
			t.Errorf("service %s: the stand-in must be ready by log line or POST /call", rs.Name)
		}
		for k := range rs.Env {
			if _, ok := ss.Env[k]; !ok && strings.HasSuffix(k, "_CHECKPOINT_PATH") {
				t.Errorf("service %s: standin lacks env %s", rs.Name, k)
			}
		}
	}
	if real.Episode.Env["OPENAI_API_KEY"] == "" || stand.Episode.Env["OPENAI_API_KEY"] == "" {
		t.Error("OPENAI_API_KEY must be set to a non-empty value")
	}
	if real.Episode.Outcome.Adapter != "rpent_libero" || stand.Episode.Outcome.Adapter != "rpent_libero" {
		t.Error("both files must use the rpent_libero adapter")
	}
	if !reflect.DeepEqual(real.Episode.Artifacts, stand.Episode.Artifacts) || !reflect.DeepEqual(real.Splits, stand.Splits) {
		t.Error("artifacts and splits must match")
	}
	return real, stand, cfg
}

// checkTrainer: the planner reads images in both files; the real trainer
// is the repository's own (harnesses/minimal/trainer.py --model hf), and
// both trainers get the batch's images, the round as seed and the drift
// limit. Every flag the real command passes is one trainer.py accepts.
func checkTrainer(t *testing.T, real, stand schemas.Harness) {
	t.Helper()
	if !real.Model.Vision || !stand.Model.Vision {
		t.Errorf("model_server.vision: real %v, standin %v; the planner reads the camera image", real.Model.Vision, stand.Model.Vision)
	}
	flag := func(cmd []string, name string) string {
		if i := slices.Index(cmd, name); i >= 0 && i+1 < len(cmd) {
			return cmd[i+1]
		}
		return ""
	}
	script := real.Dir + "/../minimal/trainer.py" // {harness_dir} is filled at load
	cmd := real.Trainer.Command
	if !slices.Contains(cmd, script) || flag(cmd, "--model") != "hf" {
		t.Fatalf("real trainer must run {harness_dir}/../minimal/trainer.py --model hf: %q", cmd)
	}
	if _, err := os.Stat(script); err != nil {
		t.Errorf("real trainer script: %v", err)
	}
	for _, c := range [][]string{cmd, stand.Trainer.Command} {
		if flag(c, "--images") != "{images}" || flag(c, "--seed") != "{round}" || flag(c, "--drift-limit") == "" {
			t.Errorf("trainer command lacks --images {images}, --seed {round} or --drift-limit: %q", c)
		}
	}
	help, err := exec.Command("/usr/bin/python3", script, "--help").Output()
	if err != nil {
		t.Logf("trainer.py --help: %v; flags not checked", err)
		return
	}
	for _, a := range cmd[slices.Index(cmd, script)+1:] {
		if strings.HasPrefix(a, "--") && !strings.Contains(string(help), a+" ") {
			t.Errorf("real trainer command passes %s, which trainer.py --help does not list", a)
		}
	}
}

// serve_vllm.sh turns model_dir.txt (or a directory) into `vllm serve DIR`.
func TestServeVLLMLauncher(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "ckpt", "r3")
	os.MkdirAll(model, 0o755)
	os.WriteFile(filepath.Join(model, "config.json"), []byte(`{}`), 0o644)
	pointer := filepath.Join(dir, "model_dir.txt")
	os.WriteFile(pointer, []byte(model+"\n"), 0o644)
	fake := filepath.Join(dir, "vllm")
	argsOut := filepath.Join(dir, "args")
	os.WriteFile(fake, []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" > "+argsOut+"\n"), 0o755)
	run := func(weights string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "../serve_vllm.sh", weights, fake, "--served-model-name", "planner", "--port", "18100")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, w := range []string{pointer, model} {
		os.Remove(argsOut)
		if out, err := run(w); err != nil {
			t.Fatalf("%s: %v\n%s", w, err, out)
		}
		b, _ := os.ReadFile(argsOut)
		if got, want := strings.Fields(string(b)), []string{"serve", model, "--served-model-name", "planner", "--port", "18100"}; !slices.Equal(got, want) {
			t.Errorf("%s: vllm got %q, want %q", w, got, want)
		}
	}
	os.WriteFile(pointer, []byte(filepath.Join(dir, "unmounted")+"\n"), 0o644)
	if out, err := run(pointer); err == nil || !strings.Contains(out, "not a model directory") {
		t.Errorf("a pointer to nothing must fail clearly: %v %s", err, out)
	}
	os.WriteFile(pointer, []byte("relative/dir\n"), 0o644)
	if out, err := run(pointer); err == nil || !strings.Contains(out, "absolute") {
		t.Errorf("a relative pointer must fail: %v %s", err, out)
	}
}
