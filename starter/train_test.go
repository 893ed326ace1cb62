package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Every bad input fails before any server is contacted, with a message
// naming the input and the fix.
func TestTrainBadInput(t *testing.T) {
	dir := t.TempDir()
	good := "../harnesses/minimal/harness.yaml"
	weights := "../harnesses/minimal/weights/w0"
	broken := filepath.Join(dir, "broken.yaml")
	os.WriteFile(broken, []byte("name: [\n"), 0o644)
	os.Mkdir(filepath.Join(dir, "empty"), 0o755)
	// A vision-language checkpoint without its processor (rpent_libero
	// declares model_server.vision).
	noProcessor := filepath.Join(dir, "vlm")
	os.Mkdir(noProcessor, 0o755)
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
		os.WriteFile(filepath.Join(noProcessor, f), []byte("{}"), 0o644)
	}
	port := itest.Port(t)
	// An endpoint nothing listens on: reaching it would fail the test differently.
	e := connect.Endpoints{Temporal: "127.0.0.1:" + strconv.Itoa(port), Namespace: "default"}
	cases := []struct {
		name string
		f    trainFlags
		want []string
	}{
		{"missing config", trainFlags{run: "r", weights: weights, rounds: 1}, []string{"--config", "harnesses/minimal/harness.yaml"}},
		{"absent harness file", trainFlags{config: filepath.Join(dir, "nope.yaml"), run: "r", weights: weights, rounds: 1}, []string{"nope.yaml", "does not exist"}},
		{"malformed harness", trainFlags{config: broken, run: "r", weights: weights, rounds: 1}, []string{"broken.yaml", "not valid"}},
		{"unknown var", trainFlags{config: good, run: "r", weights: weights, rounds: 1, vars: []string{"colour=red"}}, []string{"--var colour=red", "known vars"}},
		// The single-host controller's vars say what Roundhouse does instead.
		{"controller's model port", trainFlags{config: good, run: "r", weights: weights, rounds: 1, vars: []string{"model_port=8000"}}, []string{"--var model_port=8000", "free port", "drop it"}},
		{"controller's proxy port", trainFlags{config: good, run: "r", weights: weights, rounds: 1, vars: []string{"proxy_port=8100"}}, []string{"recording proxy", "drop it"}},
		{"controller's VLA port", trainFlags{config: good, run: "r", weights: weights, rounds: 1, vars: []string{"vla_port=8200"}}, []string{"vla_endpoint=http://HOST:PORT"}},
		{"controller's SAM3 port", trainFlags{config: good, run: "r", weights: weights, rounds: 1, vars: []string{"sam3_port=8300"}}, []string{"sam3_endpoint=http://HOST:PORT"}},
		{"gpu on the CPU harness", trainFlags{config: good, run: "r", weights: weights, rounds: 1, vars: []string{"gpu=0"}}, []string{"--var gpu=0", "declares no GPU", "rpent_libero takes --var gpu=N"}},
		{"priority out of range", trainFlags{config: good, run: "r", weights: weights, rounds: 1, priority: 9}, []string{"--priority 9", "1 (served first) to 5"}},
		{"missing weights", trainFlags{config: good, run: "r", weights: filepath.Join(dir, "w9"), rounds: 1}, []string{"--weights", "w9", "does not exist"}},
		{"weights dir without file", trainFlags{config: good, run: "r", weights: dir, rounds: 1}, []string{"policy.json"}},
		{"a file for directory weights", trainFlags{config: "../harnesses/rpent_libero/harness.yaml", run: "r", weights: weights + "/policy.json", rounds: 1}, []string{"policy.json is a file", "checkpoint directory"}},
		{"empty weights dir", trainFlags{config: "../harnesses/rpent_libero/harness.yaml", run: "r", weights: dir + "/empty", rounds: 1}, []string{"holds no files"}},
		{"VLM weights without processor", trainFlags{config: "../harnesses/rpent_libero/harness.yaml", run: "r", weights: noProcessor, rounds: 1}, []string{"--weights", noProcessor, "preprocessor_config.json"}},
		{"bad run name", trainFlags{config: good, run: "a b", weights: weights, rounds: 1}, []string{"--run", "a b"}},
		{"bad pool report", trainFlags{config: good, run: "r", weights: weights, rounds: 1, poolReport: broken}, []string{"--pool-report", "report.json"}},
		// Overlapped rounds: a bound beyond the run, below 0, or on a
		// harness whose trainer needs the model server's GPU.
		{"staleness beyond the rounds", trainFlags{config: good, run: "r", weights: weights, rounds: 2, maxStaleness: 3, set: map[string]bool{"max-staleness": true}},
			[]string{"--max-staleness 3 with --rounds 2", "at most 1"}},
		{"negative staleness", trainFlags{config: good, run: "r", weights: weights, rounds: 2, maxStaleness: -1, set: map[string]bool{"max-staleness": true}},
			[]string{"--max-staleness", "is -1"}},
		{"overlap on a shared GPU", trainFlags{config: "../harnesses/rpent_libero/harness.yaml", run: "r", weights: weights, rounds: 6, maxStaleness: 1, set: map[string]bool{"max-staleness": true}},
			[]string{"--max-staleness", "stop_before_training", "max_staleness 0"}},
	}
	for _, c := range cases {
		wantInputError(t, c.name, train(context.Background(), &bytes.Buffer{}, &e, c.f), c.want)
	}
	// Valid input, unreachable Temporal: a one-line error with the fix.
	err := train(context.Background(), &bytes.Buffer{}, &e, trainFlags{config: good, run: "r", weights: weights, rounds: 1})
	if err == nil || !strings.Contains(err.Error(), "Temporal at 127.0.0.1:"+strconv.Itoa(port)+" is not reachable") || !strings.Contains(err.Error(), "task up") {
		t.Fatalf("unreachable Temporal: %v", err)
	}
}

