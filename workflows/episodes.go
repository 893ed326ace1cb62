package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Episodes runs a chunk of episodes in parallel on the rollout queue. One
// episode that fails for good is counted as lost; it never fails the chunk.
func Episodes(ctx workflow.Context, in api.EpisodesInput) (api.Tally, error) {
	c := &chunkRun{ctx: ctx, in: in, t: api.Tally{Total: len(in.Cells)},
		cells: map[string]api.Cell{}, results: map[string]activities.EpisodeResult{}, told: len(in.Cells)}
	if err := workflow.SetQueryHandler(ctx, api.EpisodesQuery, func() (api.Tally, error) { return c.t, nil }); err != nil {
		return c.t, fmt.Errorf("episodes query: %w", err)
	}
	// Episodes wait in their weights' queue, served by the hosts the fleet
	// assigns to them (docs/design.md §10); histories from before all
	// waited in the one rollout queue.
	queue := api.RolloutQueue
	c.routed = workflow.GetVersion(ctx, "weights-queues", workflow.DefaultVersion, 1) == 1
	// The fleet spreads weights by the episodes left to run (design §10,
	// rule 5); histories from before did not tell it.
	c.backlog = c.routed && workflow.GetVersion(ctx, "backlog-to-fleet", workflow.DefaultVersion, 1) == 1
	if c.routed {
		queue = api.WeightsQueue(fleet.Key(in.Run, in.WeightsID))
		if err := c.tellDemand(); err != nil {
			return c.t, err
		}
		// Also when the chunk is cancelled: the fleet must stop serving
		// weights nobody waits for.
		defer c.tellDone()
	}
	epCtx, stopEpisodes := workflow.WithCancel(ctx)
	c.stop = stopEpisodes
	if c.routed {
		c.stopWhenUnservable(stopEpisodes)
	}
	c.actx = episodeOptions(epCtx, in, queue)
	// Episodes carry their priority to Temporal's matching too: in one
	// weights' queue a collection's episodes go before a validation's of
	// the same weights beside it (design §1, "Overlapped rounds"), not
	// after them in order of arrival. Histories from before set none.
	if workflow.GetVersion(ctx, "episode-task-priority", workflow.DefaultVersion, 1) == 1 {
		ao := workflow.GetActivityOptions(c.actx)
		ao.Priority = temporal.Priority{PriorityKey: taskPriority(in.Priority)}
		c.actx = workflow.WithActivityOptions(epCtx, ao)
	}
	c.fails = watchFailures(ctx, c.details)
	// Long waits reach the parent as they happen; histories from before
	// passed nothing on.
	toParent := c.routed && workflow.GetVersion(ctx, "fleet-waits-to-parent", workflow.DefaultVersion, 1) == 1
	c.note = watchFleetNotes(ctx, c.details, toParent)
	c.sel = workflow.NewSelector(ctx)
	for _, cell := range in.Cells {
		c.cells[schemas.EpisodeID(in.Round, in.Phase, cell.Group, cell.Attempt)] = cell
		c.run(cell, 0)
	}
	for range in.Cells {
		c.sel.Select(ctx)
	}
	// Histories from before tries were fenced stored their rows in place.
	if workflow.GetVersion(ctx, "publish-accepted-tries", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return c.t, nil
	}
	// Histories from before reruns fail on a corrupt try.
	if workflow.GetVersion(ctx, "rerun-corrupt-tries", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		_, err := publish(ctx, in, c.accepted, false)
		return c.t, err
	}
	if err := c.publishRerunningCorrupt(); err != nil {
		return c.t, err
	}
	// Staged tries of published episodes are no longer needed (the row
	// names the accepted one); histories from before kept them.
	if workflow.GetVersion(ctx, "drop-published-staged", workflow.DefaultVersion, 1) == 1 {
		c.dropStaged()
	}
	return c.t, nil
}

