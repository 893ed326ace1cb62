package api

import (
	"time"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// The sweep workflow (Sweep), started by a Temporal Schedule per sweep.

// SweepWorkflow is the sweep workflow's registered type name.
const SweepWorkflow = "Sweep"

// SweepScheduleID is the Temporal Schedule of sweep name; the workflows it
// starts are named after it.
func SweepScheduleID(name string) string { return "sweep-" + name }

// Memo keys of a sweep's schedule: `starter sweep list` shows them.
const (
	SweepMemoSource  = "source"
	SweepMemoRun     = "run"
	SweepMemoWhen    = "when"
	SweepMemoInitKey = "init_key"
)

// SweepInput is what a sweep's schedule starts each time: find the weights
// of Source not on the leaderboard yet, evaluate each in Run, update the
// leaderboard.
type SweepInput struct {
	Name string
	// Source is a run name (its weights/<id>/) or s3://bucket/prefix/
	// (weights ids as sub-directories, imported into Run before evaluation:
	// episodes read weights from the evaluation run's prefix only).
	Source  string
	Run     string // the evaluation run: harness.json, weights, eval/<tag>/
	Harness schemas.Harness
	InitKey string // val_init_ids (default) or eval_init_ids
	// Parallel bounds evaluations at once (default 1). Each one already
	// spreads its episodes over every rollout host.
	Parallel  int
	Heartbeat time.Duration // of the evaluations' episodes (0: 30s)
	// Priority of its evaluations on a shared fleet (lower first, 1–5); 0
	// is fleet.EvalPriority.
	Priority int `json:",omitempty"`
}

// SweepResult says what one sweep did.
type SweepResult struct {
	Evaluated   []string // weights ids evaluated (or whose report was found) this time
	Skipped     int      // weights ids already on the leaderboard
	Failed      []string // weights ids whose evaluation failed; the next sweep retries them
	Leaderboard string   // key of leaderboard.json
}
