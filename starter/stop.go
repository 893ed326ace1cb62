package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

func stopCmd(e *connect.Endpoints) *cobra.Command {
	var run, tag, reason string
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Ask a run or an evaluation for a controlled stop: running episodes finish, the rest are skipped",
		Long: `Ask a training run or an evaluation for a controlled stop: running episodes
finish and no new ones start. A training run records its state and ends;
` + "`starter train`" + ` with the same run resumes it. An evaluation writes its
report, marked incomplete (never a score); ` + "`starter eval`" + ` with the same run,
tag and weights finishes it.

--run alone stops the run's training run, or its one running evaluation;
--tag names the evaluation (all its shards) when the run has several.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return stopOrCancel(cmd.Context(), cmd.OutOrStdout(), e, run, tag, func(c client.Client) (api.Stopped, error) {
				return api.Stop(cmd.Context(), c, e.Namespace, run, tag, reason)
			}, false)
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "run name")
	cmd.Flags().StringVar(&tag, "tag", "", "the evaluation's tag, when the run has several running")
	cmd.Flags().StringVar(&reason, "reason", "starter stop", "why, recorded in the log and stop marker (and an evaluation's report)")
	return cmd
}

func cancelCmd(e *connect.Endpoints) *cobra.Command {
	var run, tag string
	cmd := &cobra.Command{
		Use:   "cancel",
		Short: "Hard stop: cancel a run or an evaluation now, killing its episodes (use stop for a clean end)",
		Long: `Cancel a training run or an evaluation now (Temporal's cancel): its episodes
and trainer are killed, and an evaluation writes no report. --run and --tag
choose as for stop.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return stopOrCancel(cmd.Context(), cmd.OutOrStdout(), e, run, tag, func(c client.Client) (api.Stopped, error) {
				return api.Cancel(cmd.Context(), c, e.Namespace, run, tag)
			}, true)
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "run name")
	cmd.Flags().StringVar(&tag, "tag", "", "the evaluation's tag, when the run has several running")
	return cmd
}

// stopOrCancel checks the flags, connects, acts and says what it did.
func stopOrCancel(ctx context.Context, out io.Writer, e *connect.Endpoints, run, tag string, do func(client.Client) (api.Stopped, error), cancelled bool) error {
	if tag != "" && !runName.MatchString(tag) {
		return fmt.Errorf("--tag %q: give the tag of an evaluation (see `starter status`)", tag)
	}
	c, err := runClient(ctx, e, run)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := do(c)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, stoppedLine(run, st, cancelled))
	return nil
}

// stoppedLine says what stop or cancel did and how to go on.
func stoppedLine(run string, st api.Stopped, cancelled bool) string {
	if st.Kind == api.KindTrain {
		if cancelled {
			return fmt.Sprintf("run %s cancelled: episodes and trainer are being killed; `starter train --run %s …` resumes it", run, run)
		}
		return fmt.Sprintf("stop requested for run %s: running episodes finish, then it ends; `starter train --run %s …` resumes it", run, run)
	}
	what := fmt.Sprintf("evaluation %s of run %s (%s)", st.Tag, run, strings.Join(st.WorkflowIDs, ", "))
	if cancelled {
		return what + " cancelled: its episodes are being killed and no report is written"
	}
	return what + ": stop requested; running episodes finish, the rest are skipped, and the report is written marked incomplete; `starter eval` with the same --run, --tag and weights finishes it"
}

// runClient checks --run and connects to Temporal.
func runClient(ctx context.Context, e *connect.Endpoints, run string) (client.Client, error) {
	if !runName.MatchString(run) {
		return nil, fmt.Errorf("--run %q: give the name of a run (see `starter status`)", run)
	}
	return connect.Temporal(ctx, *e, quietLogger())
}