// dropStaged deletes the staged tries of the chunk's published episodes
// (those accepted and published, or found published by a resumed round).
// They are only storage: a failure is logged and the chunk goes on.
func (c *chunkRun) dropStaged() {
	var ids []string
	for id, r := range c.results {
		// A result without a try staged nothing.
		if r.Retry >= 0 && !r.Skipped && r.Try != "" {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids) // map order is random; the command's input must not be
	in := c.in
	actx := summarized(controlContext(c.ctx), fmt.Sprintf("drop staged tries of %d episodes of round %d %s", len(ids), in.Round, in.Phase))
	var records *activities.Records
	f := workflow.ExecuteActivity(actx, records.DropStaged, activities.DropStagedInput{Run: in.Run, Round: in.Round, Phase: in.Phase, Episodes: ids})
	if err := f.Get(c.ctx, nil); err != nil {
		workflow.GetLogger(c.ctx).Warn("staged tries not dropped", "round", in.Round, "phase", in.Phase, "error", err)
	}
}

// chunkRun is an Episodes workflow's state: its tally, what it told the
// fleet, and the episodes it scheduled, counted and accepted.
type chunkRun struct {
	ctx  workflow.Context
	in   api.EpisodesInput
	t    api.Tally
	sel  workflow.Selector
	actx workflow.Context // the episodes' activity options
	// routed: the episodes wait in their weights' queue and the fleet
	// hears of them; backlog: it also hears how many are left.
	routed, backlog bool
	demand          api.DemandChange
	telling         workflow.Future // a backlog update on its way to the fleet
	fails           *failures
	note            *fleetNote
	cells           map[string]api.Cell
	// results holds each episode's counted result: a rerun takes its
	// counts back before its new try is counted.
	results  map[string]activities.EpisodeResult
	accepted []activities.AcceptedTry
	// pending counts episodes scheduled and not finished. Each time it
	// falls to three quarters of what the fleet was last told, the fleet
	// is told again: a handful of updates per chunk keep its count within
	// a third of the truth.
	// With it goes the pace: the time between completions since the
	// first, which leaves the model server's load out.
	pending, told, finished int
	firstDone               time.Time
	stop                    func() // cancels the episodes not finished
}

// tellDemand tells the fleet the chunk's episodes wait for its weights.
func (c *chunkRun) tellDemand() error {
	in := c.in
	prio := in.Priority
	if prio == 0 {
		prio = fleet.EvalPriority
	}
	c.demand.Demand = fleet.Demand{Key: workflow.GetInfo(c.ctx).WorkflowExecution.ID, Run: in.Run, Weights: fleet.Key(in.Run, in.WeightsID),
		Priority: prio, Episodes: len(in.Cells), PerHost: in.PerHost}
	return tellFleet(c.ctx, c.demand)
}

// tellDone tells the fleet the chunk's episodes are done, after any
// backlog update on its way, also when the chunk is cancelled.
func (c *chunkRun) tellDone() {
	dctx, _ := workflow.NewDisconnectedContext(c.ctx)
	if c.telling != nil {
		_ = c.telling.Get(dctx, nil) // the fleet hears the update before the end
	}
	done := c.demand
	done.Done, done.Again = true, c.in.Again
	if err := tellFleet(dctx, done); err != nil {
		workflow.GetLogger(c.ctx).Warn("fleet not told the episodes are done; it drops them when it finds the workflow closed", "error", err)
	}
}

// stopWhenUnservable stops the episodes when the fleet signals that no
// rollout host could load the chunk's weights.
func (c *chunkRun) stopWhenUnservable(stopEpisodes func()) {
	workflow.Go(c.ctx, func(ctx workflow.Context) {
		var u api.Unservable
		workflow.GetSignalChannel(ctx, api.UnservableSignal).Receive(ctx, &u)
		if u.Weights == c.demand.Demand.Weights && c.t.Unservable == "" {
			c.t.Unservable = fmt.Sprintf("weights %s could not be loaded on any rollout host: %s", c.in.WeightsID, u.Cause)
			workflow.GetLogger(ctx).Error("episodes stopped: weights unservable", "weights", c.in.WeightsID, "cause", u.Cause)
			stopEpisodes()
		}
	})
}

// taskPriority is Temporal's priority key for a chunk of fleet priority
// p: the same order and scale (1 first, fleet.MaxPriority last); an
// unset p is fleet.EvalPriority, as the fleet reads it.
func taskPriority(p int) int {
	if p <= 0 {
		return fleet.EvalPriority
	}
	return min(p, fleet.MaxPriority)
}

// episodeOptions are the episodes' activity options on queue.
func episodeOptions(ctx workflow.Context, in api.EpisodesInput, queue string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           queue,
		StartToCloseTimeout: in.StartToClose,
		HeartbeatTimeout:    in.Heartbeat,
		// Infrastructure failures use InfraTries; five more cover lost
		// workers and episodes refused by a host the fleet just moved
		// their weights off (host.MovedError).
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: in.InfraTries + 5},
	})
}

