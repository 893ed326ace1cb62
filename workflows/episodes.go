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

// Episodes runs a chunk of episodes in parallel on the rollout queue. One
// episode that fails for good is counted as lost; it never fails the chunk.
func Episodes(ctx workflow.Context, in api.EpisodesInput) (api.Tally, error) {
	t := api.Tally{Total: len(in.Cells)}
	if err := workflow.SetQueryHandler(ctx, api.EpisodesQuery, func() (api.Tally, error) { return t, nil }); err != nil {
		return t, fmt.Errorf("episodes query: %w", err)
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           api.RolloutQueue,
		StartToCloseTimeout: in.StartToClose,
		HeartbeatTimeout:    in.Heartbeat,
		// Infrastructure failures use InfraTries; three more cover lost workers.
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: in.InfraTries + 3},
	})
	var fails *failures
	details := func() {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s** round %d: %d/%d episodes, %d valid, %d successes, %d lost, %d skipped\n\n%s",
			in.Phase, in.Round, t.Done, t.Total, t.Valid, t.Successes, t.Lost, t.Skipped, fails.markdown()))
	}
	fails = watchFailures(ctx, details)
	var rollout *activities.Rollout
	var accepted []activities.AcceptedTry
	sel := workflow.NewSelector(ctx)
	for _, cell := range in.Cells {
		id := schemas.EpisodeID(in.Round, in.Phase, cell.Group, cell.Attempt)
		// The summary labels the activity in the Temporal UI's timeline.
		ectx := workflow.WithActivityOptions(actx, withSummary(workflow.GetActivityOptions(actx),
			fmt.Sprintf("%s task %d %s init %d", id, cell.Task.ID, cell.Task.Name, cell.InitID)))
		f := workflow.ExecuteActivity(ectx, rollout.RunEpisode, activities.EpisodeInput{
			Run: in.Run, Round: in.Round, Phase: in.Phase, Group: cell.Group, Attempt: cell.Attempt,
			Task: cell.Task, InitID: cell.InitID, WeightsID: in.Weights, InfraTries: in.InfraTries,
		})
		sel.AddFuture(f, func(f workflow.Future) {
			var r activities.EpisodeResult
			if err := f.Get(ctx, &r); err != nil {
				workflow.GetLogger(ctx).Error("episode lost", "episode", id, "error", err)
				t.Lost++
			}
			switch {
			case r.Skipped:
				t.Skipped++
			default:
				t.Done++
			}
			if r.Try != "" && !r.Recorded && !r.Skipped {
				accepted = append(accepted, activities.AcceptedTry{EpisodeID: r.EpisodeID, Try: r.Try})
			}
			if r.Valid {
				t.Valid++
			}
			if r.Success {
				t.Successes++
			}
			details()
		})
	}
	for range in.Cells {
		sel.Select(ctx)
	}
	// Histories from before tries were fenced stored their rows in place.
	if workflow.GetVersion(ctx, "publish-accepted-tries", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return t, nil
	}
	return t, publish(ctx, in, accepted)
}

// publish puts the accepted tries' records into the tables. It waits out
// a storage outage (retried without limit, at most a minute apart): the
// records are staged, and the phase must not go on without them.
func publish(ctx workflow.Context, in api.EpisodesInput, accepted []activities.AcceptedTry) error {
	if len(accepted) == 0 {
		return nil
	}
	pctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: api.ControlQueue, StartToCloseTimeout: 15 * time.Minute, HeartbeatTimeout: 2 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: time.Minute},
	})
	pctx = summarized(pctx, fmt.Sprintf("publish %d episodes of round %d %s", len(accepted), in.Round, in.Phase))
	var control *activities.Control
	err := workflow.ExecuteActivity(pctx, control.Publish, activities.PublishInput{Run: in.Run, Round: in.Round, Phase: in.Phase, Tries: accepted}).Get(ctx, nil)
	if err != nil {
		return fmt.Errorf("publish round %d %s: %w", in.Round, in.Phase, err)
	}
	return nil
}

// phaseRun describes the episodes of one phase for runEpisodes.
type phaseRun struct {
	Run        string
	Round      int32
	Phase      string
	Weights    string
	Harness    schemas.Harness
	Heartbeat  time.Duration   // 0: 30s
	OnProgress func(api.Tally) // after each chunk
}

// runEpisodes runs cells as Episodes child workflows of ChunkSize and
// returns their tally. A child that fails counts its episodes as lost.
func runEpisodes(ctx workflow.Context, p phaseRun, cells []api.Cell, running map[string]bool) api.Tally {
	h := p.Harness
	hb := p.Heartbeat
	if hb == 0 {
		hb = 30 * time.Second
	}
	parent := workflow.GetInfo(ctx).WorkflowExecution.ID
	var total api.Tally
	total.Total = len(cells)
	if p.OnProgress != nil {
		p.OnProgress(total)
	}
	sel := workflow.NewSelector(ctx)
	n := 0
	for start := 0; start < len(cells); start += api.ChunkSize {
		chunk := cells[start:min(start+api.ChunkSize, len(cells))]
		id := api.ChildID(parent, p.Round, p.Phase, start/api.ChunkSize)
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:    id,
			TaskQueue:     api.ControlQueue,
			StaticSummary: fmt.Sprintf("run %s round %d %s: episodes %d–%d of %d, weights %s", p.Run, p.Round, p.Phase, start, start+len(chunk)-1, len(cells), p.Weights),
			TypedSearchAttributes: temporal.NewSearchAttributes(api.RunAttr.ValueSet(p.Run), api.KindAttr.ValueSet("episodes"),
				api.RoundAttr.ValueSet(int64(p.Round)), api.PhaseAttr.ValueSet(p.Phase), api.WeightsAttr.ValueSet(p.Weights)),
		})
		f := workflow.ExecuteChildWorkflow(cctx, Episodes, api.EpisodesInput{
			Run: p.Run, Round: p.Round, Phase: p.Phase, Weights: p.Weights, Cells: chunk,
			InfraTries:   int32(h.Collect.InfraRetries + 1),
			StartToClose: h.Episode.Timeout.D() + startTimeouts(h) + 5*time.Minute,
			Heartbeat:    hb,
		})
		running[id] = true
		n++
		sel.AddFuture(f, func(f workflow.Future) {
			delete(running, id)
			var t api.Tally
			if err := f.Get(ctx, &t); err != nil {
				workflow.GetLogger(ctx).Error("episode chunk failed", "child", id, "error", err)
				t = api.Tally{Total: len(chunk), Done: len(chunk), Lost: len(chunk)}
			}
			t.Total = 0 // counted above
			total.Add(t)
			if p.OnProgress != nil {
				p.OnProgress(total)
			}
		})
	}
	for range n {
		sel.Select(ctx)
	}
	return total
}
