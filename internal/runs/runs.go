// Package runs prepares and changes a run's prefix in the bucket as the
// starter's commands need it: a new run (run.json, its starting weights,
// its pool report, harness.json), resuming or replacing one, the weights
// an evaluation publishes, and an evaluation's tag (what it holds, whether
// an evaluation may write there, wiping it, merging its shard reports).
// The starter parses flags and prints; this package reads and writes, so
// tests use it without a command line. Errors are worded for the starter's
// users and name its flags.
package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// NamePattern is what a run's (or a sweep's) name may be: it becomes a
// prefix in the bucket and part of workflow and schedule ids.
var NamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// CheckPriority refuses a priority out of range; 0 stands for the
// default (flag structs built in code, commands without the flag).
func CheckPriority(p int) error {
	if p < 0 || p > fleet.MaxPriority {
		return fmt.Errorf("--priority %d: give 1 (served first) to %d", p, fleet.MaxPriority)
	}
	return nil
}

// ReadHarness reads a run's harness.json; ok is false when the run has
// none (an unknown run).
func ReadHarness(ctx context.Context, s *store.Store, run string) (h schemas.Harness, ok bool, err error) {
	err = store.GetJSON(ctx, s, schemas.Layout{Run: run}.Harness(), &h)
	if store.IsNotFound(err) {
		return h, false, nil
	}
	return h, err == nil, err
}

// PutHarness writes a run's harness.json, which episodes and the trainer
// read.
func PutHarness(ctx context.Context, s *store.Store, run string, h schemas.Harness) error {
	b, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode harness: %w", err)
	}
	return s.Put(ctx, schemas.Layout{Run: run}.Harness(), b)
}

// Exists says whether a run has started: its harness.json exists.
func Exists(ctx context.Context, s *store.Store, run string) (bool, error) {
	return s.Exists(ctx, schemas.Layout{Run: run}.Harness())
}

// Wipe deletes everything under a run's prefix (`starter train
// --replace`) and returns how many objects it deleted.
func Wipe(ctx context.Context, s *store.Store, run string) (int, error) {
	return s.DeletePrefix(ctx, schemas.Layout{Run: run}.Prefix())
}

// Create writes a new run's run.json first — if anything after it fails, a
// retry of the same command resumes instead of refusing an existing run —
// then its starting weights as weights id w0 and, when given, the report
// that chooses round 1's pool (at spec.PoolReport).
func Create(ctx context.Context, s *store.Store, spec schemas.RunSpec, w Weights, pool []byte) error {
	l := schemas.Layout{Run: spec.Run}
	if err := store.PutJSON(ctx, s, l.RunSpec(), spec); err != nil {
		return err
	}
	if err := w.Publish(ctx, s, l.Weights("w0"), "w0"); err != nil {
		return err
	}
	if pool != nil {
		if err := s.Put(ctx, spec.PoolReport, pool); err != nil {
			return err
		}
	}
	return nil
}

// Load reads what a run that is not running resumes from: the run.json it
// was started with and its state.json (that of a run before its first
// round is done when absent).
func Load(ctx context.Context, s *store.Store, run string) (schemas.RunSpec, schemas.State, error) {
	l := schemas.Layout{Run: run}
	var spec schemas.RunSpec
	st := schemas.State{WeightsID: "w0", FinalValSuccess: -1}
	if err := store.GetJSON(ctx, s, l.RunSpec(), &spec); err != nil {
		return spec, st, fmt.Errorf("run %s has data but no readable run.json (%v): pass --replace to start it over", run, err)
	}
	if err := store.GetJSON(ctx, s, l.State(), &st); err != nil && !store.IsNotFound(err) {
		return spec, st, err
	}
	return spec, st, nil
}

// ClearStop removes the stop marker a stopped run leaves, which would
// otherwise make every episode of the resumed run skip itself.
func ClearStop(ctx context.Context, s *store.Store, run string) error {
	return s.Delete(ctx, schemas.Layout{Run: run}.Stop())
}

// WeightIDs lists the run's published weights ids, for messages: "none"
// when it has none, "?" when the listing fails.
func WeightIDs(ctx context.Context, s *store.Store, run string) []string {
	l := schemas.Layout{Run: run}
	objs, err := s.List(ctx, l.Prefix()+"weights/")
	if err != nil {
		return []string{"?"}
	}
	var ids []string
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, l.Prefix()+"weights/")
		if id, file, ok := strings.Cut(rest, "/"); ok && file == schemas.WeightsManifestFile {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return []string{"none"}
	}
	return ids
}
