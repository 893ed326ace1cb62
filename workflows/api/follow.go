package api

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/failnote"
)

// Follow prints progress lines — line() every 2 s, when it changed and is
// not empty — until wait returns, and returns its error. Each failed attempt
// of an activity of workflow id (or of its running children) that Temporal
// is still retrying is printed once, as soon as the server has it, with
// its cause and when it is retried.
func Follow(ctx context.Context, out io.Writer, c client.Client, id string, wait func(context.Context) error, line func() string) error {
	done := make(chan error, 1)
	go func() { done <- wait(ctx) }()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	last := ""
	var fails failnote.Printer
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if l := line(); l != "" && l != last {
				fmt.Fprintln(out, l)
				last = l
			}
			// Describe may miss between runs of a continue-as-new chain;
			// the next tick asks again.
			if fs, err := failnote.Pending(ctx, c, id); err == nil {
				fails.Print(out, fs, time.Now())
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// FollowTrain follows a run's train workflow (Follow) with a line of its
// progress, and returns the run's result. before runs ahead of each
// progress query: the starter looks for its STOP file there.
func FollowTrain(ctx context.Context, out io.Writer, c client.Client, run string, before func()) (TrainResult, error) {
	id := WorkflowID(run)
	var res TrainResult
	err := Follow(ctx, out, c, id, func(ctx context.Context) error { return c.GetWorkflow(ctx, id, "").Get(ctx, &res) }, func() string {
		before()
		p, err := QueryProgress(ctx, c, run)
		if err != nil {
			return "" // between runs of a continue-as-new chain the query may miss
		}
		e := p.Episodes
		line := fmt.Sprintf("round %d/%d  %-10s %d/%d episodes, %d successes", p.Round, p.Rounds, p.Phase, e.Done, e.Total, e.Successes)
		if p.Stopping {
			line += " (stopping)"
		}
		return line
	})
	return res, err
}

// FollowSweep waits for a sweep the schedule started, printing its failing
// activities (Follow), and returns its result.
func FollowSweep(ctx context.Context, out io.Writer, c client.Client, started *client.ScheduleWorkflowExecution) (SweepResult, error) {
	var res SweepResult
	err := Follow(ctx, out, c, started.WorkflowID, func(ctx context.Context) error {
		return c.GetWorkflow(ctx, started.WorkflowID, started.FirstExecutionRunID).Get(ctx, &res)
	}, func() string { return "" })
	return res, err
}
