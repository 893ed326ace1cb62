package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Drift measures one recorded round's drift on the training queue
// (api.DriftWorkflow, `starter drift`): a single activity, retried a few
// times for the host's sake, never for the harness's.
func Drift(ctx workflow.Context, in api.DriftInput) (schemas.DriftReport, error) {
	var rep schemas.DriftReport
	var trainer *activities.Trainer
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: api.TrainQueue, StartToCloseTimeout: 2 * time.Hour, HeartbeatTimeout: beatTimeout,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{"BadHarness", "NoBatch", "NoRound"}},
	})
	err := workflow.ExecuteActivity(summarized(actx, fmt.Sprintf("drift of run %s round %d: the trainer's forward on the round's batch", in.Run, in.Round)),
		trainer.Drift, in).Get(ctx, &rep)
	return rep, err
}