// details shows the tally, the fleet's note and the failing activities
// in the Temporal UI.
func (c *chunkRun) details() {
	t := &c.t
	if c.note != nil {
		t.Fleet = c.note.text
	}
	reruns := ""
	if t.Reruns > 0 {
		reruns = fmt.Sprintf(", %d rerun after a corrupt try", t.Reruns)
	}
	workflow.SetCurrentDetails(c.ctx, fmt.Sprintf("**%s** round %d: %d/%d episodes, %d valid, %d successes, %d lost, %d skipped%s\n\n%s",
		c.in.Phase, c.in.Round, t.Done, t.Total, t.Valid, t.Successes, t.Lost, t.Skipped, reruns, c.note.markdown()+c.fails.markdown()))
}

// tellLeft tells the fleet how many episodes are left, and their pace,
// when pending fell to three quarters of what it was last told and no
// update is on its way.
func (c *chunkRun) tellLeft() {
	if !c.backlog || c.telling != nil || c.pending <= 0 || c.pending > c.told*3/4 {
		return
	}
	c.told = c.pending
	left := c.demand
	left.Left, left.Demand.Remaining = true, c.pending
	if c.finished > 1 {
		left.Demand.Pace = workflow.Now(c.ctx).Sub(c.firstDone) / time.Duration(c.finished-1)
	}
	f, set := workflow.NewFuture(c.ctx)
	c.telling = f
	workflow.Go(c.ctx, func(ctx workflow.Context) {
		if err := tellFleet(ctx, left); err != nil {
			workflow.GetLogger(ctx).Warn("fleet not told the episodes left; it spreads by the count it has", "error", err)
		}
		c.telling = nil
		set.Set(nil, nil)
	})
}

// run schedules one episode; retryBase > 0 is a rerun (RetryBase).
func (c *chunkRun) run(cell api.Cell, retryBase int32) {
	in := c.in
	c.pending++
	id := schemas.EpisodeID(in.Round, in.Phase, cell.Group, cell.Attempt)
	label := fmt.Sprintf("%s task %d %s init %d", id, cell.Task.ID, cell.Task.Name, cell.InitID)
	if retryBase > 0 {
		label += fmt.Sprintf(" (rerun: try %d's records were corrupt)", retryBase-1)
	}
	// The summary labels the activity in the Temporal UI's timeline.
	ectx := workflow.WithActivityOptions(c.actx, withSummary(workflow.GetActivityOptions(c.actx), label))
	var rollout *activities.Rollout
	f := workflow.ExecuteActivity(ectx, rollout.RunEpisode, activities.EpisodeInput{
		Run: in.Run, Round: in.Round, Phase: in.Phase, Group: cell.Group, Attempt: cell.Attempt,
		Task: cell.Task, InitID: cell.InitID, WeightsID: in.WeightsID, InfraTries: in.InfraTries, RetryBase: retryBase,
		StopKey: in.StopKey,
	})
	c.sel.AddFuture(f, func(f workflow.Future) { c.finish(id, f) })
}

