package store

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/cenkalti/backoff/v5"
)

// Unavailable reports whether err is storage out of reach or overloaded —
// no connection, a request that timed out, the SDK's retry budget spent,
// a 5xx or 429 answer — which waiting can cure, rather than an answer
// about the request (not found, denied, bad input).
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var op *net.OpError
	var quota ratelimit.QuotaExceededError
	var send *smithyhttp.RequestSendError
	if errors.As(err, &op) || errors.As(err, &quota) || errors.As(err, &send) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var resp *smithyhttp.ResponseError
	if errors.As(err, &resp) {
		code := resp.HTTPStatusCode()
		return code >= 500 || code == 429
	}
	return false
}

// OutageWait is how long a worker waits out a storage outage (Await's
// limit) before the step fails: episodes and model-server starts use it.
const OutageWait = 10 * time.Minute

// Await runs op until it succeeds, fails with an error that is not
// Unavailable, ctx ends or limit has passed, backing off from 1 s to 15 s
// between tries. An activity that waits out a storage outage this way
// keeps its retries for the failures they are meant for.
func Await(ctx context.Context, limit time.Duration, what string, op func() error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = time.Second, 15*time.Second
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := op()
		if err != nil && (!Unavailable(err) || ctx.Err() != nil) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(limit), backoff.WithNotify(func(err error, next time.Duration) {
		slog.Default().WarnContext(ctx, "storage unavailable; waiting", "op", what, "retry_in", next.Round(100*time.Millisecond), "error", err)
	}))
	return err
}
