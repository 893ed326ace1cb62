package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

func stopCmd(e *connect.Endpoints) *cobra.Command {
	var run, reason string
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Ask a run for a controlled stop: running episodes finish, state is recorded, the run ends",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := runClient(cmd.Context(), e, run)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := api.RequestStop(cmd.Context(), c, run, reason); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stop requested for run %s: running episodes finish, then it ends; `starter train --run %s …` resumes it\n", run, run)
			return nil
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "run name")
	cmd.Flags().StringVar(&reason, "reason", "starter stop", "why, recorded in the run's log and STOP marker")
	return cmd
}

func cancelCmd(e *connect.Endpoints) *cobra.Command {
	var run string
	cmd := &cobra.Command{
		Use:   "cancel",
		Short: "Hard stop: cancel a run now, killing its episodes and trainer (use stop for a clean end)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := runClient(cmd.Context(), e, run)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := api.CancelTrain(cmd.Context(), c, run); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s cancelled: episodes and trainer are being killed; `starter train --run %s …` resumes it\n", run, run)
			return nil
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "run name")
	return cmd
}

// runClient checks --run and connects to Temporal.
func runClient(ctx context.Context, e *connect.Endpoints, run string) (client.Client, error) {
	if !runName.MatchString(run) {
		return nil, fmt.Errorf("--run %q: give the name of a run (see `starter status`)", run)
	}
	return connect.Temporal(ctx, *e, quietLogger())
}