// finish counts an episode's result (lost if its activity failed for
// good) and accepts its try if it has one to publish.
func (c *chunkRun) finish(id string, f workflow.Future) {
	var r activities.EpisodeResult
	if err := f.Get(c.ctx, &r); err != nil {
		workflow.GetLogger(c.ctx).Error("episode lost", "episode", id, "error", err)
		r = activities.EpisodeResult{EpisodeID: id, Retry: -1}
		c.stopOnIgnoredSeeds(id, err)
	}
	count(&c.t, r, 1)
	c.results[id] = r
	c.pending--
	if c.finished++; c.finished == 1 {
		c.firstDone = workflow.Now(c.ctx)
	}
	c.tellLeft()
	if r.Try != "" && !r.Recorded && !r.Skipped {
		c.accepted = append(c.accepted, activities.AcceptedTry{EpisodeID: r.EpisodeID, Try: r.Try})
	}
	c.details()
}

// stopOnIgnoredSeeds stops the episodes when one failed because its model
// server ignores call seeds (activities.SeedsIgnored): every other
// outcome of that server would pass for a repeatable one, so the phase
// stops, and its run or evaluation with it, the cause in Unservable.
func (c *chunkRun) stopOnIgnoredSeeds(id string, err error) {
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.SeedsIgnored || c.t.Unservable != "" {
		return
	}
	// Histories from before counted such an episode lost and went on.
	if workflow.GetVersion(c.ctx, "seeds-ignored-stops", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	c.t.Unservable = ae.Type() + ": " + ae.Message() // the message names the episode
	workflow.GetLogger(c.ctx).Error("episodes stopped: the model server ignores call seeds", "episode", id, "error", ae.Message())
	c.stop()
}

// publishRerunningCorrupt publishes the accepted tries until none is
// left: a corrupt staged try is run again, at most maxReruns times per
// episode, and then counted lost: the phase goes on without it.
func (c *chunkRun) publishRerunningCorrupt() error {
	reruns := map[string]int{}
	for len(c.accepted) > 0 {
		res, err := publish(c.ctx, c.in, c.accepted, true)
		if err != nil {
			return err
		}
		c.accepted = nil
		n := c.rerun(res.Corrupt, reruns)
		c.details()
		if c.routed && n > 0 {
			// The reruns queue afresh: the fleet unparks the weights.
			again := c.demand
			again.Demand.Remaining, c.told = c.pending, c.pending
			if err := tellFleet(c.ctx, again); err != nil {
				return err
			}
		}
		for range n {
			c.sel.Select(c.ctx)
		}
	}
	return nil
}

// rerun takes back the counts of corrupt tries and runs their episodes
// again, or counts them lost once rerun maxReruns times. It returns how
// many it runs again.
func (c *chunkRun) rerun(corrupt []activities.CorruptTry, reruns map[string]int) int {
	n := 0
	for _, ct := range corrupt {
		prev := c.results[ct.EpisodeID]
		count(&c.t, prev, -1)
		workflow.GetLogger(c.ctx).Warn("corrupt staged try refused", "episode", ct.EpisodeID, "try", ct.Try, "reason", ct.Reason)
		if reruns[ct.EpisodeID] >= maxReruns {
			lost := activities.EpisodeResult{EpisodeID: ct.EpisodeID, Retry: -1}
			count(&c.t, lost, 1)
			c.results[ct.EpisodeID] = lost
			continue
		}
		reruns[ct.EpisodeID]++
		c.t.Reruns++
		c.run(c.cells[ct.EpisodeID], prev.Retry+1)
		n++
	}
	return n
}

// tellFleet sends the fleet a demand change, retried like any control
// activity: episodes scheduled in a weights queue no host is told to
// serve would wait without end.
func tellFleet(ctx workflow.Context, d api.DemandChange) error {
	var records *activities.Records
	what := "episodes wait for weights " + d.Demand.Weights
	switch {
	case d.Left:
		what = fmt.Sprintf("%d episodes left with weights %s", d.Demand.Remaining, d.Demand.Weights)
	case d.Done:
		what = "episodes done with weights " + d.Demand.Weights
	}
	if err := workflow.ExecuteActivity(summarized(controlContext(ctx), "fleet: "+what), records.Demand, d).Get(ctx, nil); err != nil {
		return fmt.Errorf("tell the fleet %s: %w", what, err)
	}
	return nil
}

// count adds (sign 1) or takes back (sign -1) an episode's result in t; a
// result with Retry -1 is an episode lost.
func count(t *api.Tally, r activities.EpisodeResult, sign int) {
	switch {
	case r.Retry < 0:
		t.Lost += sign
		t.Done += sign
	case r.Skipped:
		t.Skipped += sign
	default:
		t.Done += sign
	}
	if r.Valid {
		t.Valid += sign
	}
	if r.Success {
		t.Successes += sign
	}
}

// maxReruns bounds how often one episode is run again after its staged
// records were refused as corrupt.
const maxReruns = 2

// publish puts the accepted tries' records into the tables. It waits out
// a storage outage (retried without limit, at most a minute apart): the
// records are staged, and the phase must not go on without them.
func publish(ctx workflow.Context, in api.EpisodesInput, accepted []activities.AcceptedTry, rerun bool) (activities.PublishResult, error) {
	var res activities.PublishResult
	if len(accepted) == 0 {
		return res, nil
	}
	pctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: api.ControlQueue, StartToCloseTimeout: 15 * time.Minute, HeartbeatTimeout: beatTimeout,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: time.Minute},
	})
	pctx = summarized(pctx, fmt.Sprintf("publish %d episodes of round %d %s", len(accepted), in.Round, in.Phase))
	var records *activities.Records
	f := workflow.ExecuteActivity(pctx, records.Publish, activities.PublishInput{Run: in.Run, Round: in.Round, Phase: in.Phase, Tries: accepted, Rerun: rerun})
	// Older histories returned a count, which they never read.
	var err error
	if rerun {
		err = f.Get(ctx, &res)
	} else {
		err = f.Get(ctx, nil)
	}
	if err != nil {
		return res, fmt.Errorf("publish round %d %s: %w", in.Round, in.Phase, err)
	}
	return res, nil
}

