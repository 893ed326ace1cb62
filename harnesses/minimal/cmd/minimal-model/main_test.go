package main

import (
	"strings"
	"testing"
	"time"
)

func TestStartDelay(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "0": 0, "2": 2 * time.Second, "0.5": 500 * time.Millisecond} {
		if got, err := startDelay("MINIMAL_MODEL_START_DELAY", in); err != nil || got != want {
			t.Errorf("startDelay(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"2s", "-1", "NaN", "x"} {
		if _, err := startDelay("MINIMAL_MODEL_START_DELAY", in); err == nil {
			t.Errorf("startDelay(%q): no error", in)
		}
	}
}

// TestRunRefusesSamplingFlags: a logprobs mode the toy cannot serve, or an
// unknown generation-config mode, stops it before it listens.
func TestRunRefusesSamplingFlags(t *testing.T) {
	const w0 = "../../weights/w0/policy.json"
	for _, c := range []struct{ mode, gen, want string }{
		{"raw_logits", "auto", "logprobs only"},
		{"sampled", "auto", "want raw_logprobs or processed_logprobs"},
		{"processed_logprobs", "model", "want auto or vllm"},
	} {
		err := run(w0, "127.0.0.1:0", "toy", false, false, c.mode, c.gen)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--logprobs-mode %s --generation-config %s: %v, want %q", c.mode, c.gen, err, c.want)
		}
	}
}
