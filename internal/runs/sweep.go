package runs

import (
	"context"
	"errors"
	"fmt"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Sweep is a new sweep as `starter sweep create` asks for it. Check
// checks it and fills in what it finds; PrepareSweep writes it.
type Sweep struct {
	Name   string
	Source string // a run name, or s3://bucket/prefix/ (Check sets it)
	// Run is --run, the run whose weights are swept; after Check, the
	// evaluation run: that one, or the sweep's own.
	Run      string
	Prefix   string // --weights-prefix: s3://bucket/prefix/
	InitKey  string
	Parallel int
	Priority int
	Config   string   // the harness file
	Vars     []string // --var name=value
	Harness  schemas.Harness
	// Own says Run is the sweep's own (it sweeps an s3 prefix), created
	// here when absent; a run named by the user must exist.
	Own bool
}

// CheckSweepName refuses names that cannot name a schedule, a run and keys.
func CheckSweepName(name string) error {
	if !NamePattern.MatchString(name) || !NamePattern.MatchString(schemas.SweepRun(name)) {
		return fmt.Errorf("--name %q: give a sweep name of letters, digits, '.', '_' or '-' (at most 90)", name)
	}
	return nil
}

// Check checks the inputs of a new sweep that need no server — its source
// (--run or --weights-prefix in the bucket workers read), split,
// parallelism, priority — and loads its harness. The starter checks the
// name (CheckSweepName) and the schedule (api.SweepSpec) before it.
func (w *Sweep) Check(bucket string) error {
	switch {
	case w.Run != "" && w.Prefix != "":
		return errors.New("--run and --weights-prefix both given: sweep the weights of a run (--run R) or of an s3 prefix (--weights-prefix s3://bucket/prefix/), not both")
	case w.Run == "" && w.Prefix == "":
		return errors.New("--run or --weights-prefix is required: --run R sweeps runs/R/weights/, --weights-prefix s3://bucket/prefix/ the weights ids under it")
	case w.Run != "":
		if !NamePattern.MatchString(w.Run) {
			return fmt.Errorf("--run %q: give the name of a run of letters, digits, '.', '_' or '-'", w.Run)
		}
		w.Source = w.Run
	default:
		b, _, err := store.ParseURL(w.Prefix)
		if err != nil {
			return fmt.Errorf("--weights-prefix: %w", err)
		}
		if b != bucket {
			return fmt.Errorf("--weights-prefix %s is in bucket %s, but workers read bucket %s: copy the weights into s3://%s/… or run with --bucket %s", w.Prefix, b, bucket, bucket, b)
		}
		w.Source, w.Run, w.Own = w.Prefix, schemas.SweepRun(w.Name), true
	}
	if err := CheckPriority(w.Priority); err != nil {
		return err
	}
	if w.InitKey != "val_init_ids" && w.InitKey != "eval_init_ids" {
		return fmt.Errorf("--init-key %q: use val_init_ids or eval_init_ids", w.InitKey)
	}
	if w.Parallel < 1 {
		return fmt.Errorf("--parallel %d: need at least 1", w.Parallel)
	}
	if w.Config == "" {
		return errors.New("--config is required: pass the harness file the evaluations run, e.g. --config harnesses/minimal/harness.yaml")
	}
	vars, err := harness.ParseVars(w.Vars)
	if err != nil {
		return err
	}
	w.Harness, err = harness.Load(w.Config, vars)
	return err
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