// --weights and --pool-report may name objects in the bucket: weights are
// copied into the run as w0, checked against their manifest; a pool report
// in S3 is checked against them like a local one.
func TestTrainFromS3(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	files, err := weights.Dir("../harnesses/minimal/weights/w0")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := weights.Publish(ctx, s, "ckpts/a/", files, schemas.WeightsManifest{WeightsID: "a"}); err != nil {
		t.Fatal(err)
	}
	e := stack.Endpoints
	base := trainFlags{config: "../harnesses/minimal/harness.yaml", rounds: 1, groups: 1, attempts: 2, detach: true, set: map[string]bool{}}
	run := func(f trainFlags) (string, error) {
		var out bytes.Buffer
		err := train(ctx, &out, &e, f)
		return out.String(), err
	}

	// A stale pool report in S3 is refused before anything is written.
	h, err := harness.Load(base.config, nil)
	if err != nil {
		t.Fatal(err)
	}
	stale, _ := json.Marshal(schemas.Report{Run: "x", Tag: "v", InitKey: "val_init_ids", Harness: h.Name, Digest: h.Digest,
		WeightsDigest: "0123456789abcdef", Scope: schemas.ScopeFull, Shards: 1, Tasks: []schemas.TaskResult{{Task: 0}}})
	if err := s.Put(ctx, "reports/stale.json", stale); err != nil {
		t.Fatal(err)
	}
	f := base
	f.run, f.weights, f.poolReport = "from-s3-stale", "s3://"+s.Bucket+"/ckpts/a/", "s3://"+s.Bucket+"/reports/stale.json"
	if _, err := run(f); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("stale pool report in S3: %v", err)
	}
	if objs, _ := s.List(ctx, schemas.Layout{Run: f.run}.Prefix()); len(objs) != 0 {
		t.Fatalf("a refused start wrote %d objects", len(objs))
	}
	// Another bucket is refused with the fix.
	f.weights = "s3://elsewhere/ckpts/a/"
	f.poolReport = ""
	if _, err := run(f); err == nil || !strings.Contains(err.Error(), "copy it into s3://"+s.Bucket) {
		t.Fatalf("weights in another bucket: %v", err)
	}

	// Weights in the bucket become the run's w0, file for file.
	f = base
	f.run, f.weights = "from-s3", "s3://"+s.Bucket+"/ckpts/a/"
	if out, err := run(f); err != nil {
		t.Fatalf("train from S3 weights: %v\n%s", err, out)
	}
	src, err := weights.Read(ctx, s, "ckpts/a/")
	if err != nil {
		t.Fatal(err)
	}
	w0, err := weights.Read(ctx, s, schemas.Layout{Run: "from-s3"}.Weights("w0"))
	if err != nil || !weights.Same(src.Files, w0.Files) || w0.WeightsID != "w0" {
		t.Fatalf("w0 = %+v (%v), want the files of %+v", w0, err, src)
	}
}

// wantInputError checks that err rejects bad input with a message naming
// every want, before Temporal is contacted; it reports whether err is set.
func wantInputError(t *testing.T, name string, err error, want []string) bool {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", name)
		return false
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not mention %q", name, err, w)
		}
	}
	if strings.Contains(err.Error(), "Temporal") {
		t.Errorf("%s: checked Temporal before rejecting the input: %v", name, err)
	}
	return true
}

// The controller's --run-dir gets one line saying where a run lives.
func TestRunDirSaysWhereRunsLive(t *testing.T) {
	root := rootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"train", "--run-dir", "/data/runs/exp1", "--run", "exp1"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "--run-dir /data/runs/exp1") || !strings.Contains(err.Error(), "runs/<run>/") ||
		!strings.Contains(err.Error(), "--run NAME") {
		t.Fatalf("--run-dir: %v", err)
	}
}

// The end of `starter train`: the final validation with its counts and
// both denominators, loud when too many of its episodes did not count.
func TestPrintResult(t *testing.T) {
	res := api.TrainResult{FinalWeightsID: "r2", FinalValSuccess: 29.0 / 33,
		FinalVal: &schemas.TaskResult{Episodes: 33, Valid: 33, Successes: 29, Lost: 2}}
	var out bytes.Buffer
	printResult(&out, "b", "demo", res)
	want := fmt.Sprintf("final validation success (weights r2): 29/33 %s over valid, %s over attempted", stats.Rate(29, 33), stats.Rate(29, 35))
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "final weights: s3://b/runs/demo/weights/r2/") || strings.Contains(out.String(), "!!") {
		t.Errorf("output lacks %q or the weights, or warns:\n%s", want, out.String())
	}
	res.FinalVal.Valid, res.FinalVal.Invalid = 23, 10
	out.Reset()
	printResult(&out, "b", "demo", res)
	if !strings.Contains(out.String(), "!! final validation: 12 of 35 attempted episodes invalid or lost") {
		t.Errorf("over the invalid limit without a warning:\n%s", out.String())
	}
}