// phaseRun describes the episodes of one phase for runEpisodes.
type phaseRun struct {
	Run        string
	Round      int32
	Phase      string
	WeightsID  string
	Harness    schemas.Harness
	Heartbeat  time.Duration   // 0: 30s
	Priority   int             // in the fleet; 0: fleet.EvalPriority
	Again      bool            // the same weights are used again right after
	StopKey    string          // an evaluation's stop marker (EpisodesInput.StopKey)
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
			StaticSummary: fmt.Sprintf("run %s round %d %s: episodes %d–%d of %d, weights %s", p.Run, p.Round, p.Phase, start, start+len(chunk)-1, len(cells), p.WeightsID),
			TypedSearchAttributes: temporal.NewSearchAttributes(api.RunAttr.ValueSet(p.Run), api.KindAttr.ValueSet("episodes"),
				api.RoundAttr.ValueSet(int64(p.Round)), api.PhaseAttr.ValueSet(p.Phase), api.WeightsAttr.ValueSet(p.WeightsID)),
		})
		f := workflow.ExecuteChildWorkflow(cctx, Episodes, api.EpisodesInput{
			Run: p.Run, Round: p.Round, Phase: p.Phase, WeightsID: p.WeightsID, Cells: chunk,
			InfraTries:   int32(h.Collect.InfraRetries + 1),
			StartToClose: h.Episode.Timeout.D() + startTimeouts(h) + 5*time.Minute,
			Heartbeat:    hb,
			Priority:     p.Priority,
			Again:        p.Again,
			PerHost:      h.Model.PerHost,
			StopKey:      p.StopKey,
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
