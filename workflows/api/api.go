// Package api is the contract of Roundhouse's workflows, what a client
// needs to start, follow, signal and find them without their code: task
// queues, search attributes, and per workflow family (train.go, eval.go,
// sweep.go, episodes.go, fleet.go) the registered workflow type name,
// workflow ids, signal and query names, and input, result and progress
// types. The client code that uses it: client.go starts, queries and stops
// workflows and registers search attributes, stops and cancels training
// runs and evaluations, runs.go lists and describes them, schedule.go makes and drives sweeps' schedules.
//
// The workflow bodies live in package workflows, which imports this one.
// They are apart so that a client (the starter) does not link the
// activities the bodies reference; registration names are unaffected, as
// Temporal names a workflow after its function, not its package
// (workflows.TestRegisteredNames holds the two together).
//
// Changing a name, or a JSON field of a type here, breaks running
// workflows and recorded histories (workflows/testdata, the replay tests).
package api

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

// ActivityFailureSignal is sent by every worker to the workflow of an
// activity attempt that failed (and once when a later attempt succeeds),
// with a schemas.ActivityFailure; Train, Episodes, Eval and Sweep show the
// failures still being retried in their current details (internal/failnote).
const ActivityFailureSignal = "activity-failure"

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
