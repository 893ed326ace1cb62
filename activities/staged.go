package activities

import (
	"context"
	"fmt"
	"sync"

	"go.temporal.io/sdk/activity"
	"golang.org/x/sync/errgroup"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// DropStagedInput names episodes of a round's phase whose staged tries
// may go: the workflow passes those it published or found published.
type DropStagedInput struct {
	Run      string
	Round    int32
	Phase    string
	Episodes []string
}

// DropStagedResult says what DropStaged deleted and what it kept.
type DropStagedResult struct {
	// Episodes is how many had a published row; their staged tries are
	// gone. Kept is how many had none; theirs stay.
	Episodes, Kept int
	// Objects and Bytes are what was deleted (as listed before deleting).
	Objects int
	Bytes   int64
}

// DropStaged deletes every staged try (staged/…/<episode>/) of the given
// episodes that have a published row, and keeps those of episodes without
// one. Once the row is published it is the fence: it names the accepted
// try, readers read only the tables, and Publish of that try again finds
// the row instead of its staged records (design §8). Staged records of an
// unpublished episode may still be waiting for Publish, so they stay.
// Running it again deletes nothing more (a missing key counts as
// deleted); a late try that stages after the drop writes beside the
// tables as before, where it is left.
func (c *Records) DropStaged(ctx context.Context, in DropStagedInput) (DropStagedResult, error) {
	l := schemas.Layout{Run: in.Run}
	var (
		mu   sync.Mutex
		res  DropStagedResult
		keys []string
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(publishWorkers)
	for _, id := range in.Episodes {
		g.Go(func() error {
			// Only the per-episode file counts: it is what Publish writes,
			// and a row found nowhere keeps the tries (the safe side).
			published, err := c.Store.Exists(gctx, l.Episodes(in.Round, in.Phase, id))
			if err != nil {
				return fmt.Errorf("drop staged tries of %s: %w", id, err)
			}
			if !published {
				mu.Lock()
				res.Kept++
				mu.Unlock()
				return nil
			}
			objs, err := c.Store.List(gctx, l.StagedEpisode(in.Round, in.Phase, id))
			if err != nil {
				return fmt.Errorf("drop staged tries of %s: %w", id, err)
			}
			mu.Lock()
			defer mu.Unlock()
			res.Episodes++
			for _, o := range objs {
				keys = append(keys, o.Key)
				res.Bytes += o.Size
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return DropStagedResult{}, err
	}
	activity.RecordHeartbeat(ctx, fmt.Sprintf("deleting %d staged objects of %d episodes", len(keys), res.Episodes))
	n, err := c.Store.DeleteKeys(ctx, keys)
	if err != nil {
		return DropStagedResult{}, fmt.Errorf("drop staged tries of round %d %s: %w", in.Round, in.Phase, err)
	}
	res.Objects = n
	activity.GetLogger(ctx).Info("staged tries dropped", "round", in.Round, "phase", in.Phase,
		"episodes", res.Episodes, "kept", res.Kept, "objects", res.Objects, "bytes", res.Bytes)
	return res, nil
}

// publishedTry reads the published row of an episode and returns its try,
// or "" when none is published (per-episode file; compacted rows are not
// looked for, as Publish runs before compaction).
func (c *Records) publishedTry(ctx context.Context, l schemas.Layout, round int32, phase, episode string) (string, error) {
	rows, err := store.ReadParquet[schemas.Episode](ctx, c.Store, l.Episodes(round, phase, episode))
	if store.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("published row of %s: %w", episode, err)
	}
	if len(rows) != 1 {
		return "", nil
	}
	return rows[0].Try, nil
}
