package activities

import (
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestDriftLine(t *testing.T) {
	tail := "step 0\n[rank0]: trainer: drift guard: mean |log pi_old - log pi_rollout| 0.5 exceeds --drift-limit 0.001 (first: sample 3 (0.9))\nERROR torch.distributed.elastic: failed\n"
	if got := driftLine(tail); got != "trainer: drift guard: mean |log pi_old - log pi_rollout| 0.5 exceeds --drift-limit 0.001 (first: sample 3 (0.9))" {
		t.Errorf("driftLine = %q", got)
	}
	if got := driftLine("Traceback\nModuleNotFoundError: No module named 'torch'\n"); got != "" {
		t.Errorf("a plain failure read as drift: %q", got)
	}
}

func TestTrainerCause(t *testing.T) {
	torchrun := "step 1/2 loss 0.1\n[rank0]: Traceback (most recent call last):\nValueError: batch has 3 samples, weights 2\n" +
		"ERROR:torch.distributed.elastic: failed (exitcode: 1)\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" +
		"============================================================\ntrainer.py FAILED\n============================================================\n"
	for _, c := range []struct{ name, log, want string }{
		{"rank's exception under torchrun's report", torchrun, "ValueError: batch has 3 samples, weights 2"},
		{"no torch", "Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n", "ModuleNotFoundError: No module named 'torch'"},
		{"the trainer's own error", "trainer: error: batch x.npz: missing array advantages\nERROR: failed\n=====\n", "error: batch x.npz: missing array advantages"},
		{"plain text", "killed\n-----\n", "killed"},
		{"nothing", "\n====\n", "the trainer printed nothing"},
	} {
		if got := trainerCause(c.log, false); got != c.want {
			t.Errorf("%s: cause %q, want %q", c.name, got, c.want)
		}
	}
	if got := trainerCause("step 3/9", true); got != "the trainer outlived trainer.timeout" {
		t.Errorf("timed out: %q", got)
	}
}

func TestNameSamples(t *testing.T) {
	line := "trainer: drift guard: mean 0.5 exceeds --drift-limit 0.1 (max 1, 50.0% of samples over the limit; first: sample 1 (0.9), sample 7 (0.8)): …"
	samples := []schemas.Sample{{EpisodeID: "r1-train-g0-a1", CallIndex: 0}, {EpisodeID: "r1-train-g2-a3", CallIndex: 4}}
	want := "first: sample 1 = episode r1-train-g2-a3 call 4 (0.9), sample 7 (0.8))"
	if got := nameSamples(line, samples); !strings.Contains(got, want) {
		t.Errorf("named:\n%s\nwant it to contain\n%s", got, want)
	}
}
