package activities

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"sync/atomic"

	"github.com/parquet-go/parquet-go"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// PublishInput names the tries a workflow accepted, one per episode.
type PublishInput struct {
	Run   string
	Round int32
	Phase string
	Tries []AcceptedTry
	// Rerun: the workflow runs a corrupt try's episode again, so Publish
	// returns corrupt tries in its result. False (histories from before
	// reruns): a corrupt try fails Publish, naming it.
	Rerun bool
}

// AcceptedTry is an episode and the try whose result the workflow took.
type AcceptedTry struct {
	EpisodeID string
	Try       string
}

// PublishResult says what Publish put into the tables and what it refused.
type PublishResult struct {
	Published int
	// Corrupt lists the tries whose staged records would not decode or
	// disagree with each other; nothing of theirs was published.
	Corrupt []CorruptTry `json:",omitempty"`
}

// CorruptTry is a refused try and why.
type CorruptTry struct {
	EpisodeID string
	Try       string
	Reason    string
}

// Publish checks each accepted try's staged records and copies its calls,
// then its row, into the phase's tables (a row marks its records
// complete). The check reads both objects: they must decode, the row must
// be this episode's and this try's, and the calls must be exactly the
// row's num_calls, all of the same try. A try that fails it is not
// published but returned as corrupt, for the workflow to run the episode
// again: a truncated or damaged object never reaches a reader.
// Publish copies the same bytes however often it runs, so retries and
// replays publish the same thing. A try whose staged records are gone is
// published when its episode's row names it (DropStaged deleted them
// after publishing); otherwise they cannot be recovered by retrying and
// stop it.
func (c *Records) Publish(ctx context.Context, in PublishInput) (PublishResult, error) {
	l := schemas.Layout{Run: in.Run}
	reasons := make([]string, len(in.Tries))
	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(publishWorkers)
	for i, t := range in.Tries {
		g.Go(func() error {
			reason, err := c.publishTry(gctx, l, in, t)
			if errors.Is(err, errMissingStaged) {
				// The staged records go once the row is published
				// (DropStaged): a row naming this try is this try published.
				try, perr := c.publishedTry(gctx, l, in.Round, in.Phase, t.EpisodeID)
				if perr != nil {
					return perr
				}
				if try != t.Try {
					return err
				}
				reason, err = "", nil
			}
			if err != nil {
				return err
			}
			if reason != "" {
				reasons[i] = reason
				return nil
			}
			activity.RecordHeartbeat(ctx, fmt.Sprintf("published %d of %d", done.Add(1), len(in.Tries)))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return PublishResult{}, err
	}
	res := PublishResult{Published: int(done.Load())}
	for i, reason := range reasons {
		if reason == "" {
			continue
		}
		t := in.Tries[i]
		activity.GetLogger(ctx).Warn("staged try refused", "episode", t.EpisodeID, "try", t.Try, "reason", reason)
		if !in.Rerun {
			return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("publish episode %s try %s: %s", t.EpisodeID, t.Try, reason), "CorruptStaged", nil)
		}
		res.Corrupt = append(res.Corrupt, CorruptTry{EpisodeID: t.EpisodeID, Try: t.Try, Reason: reason})
	}
	return res, nil
}

// publishTry checks one staged try and copies its calls, then its row,
// into the tables; it returns why the try was refused, or "" when it was
// published.
func (c *Records) publishTry(ctx context.Context, l schemas.Layout, in PublishInput, t AcceptedTry) (string, error) {
	staged := l.Staged(in.Round, in.Phase, t.EpisodeID, t.Try)
	reason, err := c.checkStaged(ctx, staged, t)
	if err != nil || reason != "" {
		return reason, err
	}
	for _, cp := range []struct{ src, dst string }{
		{staged + StagedCalls, l.Calls(in.Round, in.Phase, t.EpisodeID)},
		{staged + StagedRow, l.Episodes(in.Round, in.Phase, t.EpisodeID)},
	} {
		if err := c.Store.Copy(ctx, cp.src, cp.dst); err != nil {
			if store.IsNotFound(err) {
				return "", missingStaged(t, cp.src, err)
			}
			return "", fmt.Errorf("publish episode %s try %s: %w", t.EpisodeID, t.Try, err)
		}
	}
	return "", nil
}

// publishWorkers bounds the tries Publish checks and copies at once: each
// is two small reads and two server-side copies, so the time is S3's
// round trips, not bandwidth.
const publishWorkers = 8

// errMissingStaged marks a try whose staged records are gone: Publish
// then looks whether the row already names it.
var errMissingStaged = errors.New("staged records are gone")

func missingStaged(t AcceptedTry, key string, err error) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("publish episode %s try %s: its staged records are gone (%s)", t.EpisodeID, t.Try, key), "MissingStaged", fmt.Errorf("%w: %w", errMissingStaged, err))
}

// checkStaged reads a staged try and returns why it cannot be published,
// or "" when it can. An error is storage failing (retried) or the records
// missing (not retried).
func (c *Records) checkStaged(ctx context.Context, staged string, t AcceptedTry) (string, error) {
	rows, reason, err := readStaged[schemas.Episode](ctx, c.Store, staged+StagedRow, t)
	if err != nil || reason != "" {
		return reason, err
	}
	calls, reason, err := readStaged[schemas.Call](ctx, c.Store, staged+StagedCalls, t)
	if err != nil || reason != "" {
		return reason, err
	}
	if len(rows) != 1 {
		return fmt.Sprintf("%s holds %d rows, not 1", StagedRow, len(rows)), nil
	}
	row := rows[0]
	if row.EpisodeID != t.EpisodeID || row.Try != t.Try {
		return fmt.Sprintf("%s is episode %s try %s", StagedRow, row.EpisodeID, row.Try), nil
	}
	if len(calls) != int(row.NumCalls) {
		return fmt.Sprintf("%s holds %d calls where the row says num_calls %d", StagedCalls, len(calls), row.NumCalls), nil
	}
	seen := make([]bool, len(calls))
	for _, cl := range calls {
		if cl.EpisodeID != row.EpisodeID || cl.Retry != row.Retry {
			return fmt.Sprintf("%s holds a call of episode %s retry %d", StagedCalls, cl.EpisodeID, cl.Retry), nil
		}
		if cl.CallIndex < 0 || int(cl.CallIndex) >= len(seen) || seen[cl.CallIndex] {
			return fmt.Sprintf("%s: call_index %d repeated or out of 0–%d", StagedCalls, cl.CallIndex, len(calls)-1), nil
		}
		seen[cl.CallIndex] = true
	}
	return "", nil
}

// readStaged reads one staged Parquet object; an object that does not
// decode is a reason, not an error.
func readStaged[T any](ctx context.Context, s *store.Store, key string, t AcceptedTry) ([]T, string, error) {
	b, err := s.Get(ctx, key)
	if err != nil {
		if store.IsNotFound(err) {
			return nil, "", missingStaged(t, key, err)
		}
		return nil, "", fmt.Errorf("publish episode %s try %s: %w", t.EpisodeID, t.Try, err)
	}
	rows, err := parquet.Read[T](bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, fmt.Sprintf("%s (%d bytes) does not decode: %v", path.Base(key), len(b), err), nil
	}
	return rows, "", nil
}
