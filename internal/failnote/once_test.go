package failnote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/internal/nonretryable"
)

const refusal = "harness h declares a text-only model (model_server.vision is false) but 3 selected calls sent images"

// refuseBatch fails as BuildBatch does: a refusal wrapped by the activity.
func refuseBatch(ctx context.Context) error {
	return fmt.Errorf("round 1 batch: %w", temporal.NewNonRetryableApplicationError(refusal, "TextOnlyModel", nil))
}

// trainRound wraps the activity's error as the Train workflow does.
func trainRound(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	if err := workflow.ExecuteActivity(ctx, refuseBatch).Get(ctx, nil); err != nil {
		return fmt.Errorf("round 1 batch: %w", err)
	}
	return nil
}

// finalError is the error a client gets for trainRound, on a worker with
// the interceptors given: the SDK's failures, converted both ways.
func finalError(t *testing.T, icpt []interceptor.WorkerInterceptor) error {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: icpt})
	env.RegisterWorkflow(trainRound)
	env.RegisterActivity(refuseBatch)
	env.ExecuteWorkflow(trainRound)
	err := env.GetWorkflowError()
	if err == nil {
		t.Fatal("trainRound succeeded")
	}
	return err
}

// TestOnce: the workflow's failure printed by Text names the refusal once;
// the SDK's own Error() repeats it, for each layer that wraps it.
func TestOnce(t *testing.T) {
	lifted := finalError(t, []interceptor.WorkerInterceptor{nonretryable.Interceptor()})
	got := Once(lifted).Error()
	t.Logf("SDK: %s\nText: %s", lifted.Error(), got)
	if n := strings.Count(lifted.Error(), refusal); n < 2 {
		t.Errorf("the SDK's text names the refusal %d times: the test shows nothing", n)
	}
	if n := strings.Count(got, refusal); n != 1 {
		t.Errorf("Text names the refusal %d times, want once: %s", n, got)
	}
	if strings.Contains(got, "wrapError") {
		t.Errorf("Text names a Go error's type: %s", got)
	}
	for _, want := range []string{"workflow execution error", "round 1 batch: activity error (type: refuseBatch", "round 1 batch: " + refusal + " (type: TextOnlyModel, retryable: false)"} {
		if !strings.Contains(got, want) {
			t.Errorf("Text lost %q: %s", want, got)
		}
	}
	var app *temporal.ApplicationError
	if !errors.As(Once(lifted), &app) {
		t.Errorf("Once hides the chain from errors.As")
	}
	if Once(nil) != nil {
		t.Errorf("Once(nil) is not nil")
	}

	// Unlifted, the activity's own wrapping shows in the failure's
	// message too: what the worker sends matters (internal/nonretryable).
	t.Logf("without the interceptor: %s", Text(finalError(t, nil)))
}

func TestText(t *testing.T) {
	base := errors.New("NoSuchKey")
	app := temporal.NewNonRetryableApplicationError("s3://b/k: NoSuchKey", "BadSource", base)
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"plain", base, "NoSuchKey"},
		{"wrapped plainly", fmt.Errorf("a: %w", fmt.Errorf("b: %w", base)), "a: b: NoSuchKey"},
		{"a message that holds its cause", fmt.Errorf("read: %w", app), "read: s3://b/k: NoSuchKey (type: BadSource, retryable: false)"},
		{"a layer that repeats the rest", fmt.Errorf("round 1: activity failed: x: %w", fmt.Errorf("activity failed: %w", errors.New("x"))),
			"round 1: activity failed: x"},
		{"joined: said whole", fmt.Errorf("both: %w", errors.Join(base, errors.New("other"))), "both: NoSuchKey\nother"},
	} {
		if got := Text(c.err); got != c.want {
			t.Errorf("%s: Text = %q, want %q", c.name, got, c.want)
		}
	}
}
