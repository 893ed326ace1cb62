// Package nonretryable keeps a non-retryable activity error non-retryable
// however the activity wrapped it. Temporal decides whether to retry from
// the outermost failure alone: an activity that returns
// fmt.Errorf("round 1 batch: %w", err), err a non-retryable
// *temporal.ApplicationError, reaches the server as a retryable failure
// of type "wrapError" with the refusal as its cause, and is retried until
// its policy runs out. The worker interceptor lifts the refusal to the top,
// for every activity of the worker (docs/design.md §7).
package nonretryable

import (
	"context"
	"errors"
	"strings"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
)

// Interceptor returns the worker interceptor that passes each activity's
// error through Lift.
func Interceptor() interceptor.WorkerInterceptor { return &workerInterceptor{} }

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
}

func (*workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &inbound{}
	a.Next = next
	return a
}

type inbound struct {
	interceptor.ActivityInboundInterceptorBase
}

func (a *inbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := a.Next.ExecuteActivity(ctx, in)
	return res, Lift(err)
}

// maxDetails bounds the detail values carried over.
const maxDetails = 16

// Lift is err as Temporal should see it. When the first
// *temporal.ApplicationError of err's chain is non-retryable and is not
// err itself, Lift returns a non-retryable ApplicationError of its type,
// category and details whose message is err's whole message: the wrapping
// layers' words, then the refusal's message once (without the SDK's
// "(type: …, retryable: false)"), then its cause's text unless that
// message holds it already. The lifted error has no cause: its message
// carries the text. A non-retryable err whose message holds its cause's
// text loses the cause the same way, so its failure says it once.
//
// Everything else comes back as it is: nil, retryable and plain errors,
// whose retries their policy decides, and cancellations, which the SDK
// reports as such.
func Lift(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return err
	}
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !app.NonRetryable() {
		return err
	}
	cause := app.Unwrap()
	if cause != nil && strings.Contains(app.Message(), cause.Error()) {
		cause = nil // the message says it already
	}
	if err == error(app) && cause == app.Unwrap() {
		return err // outermost, and saying each thing once
	}
	said := app.Message()
	if cause != nil {
		said += ": " + cause.Error()
	}
	// Each wrapping layer printed app.Error() whole; the lifted message
	// says app once, as its message (and cause).
	msg := strings.Replace(err.Error(), app.Error(), said, 1)
	return temporal.NewApplicationErrorWithOptions(msg, app.Type(), temporal.ApplicationErrorOptions{
		NonRetryable: true, Details: details(app), Category: app.Category()})
}

// details are app's detail values. ApplicationError does not say how many
// it holds: Details fills as many values as it is given pointers, and fails
// (or panics, on a nil value) when given more than it holds.
func details(app *temporal.ApplicationError) []any {
	if !app.HasDetails() {
		return nil
	}
	var out []any
	for n := 1; n <= maxDetails; n++ {
		vals, ok := detailsN(app, n)
		if !ok {
			break
		}
		out = vals
	}
	// Decoded details (payloads) fill no more than they hold and leave the
	// rest nil without failing.
	for len(out) > 0 && out[len(out)-1] == nil {
		out = out[:len(out)-1]
	}
	return out
}

// detailsN reads n detail values, if app holds that many.
func detailsN(app *temporal.ApplicationError, n int) (vals []any, ok bool) {
	defer func() {
		if recover() != nil {
			vals, ok = nil, false
		}
	}()
	vals = make([]any, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := app.Details(ptrs...); err != nil {
		return nil, false
	}
	return vals, true
}
