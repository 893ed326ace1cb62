package api

import (
	"fmt"
	"time"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// The evaluation workflow (Eval): one weights id on one split of init
// states, or one shard of it.

// EvalWorkflow is the evaluation workflow's registered type name.
const EvalWorkflow = "Eval"

// EvalWorkflowID names an evaluation (shard) workflow.
func EvalWorkflowID(run, tag string, shard, shards int) string {
	if shards > 1 {
		return fmt.Sprintf("eval-%s-%s-%dof%d", run, tag, shard, shards)
	}
	return fmt.Sprintf("eval-%s-%s", run, tag)
}

// An evaluation takes StopSignal too (train.go): a controlled stop.

// EvalProgressQuery returns an evaluation's EvalProgress.
const EvalProgressQuery = "eval-progress"

// EvalInput is one evaluation of a weights id on one split of init states,
// or one shard of it (Shards > 1: cells i with i % Shards == Shard).
type EvalInput struct {
	Run       string // the run whose prefix holds harness.json, the weights and eval/<tag>/
	Harness   schemas.Harness
	WeightsID string
	Tag       string
	InitKey   string // val_init_ids or eval_init_ids
	Shard     int
	Shards    int // 0 or 1: the whole split
	Heartbeat time.Duration
	// Priority on a shared fleet (lower first, 1–5); 0 is fleet.EvalPriority.
	Priority int `json:",omitempty"`
}

// EvalProgress is what an evaluation has done so far.
type EvalProgress struct {
	Run       string
	Tag       string
	WeightsID string
	InitKey   string
	Shard     int
	Shards    int
	Phase     string // episodes, report, done
	// Stopping says a stop was asked for (StopSignal): running episodes
	// finish, the others are skipped, and the report is marked incomplete.
	Stopping bool `json:",omitempty"`
	// Episodes as of the last finished chunk; QueryEvalProgress adds the
	// live counts of the running chunks named in Children.
	Episodes Tally
	Children []string
}

// The result of an evaluation is its schemas.Report.
