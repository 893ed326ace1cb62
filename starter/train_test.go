package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/devstack"
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
	port, _ := devstack.FreePort()
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
		{"unknown var", trainFlags{config: good, run: "r", weights: weights, rounds: 1, vars: []string{"gpu=0"}}, []string{"--var gpu=0", "known vars"}},
		{"missing weights", trainFlags{config: good, run: "r", weights: filepath.Join(dir, "w9"), rounds: 1}, []string{"--weights", "w9", "does not exist"}},
		{"weights dir without file", trainFlags{config: good, run: "r", weights: dir, rounds: 1}, []string{"policy.json"}},
		{"a file for directory weights", trainFlags{config: "../harnesses/rpent_libero/harness.yaml", run: "r", weights: weights + "/policy.json", rounds: 1}, []string{"policy.json is a file", "checkpoint directory"}},
		{"empty weights dir", trainFlags{config: "../harnesses/rpent_libero/harness.yaml", run: "r", weights: dir + "/empty", rounds: 1}, []string{"holds no files"}},
		{"bad run name", trainFlags{config: good, run: "a b", weights: weights, rounds: 1}, []string{"--run", "a b"}},
		{"bad pool report", trainFlags{config: good, run: "r", weights: weights, rounds: 1, poolReport: broken}, []string{"--pool-report", "report.json"}},
	}
	for _, c := range cases {
		err := train(context.Background(), &bytes.Buffer{}, &e, c.f)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.name, err, w)
			}
		}
		if strings.Contains(err.Error(), "Temporal") {
			t.Errorf("%s: checked Temporal before rejecting the input: %v", c.name, err)
		}
	}
	// Valid input, unreachable Temporal: a one-line error with the fix.
	err := train(context.Background(), &bytes.Buffer{}, &e, trainFlags{config: good, run: "r", weights: weights, rounds: 1})
	if err == nil || !strings.Contains(err.Error(), "Temporal at 127.0.0.1:"+strconv.Itoa(port)+" is not reachable") || !strings.Contains(err.Error(), "task up") {
		t.Fatalf("unreachable Temporal: %v", err)
	}
}
