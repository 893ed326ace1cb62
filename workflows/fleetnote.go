package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// fleetNote keeps the fleet's last note on a workflow's weights (served
// by which hosts, or waiting since when; the run's model-server loads),
// for its current details in the Temporal UI.
type fleetNote struct {
	text string
}

// watchFleetNotes starts receiving the fleet's notes; onChange runs after
// each. With toParent the note is passed on to the parent workflow (an
// Episodes chunk to its Train or Eval), where the user looks first.
func watchFleetNotes(ctx workflow.Context, onChange func(), toParent bool) *fleetNote {
	n := &fleetNote{}
	ch := workflow.GetSignalChannel(ctx, api.FleetNoteSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var note api.FleetNote
			if !ch.Receive(ctx, &note) {
				return
			}
			if note.Text == n.text {
				continue
			}
			n.text = note.Text
			if p := workflow.GetInfo(ctx).ParentWorkflowExecution; toParent && p != nil {
				// Not waited on: a parent that ended has nothing to show.
				workflow.SignalExternalWorkflow(ctx, p.ID, "", api.FleetNoteSignal, note)
			}
			onChange()
		}
	})
	return n
}

func (n *fleetNote) markdown() string {
	if n == nil || n.text == "" {
		return ""
	}
	return "**fleet**: " + n.text + "\n\n"
}
