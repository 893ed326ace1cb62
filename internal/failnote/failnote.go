// Package failnote makes a failing activity visible while Temporal still
// retries it. Temporal keeps retrying an activity with back-off (a broken
// trainer is retried for as long as it takes someone to fix the host), and
// until the retries run out the workflow itself hears nothing. So:
//
//   - on the worker, Interceptor signals the activity's workflow after every
//     failed attempt (and once after a later attempt succeeds), and the
//     workflow shows the failure in its current details in the Temporal UI;
//   - on the client, Pending reads the same from the server's description of
//     a workflow and its running children, for the terminal.
package failnote

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// maxCause bounds the cause carried in a signal and shown in a table.
const maxCause = 300

// signalTimeout bounds the signal after a failed attempt: Temporal being
// slow must not hold the attempt's failure report back for long.
const signalTimeout = 5 * time.Second

// Interceptor returns the worker interceptor that signals each failed
// attempt (a schemas.ActivityFailure) through c to the activity's workflow
// under the signal name given (api.ActivityFailureSignal).
func Interceptor(c client.Client, signal string) interceptor.WorkerInterceptor {
	return &workerInterceptor{c: c, signal: signal}
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	c      client.Client
	signal string
}

func (w *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityInbound{c: w.c, signal: w.signal}
	a.Next = next
	return a
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	c      client.Client
	signal string
}

func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := a.Next.ExecuteActivity(ctx, in)
	info := activity.GetInfo(ctx)
	if info.IsLocalActivity || info.WorkflowExecution.ID == "" {
		return res, err
	}
	var note schemas.ActivityFailure
	switch {
	case err != nil:
		note = Note(info, err, time.Now())
		note.Label = label(in.Args)
	case info.Attempt > 1:
		note = schemas.ActivityFailure{Workflow: info.WorkflowExecution.ID, Activity: info.ActivityType.Name,
			ActivityID: info.ActivityID, Attempt: info.Attempt, Recovered: true}
	default:
		return res, err
	}
	// The activity's own context may be cancelled already (that can be why
	// it failed): the signal gets a fresh, bounded one.
	sctx, cancel := context.WithTimeout(context.Background(), signalTimeout)
	defer cancel()
	if serr := a.c.SignalWorkflow(sctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID, a.signal, note); serr != nil {
		activity.GetLogger(ctx).Warn("failure not signalled to the workflow", "activity", info.ActivityType.Name, "error", serr)
	}
	return res, err
}

// labeller is an activity input that can name what it works on.
type labeller interface{ Label() string }

// label is the first argument's Label, or "".
func label(args []any) string {
	for _, a := range args {
		if l, ok := a.(labeller); ok {
			return l.Label()
		}
	}
	return ""
}

// Note describes attempt info.Attempt failing with err at now, with the
// time of the next attempt the retry policy gives (zero when none).
func Note(info activity.Info, err error, now time.Time) schemas.ActivityFailure {
	n := schemas.ActivityFailure{Workflow: info.WorkflowExecution.ID, Activity: info.ActivityType.Name,
		ActivityID: info.ActivityID, Attempt: info.Attempt, Cause: Cause(err.Error()), FailedAt: now.UTC()}
	if d, ok := retryDelay(info.RetryPolicy, info.Attempt, err); ok {
		n.NextRetry = now.Add(d).UTC()
	}
	return n
}

// retryDelay is the server's back-off after attempt failed with err, and
// whether it retries at all.
func retryDelay(p *temporal.RetryPolicy, attempt int32, err error) (time.Duration, bool) {
	if p == nil {
		return 0, false
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		if app.NonRetryable() {
			return 0, false
		}
		for _, t := range p.NonRetryableErrorTypes {
			if t == app.Type() {
				return 0, false
			}
		}
	}
	if p.MaximumAttempts > 0 && attempt >= p.MaximumAttempts {
		return 0, false
	}
	initial := p.InitialInterval
	if initial <= 0 {
		initial = time.Second
	}
	coef := p.BackoffCoefficient
	if coef < 1 {
		coef = 2
	}
	maxI := p.MaximumInterval
	if maxI <= 0 {
		maxI = 100 * initial
	}
	d := float64(initial) * math.Pow(coef, float64(attempt-1))
	if d > float64(maxI) || math.IsInf(d, 0) {
		return maxI, true
	}
	return time.Duration(d), true
}

// Cause is the last non-empty line of a failure message, where a log tail
// or a Python traceback puts the reason, bounded in length.
func Cause(msg string) string {
	c := proc.LastLine(msg)
	if r := []rune(c); len(r) > maxCause {
		c = string(r[:maxCause-1]) + "…"
	}
	return c
}

// Line renders one failure for the terminal, relative to now.
func Line(f schemas.ActivityFailure, now time.Time) string {
	next := "not retried"
	if !f.NextRetry.IsZero() {
		if wait := f.NextRetry.Sub(now).Round(time.Second); wait > 0 {
			next = fmt.Sprintf("retried at %s (in %s)", f.NextRetry.Local().Format("15:04:05"), wait)
		} else {
			next = "retrying now"
		}
	}
	return fmt.Sprintf("! %s attempt %d failed: %s; %s [%s]", f.Activity, f.Attempt, f.Cause, next, f.Workflow)
}
