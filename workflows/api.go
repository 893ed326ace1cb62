// Package workflows holds Roundhouse's deterministic orchestration: the
// train loop, one round per workflow run, continued as new between rounds so
// each run's history stays small; evaluations, their episode chunks and
// scheduled sweeps. Side effects live in package activities.
//
// The package's rooms:
//
//   - api.go and <family>_api.go are the contract a client needs: task
//     queues, search attributes, and per workflow family (train, eval,
//     sweep, episodes) its workflow ids, signal and query names, and its
//     input, result and progress types. Changing a name or a JSON field
//     here breaks running workflows and recorded histories.
//   - client.go is the client side: starting workflows and schedules,
//     signals, queries, registering search attributes. It takes a
//     client.Client and a context.Context and is never called from a
//     workflow.
//   - train.go, eval.go, sweep.go, episodes.go and progress.go are the
//     workflow bodies and stay deterministic.
package workflows

import (
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
)

// Task queues: rollout hosts, the training host, and everything else.
const (
	ControlQueue = "roundhouse-control"
	RolloutQueue = "roundhouse-rollout"
	TrainQueue   = "roundhouse-train"
)

// Custom search attributes: the Temporal UI's search box filters on them
// (RoundhouseRun = "demo", RoundhouseSuccessRate > 0.5).
var (
	RunAttr         = temporal.NewSearchAttributeKeyKeyword("RoundhouseRun")
	KindAttr        = temporal.NewSearchAttributeKeyKeyword("RoundhouseKind") // train, episodes, eval, sweep
	RoundAttr       = temporal.NewSearchAttributeKeyInt64("RoundhouseRound")
	PhaseAttr       = temporal.NewSearchAttributeKeyKeyword("RoundhousePhase")
	WeightsAttr     = temporal.NewSearchAttributeKeyKeyword("RoundhouseWeights")
	SuccessRateAttr = temporal.NewSearchAttributeKeyFloat64("RoundhouseSuccessRate")
)

// searchAttributes is what RegisterSearchAttributes creates.
var searchAttributes = map[string]enumspb.IndexedValueType{
	RunAttr.GetName():         enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	KindAttr.GetName():        enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	RoundAttr.GetName():       enumspb.INDEXED_VALUE_TYPE_INT,
	PhaseAttr.GetName():       enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	WeightsAttr.GetName():     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	SuccessRateAttr.GetName(): enumspb.INDEXED_VALUE_TYPE_DOUBLE,
}
