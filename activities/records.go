package activities

import (
	"context"
	"sort"

	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Records holds the activities of the control queue: they keep a run's
// records in S3 without running harness code (batches, publishing, state,
// reports, sweeps), and tell the fleet workflow what episodes wait for
// (demand.go). Workers register the struct, so its exported methods are
// exactly the activities, named by method alone: renaming one breaks
// running workflows and the recorded histories.
type Records struct {
	Store    *store.Store
	Temporal client.Client // for Demand; nil where no fleet runs

	harnesses harnessCache
}

// readEpisodes reads every episode row of a round's phase, compacted or not.
func (c *Records) readEpisodes(ctx context.Context, run string, round int32, phase string) ([]schemas.Episode, error) {
	out, err := store.ReadTable(ctx, c.Store, schemas.Layout{Run: run}.EpisodesDir(round, phase), episodeID)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].EpisodeID < out[j].EpisodeID })
	return out, nil
}

func episodeID(e schemas.Episode) string { return e.EpisodeID }

func callEpisode(c schemas.Call) string { return c.EpisodeID }
