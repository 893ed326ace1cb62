package runs

import (
	"context"
	"fmt"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Sweep is a new sweep as `starter sweep create` asks for it.
type Sweep struct {
	Name    string
	Source  string // a run name, or s3://bucket/prefix/
	Run     string // the evaluation run
	InitKey string
	Config  string // the harness file, for messages
	Harness schemas.Harness
	// Own says Run is the sweep's own (it sweeps an s3 prefix), created
	// here when absent; a run named by the user must exist.
	Own bool
}

// PrepareSweep checks a new sweep against the bucket, then creates its own
// run: the leaderboard its name may already have must be of the same
// source, run and split, and an existing run must have the same harness.
// Episodes read the harness from the evaluation run.
func PrepareSweep(ctx context.Context, s *store.Store, w Sweep) error {
	var lb schemas.Leaderboard
	if err := store.GetJSON(ctx, s, schemas.SweepLeaderboard(w.Name), &lb); err != nil && !store.IsNotFound(err) {
		return err
	}
	if lb.Source != "" && (lb.Source != w.Source || lb.Run != w.Run || lb.InitKey != w.InitKey) {
		return fmt.Errorf("sweep name %s has a leaderboard of %s on %s in run %s (s3://%s/%s): choose another --name, or remove that leaderboard", w.Name, lb.Source, lb.InitKey, lb.Run, s.Bucket, schemas.SweepLeaderboard(w.Name))
	}
	old, exists, err := ReadHarness(ctx, s, w.Run)
	switch {
	case err != nil:
		return err
	case exists && old.Digest != w.Harness.Digest:
		return fmt.Errorf("run %s was started with another harness (digest %s; --config %s with these --var values gives %s): pass the run's harness file and vars", w.Run, old.Digest, w.Config, w.Harness.Digest)
	case !exists && !w.Own:
		return fmt.Errorf("run %s does not exist (no s3://%s/%s): start it with `starter train`, or sweep an s3 prefix with --weights-prefix", w.Run, s.Bucket, schemas.Layout{Run: w.Run}.Harness())
	case !exists:
		return PutHarness(ctx, s, w.Run, w.Harness)
	}
	return nil
}
