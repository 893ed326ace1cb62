package failnote

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestRetryDelayFollowsThePolicy(t *testing.T) {
	p := &temporal.RetryPolicy{InitialInterval: 10 * time.Second, BackoffCoefficient: 2, MaximumInterval: 5 * time.Minute}
	plain := errors.New("boom")
	for _, c := range []struct {
		attempt int32
		want    time.Duration
	}{{1, 10 * time.Second}, {2, 20 * time.Second}, {5, 160 * time.Second}, {6, 5 * time.Minute}, {60, 5 * time.Minute}} {
		if d, ok := retryDelay(p, c.attempt, plain); !ok || d != c.want {
			t.Errorf("attempt %d: %v %v, want %v", c.attempt, d, ok, c.want)
		}
	}
	capped := &temporal.RetryPolicy{MaximumAttempts: 3}
	if _, ok := retryDelay(capped, 3, plain); ok {
		t.Error("the last allowed attempt is retried")
	}
	if d, ok := retryDelay(capped, 2, plain); !ok || d != 2*time.Second {
		t.Errorf("server defaults: %v %v, want 2s", d, ok)
	}
	if _, ok := retryDelay(p, 1, temporal.NewNonRetryableApplicationError("bad harness", "BadHarness", nil)); ok {
		t.Error("a non-retryable error is retried")
	}
	typed := &temporal.RetryPolicy{NonRetryableErrorTypes: []string{"BadHarness"}}
	if _, ok := retryDelay(typed, 1, temporal.NewApplicationError("bad harness", "BadHarness")); ok {
		t.Error("an error of a non-retryable type is retried")
	}
	if _, ok := retryDelay(nil, 1, plain); ok {
		t.Error("no policy known, yet a retry time")
	}
}

func TestNoteCarriesTheCauseLastLine(t *testing.T) {
	info := activity.Info{ActivityID: "7", Attempt: 2, ActivityType: activity.Type{Name: "Train"},
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 10 * time.Second, BackoffCoefficient: 2}}
	info.WorkflowExecution.ID = "train-demo"
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	err := errors.New("trainer of round 1 failed (exit 1); log ends:\nTraceback (most recent call last):\n  File \"torchrun.py\", line 3\nModuleNotFoundError: No module named 'torch'\n\n")
	n := Note(info, err, now)
	if n.Cause != "ModuleNotFoundError: No module named 'torch'" || n.Attempt != 2 || n.Activity != "Train" || n.Workflow != "train-demo" {
		t.Fatalf("note %+v", n)
	}
	if want := now.Add(20 * time.Second); !n.NextRetry.Equal(want) {
		t.Errorf("next retry %v, want %v", n.NextRetry, want)
	}
	line := Line(n, now)
	for _, want := range []string{"Train attempt 2 failed: ModuleNotFoundError: No module named 'torch'", "(in 20s)", "[train-demo]"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	if long := Cause(strings.Repeat("x", 1000)); len([]rune(long)) != maxCause {
		t.Errorf("cause of %d runes, want %d", len([]rune(long)), maxCause)
	}
	if l := Line(schemas.ActivityFailure{Activity: "A", Attempt: 1, Cause: "c"}, now); !strings.Contains(l, "not retried") {
		t.Errorf("no retry time: %q", l)
	}
}

func TestPrinterPrintsEachAttemptOnce(t *testing.T) {
	now := time.Now()
	f := func(id string, attempt int32) schemas.ActivityFailure {
		return schemas.ActivityFailure{Workflow: "w", Activity: "RunEpisode", ActivityID: id, Attempt: attempt, Cause: "model down"}
	}
	var p Printer
	var out bytes.Buffer
	if n := p.Print(&out, []schemas.ActivityFailure{f("1", 1)}, now); n != 1 {
		t.Fatalf("printed %d lines, want 1", n)
	}
	if n := p.Print(&out, []schemas.ActivityFailure{f("1", 1)}, now); n != 0 {
		t.Fatalf("the same attempt printed again:\n%s", out.String())
	}
	if n := p.Print(&out, []schemas.ActivityFailure{f("1", 2)}, now); n != 1 {
		t.Fatal("a new attempt of the same activity was not printed")
	}
	out.Reset()
	many := []schemas.ActivityFailure{f("a", 1), f("b", 1), f("c", 1), f("d", 1), f("e", 1)}
	if n := p.Print(&out, many, now); n != 4 || !strings.Contains(out.String(), "and 2 more failed attempts") {
		t.Fatalf("five new failures with Max 3: %d lines\n%s", n, out.String())
	}
}

type episodeArg struct{ id string }

func (e episodeArg) Label() string { return "episode " + e.id }

func TestLabelComesFromTheInput(t *testing.T) {
	if got := label([]any{episodeArg{"r1-train-g0-a1"}}); got != "episode r1-train-g0-a1" {
		t.Errorf("label = %q", got)
	}
	if got := label([]any{"run", 3}); got != "" {
		t.Errorf("label of plain arguments = %q, want none", got)
	}
}
