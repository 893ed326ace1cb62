package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// fleetNote keeps the fleet's last note on a workflow's weights (served
// by which hosts, or waiting since when; the run's model-server loads),
// for its current details in the Temporal UI.
type fleetNote struct {
	text    string
	where   string // last passed on to the parent
	waiting bool   // and whether it said the weights wait
}

// watchFleetNotes starts receiving the fleet's notes; onChange runs after
// each. With toParent, weights that have waited api.LongWait are passed on
// to the parent workflow (an Episodes chunk to its Train or Eval), where
// the user looks first, and once more when they are served. Otherwise the
// parent shows the note the chunk returns (api.Tally.Fleet), which costs
// its history nothing.
func watchFleetNotes(ctx workflow.Context, onChange func(), toParent bool) *fleetNote {
	n := &fleetNote{}
	ch := workflow.GetSignalChannel(ctx, api.FleetNoteSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var note api.FleetNote
			if !ch.Receive(ctx, &note) {
				return
			}
			n.text = note.Text
			if p := workflow.GetInfo(ctx).ParentWorkflowExecution; toParent && p != nil && note.Where != n.where && (note.Waiting || n.waiting) {
				// Only after a long wait, and once when the weights are
				// served again: each signal is a few events of the
				// parent's history. Not waited on: a parent that ended
				// has nothing to show.
				n.where, n.waiting = note.Where, note.Waiting
				workflow.SignalExternalWorkflow(ctx, p.ID, "", api.FleetNoteSignal, api.FleetNote{Weights: note.Weights, Text: note.Where})
			}
			onChange()
		}
	})
	return n
}

// fromChunk takes the note a finished chunk returned: the parent's line
// until a long wait is passed on.
func (n *fleetNote) fromChunk(t api.Tally) {
	if t.Fleet != "" {
		n.text = t.Fleet
	}
}

func (n *fleetNote) markdown() string {
	if n == nil || n.text == "" {
		return ""
	}
	return "**fleet**: " + n.text + "\n\n"
}
