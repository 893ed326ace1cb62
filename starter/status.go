package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/workflows"
)

func statusCmd(e *connect.Endpoints) *cobra.Command {
	var run string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a run's round, phase and progress",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if run == "" {
				return fmt.Errorf("--run is required")
			}
			c, err := connect.Temporal(cmd.Context(), *e, quietLogger())
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			v, err := c.QueryWorkflow(ctx, workflows.WorkflowID(run), "", workflows.ProgressQuery)
			if err != nil {
				return fmt.Errorf("run %s: %w", run, err)
			}
			var p workflows.Progress
			if err := v.Get(&p); err != nil {
				return fmt.Errorf("run %s progress: %w", run, err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "run %s: round %d/%d, phase %s, %d/%d episodes, %d successes\n", run, p.Round, p.Rounds, p.Phase, p.EpisodesDone, p.EpisodesTotal, p.Successes)
			printSummaries(out, p.Summaries)
			return nil
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "run name")
	return cmd
}

// quietLogger keeps the SDK's own logs out of the CLI's output unless they are warnings.
func quietLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}
