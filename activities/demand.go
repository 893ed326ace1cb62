package activities

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Demand tells the fleet workflow that an Episodes workflow's episodes
// wait for their weights, or (Done) no longer do. It starts the fleet if
// none runs: a signal-with-start, so the first demand after the fleet was
// terminated or never existed brings it up. Repeating it is harmless —
// demand is keyed by the Episodes workflow's id.
func (c *Records) Demand(ctx context.Context, d api.DemandChange) error {
	if c.Temporal == nil {
		err := errors.New("this worker has no Temporal client for the fleet: start the control role with workers.Run")
		return temporal.NewNonRetryableApplicationError(err.Error(), "NoFleetClient", err)
	}
	_, err := c.Temporal.SignalWithStartWorkflow(ctx, api.FleetID, api.DemandSignal, d, FleetStartOptions(), api.FleetWorkflow, api.FleetInput{})
	if err != nil {
		return fmt.Errorf("signal fleet %s: %w", api.FleetID, err)
	}
	return nil
}

// FleetStartOptions start the fleet workflow on the control queue. It
// runs until terminated, continuing as new as its history grows.
func FleetStartOptions() client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: api.FleetID, TaskQueue: api.ControlQueue, StaticSummary: "rollout fleet: which host serves which weights"}
}

// ClosedWorkflows returns those of ids whose workflow is not running
// (closed, or unknown to Temporal). The fleet drops their demand: an
// Episodes workflow that was terminated never said it was done.
func (c *Records) ClosedWorkflows(ctx context.Context, ids []string) ([]string, error) {
	if c.Temporal == nil {
		err := errors.New("this worker has no Temporal client for the fleet: start the control role with workers.Run")
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "NoFleetClient", err)
	}
	var closed []string
	for _, id := range ids {
		d, err := c.Temporal.DescribeWorkflowExecution(ctx, id, "")
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
			closed = append(closed, id)
		case err != nil:
			return nil, fmt.Errorf("describe workflow %s: %w", id, err)
		case d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			closed = append(closed, id)
		}
	}
	return closed, nil
}
