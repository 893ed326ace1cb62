package workflows

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// ChunkSize is how many episodes one Episodes child workflow runs. A round
// of 2,000 groups × 6 attempts is 24 children: no history comes near
// Temporal's limits (51,200 events, 50 MB; 2,000 pending activities).
const ChunkSize = 500

// Cell is one episode to run: a task, an init state and its place.
type Cell struct {
	Task    schemas.Task
	InitID  int32
	Group   int32
	Attempt int32
}

// EpisodesInput is one chunk of a phase's episodes.
type EpisodesInput struct {
	Run          string
	Round        int32
	Phase        string
	Weights      string
	Cells        []Cell
	InfraTries   int32
	StartToClose time.Duration
	Heartbeat    time.Duration
}

// Tally counts what a set of episodes did.
type Tally struct {
	Total     int
	Done      int // finished: valid, invalid or lost
	Valid     int
	Successes int
	Lost      int // the activity failed for good: no record exists
	Skipped   int // not run because the run is stopping
}

func (t *Tally) add(o Tally) {
	t.Total += o.Total
	t.Done += o.Done
	t.Valid += o.Valid
	t.Successes += o.Successes
	t.Lost += o.Lost
	t.Skipped += o.Skipped
}

// EpisodesQuery answers an Episodes workflow's Tally so far.
const EpisodesQuery = "episodes"

// Episodes runs a chunk of episodes in parallel on the rollout queue. One
// episode that fails for good is counted as lost; it never fails the chunk.
func Episodes(ctx workflow.Context, in EpisodesInput) (Tally, error) {
	t := Tally{Total: len(in.Cells)}
	if err := workflow.SetQueryHandler(ctx, EpisodesQuery, func() (Tally, error) { return t, nil }); err != nil {
		return t, fmt.Errorf("episodes query: %w", err)
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           RolloutQueue,
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
	return t, nil
}

// phaseRun describes the episodes of one phase for runEpisodes.
type phaseRun struct {
	Run        string
	Round      int32
	Phase      string
	Weights    string
	Harness    schemas.Harness
	Heartbeat  time.Duration // 0: 30s
	OnProgress func(Tally)   // after each chunk
}

// runEpisodes runs cells as Episodes child workflows of ChunkSize and
// returns their tally. A child that fails counts its episodes as lost.
func runEpisodes(ctx workflow.Context, p phaseRun, cells []Cell, running map[string]bool) Tally {
	h := p.Harness
	hb := p.Heartbeat
	if hb == 0 {
		hb = 30 * time.Second
	}
	parent := workflow.GetInfo(ctx).WorkflowExecution.ID
	var total Tally
	total.Total = len(cells)
	if p.OnProgress != nil {
		p.OnProgress(total)
	}
	sel := workflow.NewSelector(ctx)
	n := 0
	for start := 0; start < len(cells); start += ChunkSize {
		chunk := cells[start:min(start+ChunkSize, len(cells))]
		id := ChildID(parent, p.Round, p.Phase, start/ChunkSize)
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:    id,
			TaskQueue:     ControlQueue,
			StaticSummary: fmt.Sprintf("run %s round %d %s: episodes %d–%d of %d, weights %s", p.Run, p.Round, p.Phase, start, start+len(chunk)-1, len(cells), p.Weights),
			TypedSearchAttributes: temporal.NewSearchAttributes(RunAttr.ValueSet(p.Run), KindAttr.ValueSet("episodes"),
				RoundAttr.ValueSet(int64(p.Round)), PhaseAttr.ValueSet(p.Phase), WeightsAttr.ValueSet(p.Weights)),
		})
		f := workflow.ExecuteChildWorkflow(cctx, Episodes, EpisodesInput{
			Run: p.Run, Round: p.Round, Phase: p.Phase, Weights: p.Weights, Cells: chunk,
			InfraTries:   int32(h.Collect.InfraRetries + 1),
			StartToClose: h.Episode.Timeout.D() + startTimeouts(h) + 5*time.Minute,
			Heartbeat:    hb,
		})
		running[id] = true
		n++
		sel.AddFuture(f, func(f workflow.Future) {
			delete(running, id)
			var t Tally
			if err := f.Get(ctx, &t); err != nil {
				workflow.GetLogger(ctx).Error("episode chunk failed", "child", id, "error", err)
				t = Tally{Total: len(chunk), Done: len(chunk), Lost: len(chunk)}
			}
			t.Total = 0 // counted above
			total.add(t)
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

// ChildID is the workflow id of chunk k of a phase's episodes.
func ChildID(parent string, round int32, phase string, k int) string {
	return fmt.Sprintf("%s-r%d-%s-%d", parent, round, phase, k)
}

// QueryProgress asks a run's train workflow for its progress and adds the
// live counts of its running episode chunks.
func QueryProgress(ctx context.Context, c client.Client, run string) (Progress, error) {
	var p Progress
	if err := queryWithChunks(ctx, c, WorkflowID(run), ProgressQuery, &p); err != nil {
		return p, fmt.Errorf("run %s: %w", run, err)
	}
	addChunks(ctx, c, p.Children, &p.Episodes)
	return p, nil
}

// queryWithChunks runs a query on a workflow that runs episode chunks.
func queryWithChunks(ctx context.Context, c client.Client, id, query string, into any) error {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := c.QueryWorkflow(qctx, id, "", query)
	if err != nil {
		return fmt.Errorf("query %s: %w", query, err)
	}
	if err := v.Get(into); err != nil {
		return fmt.Errorf("decode %s: %w", query, err)
	}
	return nil
}

// addChunks adds the live counts of running episode chunks to t.
func addChunks(ctx context.Context, c client.Client, children []string, t *Tally) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, id := range children {
		v, err := c.QueryWorkflow(qctx, id, "", EpisodesQuery)
		if err != nil {
			continue // finished between the two queries: the parent counts it next time
		}
		var ct Tally
		if v.Get(&ct) == nil {
			ct.Total = 0
			t.add(ct)
		}
	}
}
