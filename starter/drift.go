package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// driftCmd is `starter drift`: calibrate the drift guard on a recorded
// round (docs/cluster.md, "Calibrating the drift guard").
func driftCmd(e *connect.Endpoints) *cobra.Command {
	var run string
	var round int32
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "drift",
		Short: "Measure how far the trainer's logprobs are from the model server's on one recorded round (calibrates the drift guard)",
		Long: `Run the harness's trainer on a training host with --drift-report: it scores
the round's batch under the weights that sampled it, as its drift guard does
before the first update, and writes every token's |log π_old − log π_rollout|
instead of training. Prints the distribution per token and per call, the
share of tokens past 0.01, 0.1, 0.5 and 1 nat, the harness's limits and
limits twice what this round shows. Nothing is trained; the report is stored
at runs/<run>/drift/round=<R>/drift.json.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !runName.MatchString(run) {
				return fmt.Errorf("--run %q: give the name of a training run (see `starter status`)", run)
			}
			if round < 1 {
				return fmt.Errorf("--round %d: give a round that trained, 1 or more (see `starter status --run %s`)", round, run)
			}
			ctx := cmd.Context()
			c, s, err := connectBoth(ctx, e)
			if err != nil {
				return err
			}
			defer c.Close()
			// Only a training run has rounds to measure: say so before a
			// training host is asked.
			if _, err := s.ETag(ctx, schemas.Layout{Run: run}.State()); store.IsNotFound(err) {
				return fmt.Errorf("run %s not found: `starter drift` measures a training run's round; see `starter status` for the runs", run)
			} else if err != nil {
				return fmt.Errorf("run %s: %w", run, err)
			}
			wr, err := api.StartDrift(ctx, c, api.DriftInput{Run: run, Round: round})
			if err != nil {
				return fmt.Errorf("start the drift measurement: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "measuring drift of run %s round %d on a training host (workflow %s)…\n", run, round, wr.GetID())
			var rep schemas.DriftReport
			wctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			if err := wr.Get(wctx, &rep); err != nil {
				if wctx.Err() != nil {
					return fmt.Errorf("drift of run %s round %d: not done after --wait %s (is a training worker running? the Temporal UI shows workflow %s); "+
						"it goes on: run the same command again to wait for it", run, round, wait, wr.GetID())
				}
				return fmt.Errorf("drift of run %s round %d: %w", run, round, err)
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), report.DriftText(rep))
			return err
		},
	}
	cmd.Flags().StringVar(&run, "run", "", "training run name")
	cmd.Flags().Int32Var(&round, "round", 1, "the round whose batch to measure")
	cmd.Flags().DurationVar(&wait, "wait", 3*time.Hour, "how long to wait for the measurement (it goes on in Temporal after)")
	return cmd
}
