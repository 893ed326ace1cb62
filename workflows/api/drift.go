package api

import "fmt"

// The drift calibration workflow (Drift, docs/design.md §4 "Drift guard"):
// one activity on the training queue runs the trainer's forward on a
// recorded round's batch, under the weights that sampled it, and reports
// how far its logprobs are from the recorded ones. Nothing is trained.

// DriftWorkflow is the drift calibration workflow's registered type name.
const DriftWorkflow = "Drift"

// DriftWorkflowID names the calibration of one round of a run.
func DriftWorkflowID(run string, round int32) string { return fmt.Sprintf("drift-%s-r%d", run, round) }

// DriftInput names the round to measure: its batch and the weights it
// was sampled with come from the run's records.
type DriftInput struct {
	Run   string
	Round int32
}
