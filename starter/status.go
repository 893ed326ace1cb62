package main

import (
	"fmt"
	"log/slog"
	"os"

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
			p, err := workflows.QueryProgress(cmd.Context(), c, run)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "run %s: round %d/%d, phase %s, %d/%d episodes, %d successes\n", run, p.Round, p.Rounds, p.Phase, p.Episodes.Done, p.Episodes.Total, p.Episodes.Successes)
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
