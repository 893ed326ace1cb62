package main

import (
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
