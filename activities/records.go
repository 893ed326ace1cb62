package activities

import (
	"context"
	"sort"

	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Control holds the activities that read and write the run's data in S3
// without running harness code: batches, reports and state; and the one
// that tells the fleet workflow what episodes wait for (fleet.go).
type Control struct {
	Store    *store.Store
	Temporal client.Client // for Demand; nil where no fleet runs

	harnesses harnessCache
}

// readEpisodes reads every episode row of a round's phase, compacted or not.
func (c *Control) readEpisodes(ctx context.Context, run string, round int32, phase string) ([]schemas.Episode, error) {
	out, err := store.ReadTable(ctx, c.Store, schemas.Layout{Run: run}.EpisodesDir(round, phase), episodeID)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].EpisodeID < out[j].EpisodeID })
	return out, nil
}

func episodeID(e schemas.Episode) string { return e.EpisodeID }

func callEpisode(c schemas.Call) string { return c.EpisodeID }
