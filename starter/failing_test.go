package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// A trainer broken on purpose (its python has no torch) is still retried,
// but `starter train` prints the first failed attempt with its cause and the
// time of the retry, and `starter status` and the workflow's current details
// in the Temporal UI show it too. The round has 4 groups of 6 attempts, so
// that some group has reward diversity (a round without one trains
// nothing, and the test then says so).
func TestBrokenTrainerShowsWithinOneRetry(t *testing.T) {
	itest.Slow(t)
	stack := itest.Start(t)
	bins := itest.Binaries(t)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stack.StartWorker(t, bins, "main")

	python := filepath.Join(t.TempDir(), "python3")
	fake := "#!/bin/sh\necho 'Traceback (most recent call last):' >&2\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"
	if err := os.WriteFile(python, []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	const run = "itest-broken-trainer"
	cmd := stack.Starter(ctx, t, bins, "train", "--config", filepath.Join(root, "harnesses/minimal/harness.yaml"),
		"--run", run, "--weights", filepath.Join(root, "harnesses/minimal/weights/w0"), "--rounds", "1", "--groups", "4", "--attempts", "6",
		"--var", "bin="+bins, "--var", "python="+python)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); pw.Close(); close(exited) }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()

	// Read the terminal until the first failed trainer attempt shows.
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seen []string
	var failure string
	for failure == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("starter train ended before showing the trainer's failure (did the round train? samples > 0 needed):\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if strings.HasPrefix(l, "! Train ") {
				failure = l
			}
		case <-ctx.Done():
			t.Fatalf("no failing trainer shown in time:\n%s", strings.Join(seen, "\n"))
		}
	}
	// The first line is the first attempt: the user hears before the retry.
	for _, want := range []string{"! Train attempt 1 failed: ModuleNotFoundError: No module named 'torch'", "retried at", "[" + api.WorkflowID(run) + "]"} {
		if !strings.Contains(failure, want) {
			t.Errorf("failure line %q lacks %q", failure, want)
		}
	}

	// `starter status` from another terminal says it too.
	if out, err := stack.Starter(ctx, t, bins, "status", "--run", run).CombinedOutput(); err != nil || !strings.Contains(string(out), "Train attempt ") ||
		!strings.Contains(string(out), "ModuleNotFoundError: No module named 'torch'") {
		t.Errorf("starter status does not show the failing trainer (%v):\n%s", err, out)
	}

	// The same in the current details the Temporal UI shows.
	c, err := connect.Temporal(ctx, stack.Endpoints, tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var details string
	for range 60 {
		v, err := c.QueryWorkflow(ctx, api.WorkflowID(run), "", "__temporal_workflow_metadata")
		if err == nil {
			var md sdkpb.WorkflowMetadata
			if v.Get(&md) == nil {
				details = md.GetCurrentDetails()
				if strings.Contains(details, "| Train ") {
					break
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("terminal: %s\ncurrent details:\n%s", failure, details)
	if !strings.Contains(details, "| Train round 1, w0 → r1 | ") || !strings.Contains(details, "ModuleNotFoundError: No module named 'torch'") ||
		!strings.Contains(details, "| failing activity |") {
		t.Errorf("current details do not show the failing trainer:\n%s", details)
	}
	if err := c.TerminateWorkflow(ctx, api.WorkflowID(run), "", "test done"); err != nil {
		t.Logf("terminate: %v", err)
	}
}

// A harness that declares a text-only model but whose episodes sent
// images is refused by BuildBatch with a non-retryable error. The refusal
// must end the run on its first attempt, though the activity wraps it and
// the control queue's policy would retry 10 times, and `starter train`
// must print its sentence once (docs/design.md §7, "Non-retryable stays
// non-retryable").
func TestTextOnlyRefusalFailsOnFirstAttempt(t *testing.T) {
	itest.Slow(t)
	stack := itest.Start(t)
	bins := itest.Binaries(t)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stack.StartWorker(t, bins, "main")

	// The minimal harness's vision task alone, its model declared
	// text-only: every call sends the camera image.
	cfg := filepath.Join(t.TempDir(), "text-only.yaml")
	yaml := "base: " + filepath.Join(root, "harnesses/minimal/harness.yaml") + "\nname: minimal-text-only\n" +
		"model_server:\n  vision: false\ntasks:\n  - {id: 6, name: cube_in_marked_container, suite: vision}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	const run = "itest-text-only"
	out, err := stack.Starter(ctx, t, bins, "train", "--config", cfg, "--run", run,
		"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"), "--rounds", "1", "--groups", "8", "--attempts", "6",
		"--var", "bin="+bins).CombinedOutput()
	t.Logf("starter train (%v):\n%s", err, out)
	if err == nil {
		t.Fatal("starter train succeeded; want the text-only refusal (did the round select calls? a group with reward diversity is needed)")
	}
	var final string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "error: ") {
			final = l
		}
	}
	const sentence = "harness minimal-text-only declares a text-only model (model_server.vision is false)"
	if n := strings.Count(final, sentence); n != 1 {
		t.Errorf("the final error names the refusal %d times, want once:\n%s", n, final)
	}

	// The history: BuildBatch started once, failed non-retryable.
	c, err := connect.Temporal(ctx, stack.Endpoints, tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	scheduled := map[int64]bool{}
	var attempts []int32
	var failure *failurepb.Failure
	var first, failed time.Time
	it := c.GetWorkflowHistory(ctx, api.WorkflowID(run), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "BuildBatch" {
			scheduled[e.GetEventId()] = true
			first = e.GetEventTime().AsTime()
		}
		if a := e.GetActivityTaskStartedEventAttributes(); a != nil && scheduled[a.GetScheduledEventId()] {
			attempts = append(attempts, a.GetAttempt())
		}
		if a := e.GetActivityTaskFailedEventAttributes(); a != nil && scheduled[a.GetScheduledEventId()] {
			failure = a.GetFailure()
			failed = e.GetEventTime().AsTime()
		}
	}
	t.Logf("BuildBatch: scheduled to failed for good in %s", failed.Sub(first).Round(time.Second))
	if len(attempts) != 1 || attempts[0] != 1 {
		t.Errorf("BuildBatch started with attempts %v, want [1]", attempts)
	}
	info := failure.GetApplicationFailureInfo()
	if !info.GetNonRetryable() || info.GetType() != "TextOnlyModel" || !strings.Contains(failure.GetMessage(), sentence) {
		t.Errorf("BuildBatch's failure: non-retryable %v, type %q, message %q; want a non-retryable TextOnlyModel naming the refusal",
			info.GetNonRetryable(), info.GetType(), failure.GetMessage())
	}
}
