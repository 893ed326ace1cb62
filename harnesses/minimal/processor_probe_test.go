package minimal_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// The RPent harness's processor probe (harnesses/rpent_libero/processor_probe.py)
// reports the processor a model directory gives under the variant vLLM
// asks for, from the directory or from a model_dir.txt naming it; here
// against the fake transformers, whose slow/fast choice follows use_fast.
func TestProcessorProbe(t *testing.T) {
	needTorch(t)
	fake, err := filepath.Abs(filepath.Join("testdata", "fake_transformers"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model := fakeVLM(t, filepath.Join(dir, "model"), 1)
	pointer := filepath.Join(dir, "model_dir.txt")
	if err := os.WriteFile(pointer, []byte(model+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := func(weights, fast string) (schemas.ProcessorInfo, string, error) {
		cmd := exec.Command(python, "../rpent_libero/processor_probe.py", weights, "--use-fast", fast)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+fake)
		out, err := cmd.CombinedOutput()
		var info schemas.ProcessorInfo
		if err == nil {
			err = json.Unmarshal(out, &info)
		}
		return info, string(out), err
	}
	for _, c := range []struct{ weights, fast, want string }{
		{model, "true", "Qwen2VLImageProcessorFast"},
		{pointer, "true", "Qwen2VLImageProcessorFast"},
		{model, "false", "Qwen2VLImageProcessor"},
	} {
		info, out, err := probe(c.weights, c.fast)
		if err != nil || info.ImageProcessor != c.want || info.Transformers == "" {
			t.Errorf("probe %s --use-fast %s: %+v (%v)\n%s; want %s", filepath.Base(c.weights), c.fast, info, err, out, c.want)
		}
	}
	if _, out, err := probe(filepath.Join(dir, "missing"), "true"); err == nil {
		t.Errorf("a missing weights path was probed:\n%s", out)
	}
}
