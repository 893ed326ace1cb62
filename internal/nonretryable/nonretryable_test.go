package nonretryable

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
)

type detail struct {
	Key string
	N   int
}

// serverSees is what the server decides retries from: the outermost
// failure the worker sends, whether it is non-retryable, and its type.
func serverSees(err error) (nonRetryable bool, typ, msg string) {
	f := temporal.GetDefaultFailureConverter().ErrorToFailure(err)
	info := f.GetApplicationFailureInfo()
	return info.GetNonRetryable(), info.GetType(), f.GetMessage()
}

func TestLift(t *testing.T) {
	const refusal = "harness h declares a text-only model"
	refuse := func() error {
		return temporal.NewNonRetryableApplicationError(refusal, "TextOnlyModel", nil, "first call 3", detail{"k", 7})
	}
	notFound := errors.New("NoSuchKey: runs/r/blobs/x.png")
	missing := temporal.NewNonRetryableApplicationError("image x.png is missing", "MissingBlob", notFound)
	sameText := temporal.NewNonRetryableApplicationError(notFound.Error(), "BadSource", notFound)
	retryable := temporal.NewApplicationError("s3 slow", "Outage")
	plain := errors.New("connection refused")
	for _, c := range []struct {
		name     string
		err      error
		same     bool   // comes back untouched
		typ, msg string // the lifted error's type and message
	}{
		{name: "nil", err: nil, same: true},
		{name: "plain", err: fmt.Errorf("round 1 batch: %w", plain), same: true},
		{name: "retryable application error, wrapped", err: fmt.Errorf("round 1 batch: %w", retryable), same: true},
		{name: "non-retryable, outermost", err: refuse(), same: true},
		{name: "non-retryable with its own cause, outermost", err: missing, same: true},
		{name: "retryable wrapping a non-retryable: the outer decision stands",
			err: temporal.NewApplicationError("try again", "Outage", refuse()), same: true},
		{name: "cancelled, with a refusal beside it", err: errors.Join(fmt.Errorf("stopping: %w", context.Canceled), refuse()), same: true},
		{name: "Temporal's cancellation, wrapped", err: fmt.Errorf("episode: %w", temporal.NewCanceledError()), same: true},
		{name: "wrapped once", err: fmt.Errorf("round 1 batch: %w", refuse()),
			typ: "TextOnlyModel", msg: "round 1 batch: " + refusal},
		{name: "wrapped twice", err: fmt.Errorf("round 1: %w", fmt.Errorf("batch: %w", refuse())),
			typ: "TextOnlyModel", msg: "round 1: batch: " + refusal},
		{name: "wrapped with %v-less text around", err: fmt.Errorf("fetch: %w (giving up)", refuse()),
			typ: "TextOnlyModel", msg: "fetch: " + refusal + " (giving up)"},
		{name: "wrapped, with a cause of its own", err: fmt.Errorf("round 2 images: %w", missing),
			typ: "MissingBlob", msg: "round 2 images: image x.png is missing: " + notFound.Error()},
		{name: "outermost, its message already its cause's text", err: sameText,
			typ: "BadSource", msg: notFound.Error()},
		{name: "wrapped, its message already its cause's text", err: fmt.Errorf("sweep: %w", sameText),
			typ: "BadSource", msg: "sweep: " + notFound.Error()},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Lift(c.err)
			if c.same {
				if got != c.err {
					t.Fatalf("Lift changed %v into %v", c.err, got)
				}
				return
			}
			var app *temporal.ApplicationError
			if !errors.As(got, &app) || error(app) != got {
				t.Fatalf("Lift(%v) = %T %v, want an *ApplicationError", c.err, got, got)
			}
			nr, typ, msg := serverSees(got)
			if !nr || typ != c.typ || msg != c.msg {
				t.Errorf("the server sees non-retryable %v, type %q, message %q; want true, %q, %q", nr, typ, msg, c.typ, c.msg)
			}
			if _, top := c.err.(*temporal.ApplicationError); !top {
				if before, _, _ := serverSees(c.err); before {
					t.Errorf("the case proves nothing: unlifted, the server already saw it non-retryable")
				}
			}
			if n := strings.Count(got.Error(), notFound.Error()); strings.Contains(c.msg, notFound.Error()) && n != 1 {
				t.Errorf("lifted error %q says its cause %d times", got.Error(), n)
			}
			if app.Unwrap() != nil {
				t.Errorf("lifted error keeps a cause %v; its message carries the text", app.Unwrap())
			}
		})
	}
	// Details travel with the lifted error, in order and typed.
	var app *temporal.ApplicationError
	errors.As(Lift(fmt.Errorf("round 1 batch: %w", refuse())), &app)
	var first string
	var second detail
	if err := app.Details(&first, &second); err != nil || first != "first call 3" || second != (detail{"k", 7}) {
		t.Errorf("details %q %+v (%v), want the refusal's", first, second, err)
	}
	if err := app.Details(new(string), new(detail), new(string)); err == nil {
		t.Errorf("the lifted error holds more than the refusal's two details")
	}
	if strings.Count(app.Error(), refusal) != 1 {
		t.Errorf("lifted error %q names the refusal more than once", app.Error())
	}
}

// wrapsRefusal fails as an activity that wraps a non-retryable error.
func wrapsRefusal(ctx context.Context) error {
	return fmt.Errorf("round 1 batch: %w", temporal.NewNonRetryableApplicationError("no images here", "TextOnlyModel", nil))
}

// TestInterceptor: on a worker with the interceptor, an activity's wrapped
// refusal reaches Temporal non-retryable at the outermost level; without
// it, as a retryable wrapError.
func TestInterceptor(t *testing.T) {
	outermost := func(icpt []interceptor.WorkerInterceptor) *temporal.ApplicationError {
		var s testsuite.WorkflowTestSuite
		env := s.NewTestActivityEnvironment()
		env.SetWorkerOptions(worker.Options{Interceptors: icpt})
		env.RegisterActivity(wrapsRefusal)
		_, err := env.ExecuteActivity(wrapsRefusal)
		// The environment returns an ActivityError whose cause is the
		// outermost failure the worker reported.
		var app *temporal.ApplicationError
		if !errors.As(errors.Unwrap(err), &app) {
			t.Fatalf("activity error %v has no application failure", err)
		}
		return app
	}
	if app := outermost(nil); app.NonRetryable() || app.Type() == "TextOnlyModel" {
		t.Fatalf("without the interceptor the outermost failure is %q non-retryable %v: the test shows nothing", app.Type(), app.NonRetryable())
	}
	app := outermost([]interceptor.WorkerInterceptor{Interceptor()})
	if !app.NonRetryable() || app.Type() != "TextOnlyModel" || app.Message() != "round 1 batch: no images here" {
		t.Errorf("with the interceptor: %q non-retryable %v message %q", app.Type(), app.NonRetryable(), app.Message())
	}
}
