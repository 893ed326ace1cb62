// Package workflows holds Roundhouse's deterministic orchestration: the
// train loop (train.go, progress.go), one round per workflow run, continued
// as new between rounds so each run's history stays small; evaluations
// (eval.go), their episode chunks (episodes.go) and scheduled sweeps
// (sweep.go). Side effects live in package activities.
//
// The contract — task queues, workflow ids and type names, signals,
// queries, search attributes, inputs, results and progress — is package
// workflows/api, with the client-side helpers; workers register the
// bodies here, clients need only api.
package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/rl"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Train runs round in.Round, then continues as new for the next one.
func Train(ctx workflow.Context, in api.TrainInput) (api.TrainResult, error) {
	t := newTracker(ctx, in)
	if err := workflow.SetQueryHandler(ctx, api.ProgressQuery, func() (api.Progress, error) { return t.snapshot(), nil }); err != nil {
		return api.TrainResult{}, fmt.Errorf("progress query: %w", err)
	}
	l := schemas.Layout{Run: in.Run}
	r := &round{ctx: ctx, in: in, t: t,
		result: api.TrainResult{Run: in.Run, Prefix: l.Prefix(), Summaries: in.Summaries},
		summary: schemas.RoundSummary{Round: in.Round, WeightsID: in.WeightsID, ValSuccess: -1, Prefix: l.Prefix(),
			MaxInvalidShare: in.Harness.Collect.InvalidLimit()}}
	// Overlapped rounds take their own path (overlap.go); a run that
	// started synchronous stays on this one, so its history replays.
	if in.MaxStaleness > 0 {
		return overlapped(r)
	}

	// 1. Validate (before round 1 without a pool report; every round when configured).
	report, stop, err := r.validateFirst()
	if err != nil {
		return r.result, err
	}
	if stop {
		return r.stopped(schemas.PhaseVal)
	}
	// 2. Pool: only tasks with mixed outcomes teach.
	pool := r.pool(report)
	// 3. Collect groups × attempts episodes.
	collected, n, err := r.collect(pool)
	if err != nil {
		return r.result, err
	}
	if t.stopping {
		return r.stopped(schemas.PhaseTrain)
	}
	// 4. Advantages and selection.
	batch, err := r.buildBatch(n, collected.Lost)
	if err != nil {
		return r.result, err
	}
	// 5. Train: a batch without samples leaves the weights as they were.
	if err := r.train(batch); err != nil {
		return r.result, err
	}
	// 6. Compact the round's records, record the round and go on.
	return r.finish()
}

// round is one run of Train: round in.Round, and its summary and result
// as they fill in.
type round struct {
	ctx     workflow.Context
	in      api.TrainInput
	t       *tracker
	result  api.TrainResult
	summary schemas.RoundSummary
	// pipe is the overlapped run this round belongs to (nil: synchronous);
	// on is the weights it collects on, when not in.WeightsID.
	pipe *pipeline
	on   string
}

// collectOn is the weights the round's episodes run on.
func (r *round) collectOn() string {
	if r.on != "" {
		return r.on
	}
	return r.in.WeightsID
}

// phase records the round's phase: the run's, or in an overlapped run
// its side's.
func (r *round) phase(p string) {
	if r.pipe != nil {
		r.pipe.show()
		return
	}
	r.t.phase(p)
}

// stopped saves the state of a run stopped in phase of its round, which
// is not done.
func (r *round) stopped(phase string) (api.TrainResult, error) {
	in := r.in
	var records *activities.Records
	state := schemas.State{Run: in.Run, Harness: in.Harness.Name, InitialWeightsID: in.InitialWeightsID, WeightsID: in.WeightsID,
		RoundsDone: in.Round - 1, Rounds: in.Rounds, Summaries: in.Summaries, FinalValSuccess: -1,
		Stopped: true, StoppedPhase: phase}
	if err := workflow.ExecuteActivity(controlContext(r.ctx), records.SaveState, state).Get(r.ctx, nil); err != nil {
		return r.result, fmt.Errorf("round %d state after stop: %w", in.Round, err)
	}
	r.t.phase("stopped")
	workflow.GetLogger(r.ctx).Info("run stopped on request", "round", in.Round, "phase", phase)
	r.result.Stopped, r.result.StoppedRound = true, in.Round
	return r.result, nil
}

// validateFirst is the report the pool is chosen from: round 1's pool
// report when given, else a validation of the weights the round starts
// from (round 1, or every round when configured); else none. stop: the
// run was stopped while validating.
func (r *round) validateFirst() (report schemas.Report, stop bool, err error) {
	in := r.in
	switch {
	case in.Round == 1 && in.PoolReport != "":
		var records *activities.Records
		if err := workflow.ExecuteActivity(controlContext(r.ctx), records.ReadReport, in.PoolReport).Get(r.ctx, &report); err != nil {
			return report, false, fmt.Errorf("pool report %s: %w", in.PoolReport, err)
		}
	case in.Round == 1 || in.Harness.Collect.ValidateEveryRound:
		// The round's collection follows with the same weights.
		if report, err = validate(r.ctx, in, r.t, in.Round, in.WeightsID, true); err != nil {
			return report, false, err
		}
		if r.t.stopping {
			return report, true, nil
		}
		r.summary.ValSuccess = report.Overall.SuccessRate
		val := report.Overall
		r.summary.Val = &val
		r.t.successRate(r.summary.ValSuccess)
	}
	return report, false, nil
}

// pool is the tasks the round collects on: those of the report within
// the pool band, or all of them when none is.
func (r *round) pool(report schemas.Report) []int32 {
	h, c := r.in.Harness, r.in.Harness.Collect
	pool := rl.SelectPool(report.Tasks, c.PoolBand[0], c.PoolBand[1])
	if len(pool) == 0 {
		workflow.GetLogger(r.ctx).Warn("no task in the pool band; collecting on all tasks", "band", c.PoolBand)
		for _, t := range h.Tasks {
			pool = append(pool, t.ID)
		}
	}
	r.summary.PoolTasks = pool
	return pool
}

// collect runs the round's groups × attempts episodes on pool's tasks and
// returns their tally and how many there were.
func (r *round) collect(pool []int32) (api.Tally, int, error) {
	in, h := r.in, r.in.Harness
	trainIDs, err := harness.ParseIDs(h.Splits.Train)
	if err != nil {
		return api.Tally{}, 0, fmt.Errorf("harness %s train_init_ids: %w", h.Name, err)
	}
	var eps []api.Cell
	for gi, g := range rl.PlanGroups(pool, trainIDs, in.Groups, h.Collect.Seed, in.Round) {
		for a := 0; a < in.Attempts; a++ {
			eps = append(eps, api.Cell{Task: taskByID(h, g.Task), InitID: g.InitID, Group: int32(gi), Attempt: int32(a)})
		}
	}
	var collected api.Tally
	r.summary.CollectStartMS = workflow.Now(r.ctx).UnixMilli()
	defer func() { r.summary.CollectEndMS = workflow.Now(r.ctx).UnixMilli() }()
	if r.pipe != nil {
		collected = r.pipe.collectEpisodes(r, eps)
	} else {
		collected = r.t.episodes(schemas.PhaseTrain, in.Round, in.WeightsID, eps, false)
	}
	if collected.Unservable != "" {
		return collected, len(eps), fmt.Errorf("round %d collection: %s", in.Round, collected.Unservable)
	}
	return collected, len(eps), nil
}

// buildBatch computes advantages and selects the samples over the round's
// n episodes, lost ones counted as invalid.
func (r *round) buildBatch(n, lost int) (schemas.BatchSummary, error) {
	in, c, summary := r.in, r.in.Harness.Collect, &r.summary
	r.phase("advantages")
	var records *activities.Records
	var batch schemas.BatchSummary
	if err := workflow.ExecuteActivity(summarized(controlContext(r.ctx), fmt.Sprintf("round %d: advantages and selection over %d episodes", in.Round, n)), records.BuildBatch, activities.BatchInput{
		Run: in.Run, Round: in.Round, MaxCallsPerEpisode: c.MaxCallsPerEpisode, Selection: c.Selection, Seed: c.Seed, Filters: c.Filters,
		TrainerWeightsID: in.WeightsID, MaxStaleness: in.MaxStaleness,
	}).Get(r.ctx, &batch); err != nil {
		return batch, fmt.Errorf("round %d batch: %w", in.Round, err)
	}
	summary.BatchSummary = batch
	r.t.batch = &batch
	if lost > 0 {
		if summary.InvalidByCause == nil {
			summary.InvalidByCause = map[string]int{}
		}
		summary.InvalidByCause["lost"] += lost
	}
	if batch.Valid > 0 {
		summary.SuccessRate = float64(batch.Successes) / float64(batch.Valid)
	}
	// Version 1 also shows the collection's success rate in the UI's
	// RoundhouseSuccessRate; runs started before keep replaying without it.
	if workflow.GetVersion(r.ctx, "collection-success-rate", workflow.DefaultVersion, 1) == 1 && batch.Valid > 0 {
		r.t.successRate(summary.SuccessRate)
	}
	return batch, nil
}

// train trains the round's weights on batch into r<round>; a batch
// without samples leaves them as they were.
func (r *round) train(batch schemas.BatchSummary) error {
	in, h := r.in, r.in.Harness
	r.summary.NewWeightsID = in.WeightsID
	if batch.BatchKey == "" {
		workflow.GetLogger(r.ctx).Warn("no training samples this round; weights unchanged", "round", in.Round)
		return nil
	}
	r.phase("training")
	r.summary.TrainStartMS = workflow.Now(r.ctx).UnixMilli()
	defer func() { r.summary.TrainEndMS = workflow.Now(r.ctx).UnixMilli() }()
	out := fmt.Sprintf("r%d", in.Round)
	// A failing trainer is retried without limit, backing off to every 5
	// minutes: the round waits, its last error (with the log's tail)
	// visible in the UI, and resumes by itself once the trainer or its
	// host is fixed. Harness errors are not retried. The first retry
	// waits 10 s so the terminal and the UI show a failed attempt, with
	// its next try, before that try runs.
	tctx := workflow.WithActivityOptions(r.ctx, workflow.ActivityOptions{
		TaskQueue: api.TrainQueue, StartToCloseTimeout: h.Trainer.Timeout.D() + 5*time.Minute, HeartbeatTimeout: beatTimeout,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 10 * time.Second, BackoffCoefficient: 2,
			MaximumInterval: 5 * time.Minute, NonRetryableErrorTypes: []string{"BadHarness"}},
	})
	var trainer *activities.Trainer
	tctx = summarized(tctx, fmt.Sprintf("round %d: train %s → %s on %d samples (heartbeat: step, loss, tokens/s)", in.Round, in.WeightsID, out, batch.Samples))
	if err := workflow.ExecuteActivity(tctx, trainer.Train, activities.TrainInput{
		Run: in.Run, Round: in.Round, BatchKey: batch.BatchKey, WeightsID: in.WeightsID, NewWeightsID: out,
		Staleness: batch.Staleness, SampledBy: batch.SampledBy,
	}).Get(r.ctx, &r.summary.Trainer); err != nil {
		return fmt.Errorf("round %d training: %w", in.Round, err)
	}
	r.summary.NewWeightsID = out
	// Version 1: RoundhouseWeights follows the run to its new weights.
	if workflow.GetVersion(r.ctx, "weights-after-training", workflow.DefaultVersion, 1) == 1 {
		r.t.weights(out)
	}
	return nil
}

// finish compacts the round's records and records the round: then the
// next round, as a new run of Train, or the run's end.
func (r *round) finish() (api.TrainResult, error) {
	in, summary := r.in, &r.summary
	compact(r.ctx, in.Run, in.Round, schemas.PhaseTrain)
	if summary.ValSuccess >= 0 {
		compact(r.ctx, in.Run, in.Round, schemas.PhaseVal)
	}
	summary.OverInvalidLimit = summary.OverLimit()
	summaries := append(append([]schemas.RoundSummary(nil), in.Summaries...), *summary)
	r.t.prog.Summaries = summaries
	r.result.Summaries = summaries
	r.t.update()
	state := schemas.State{Run: in.Run, Harness: in.Harness.Name, InitialWeightsID: in.InitialWeightsID, WeightsID: summary.NewWeightsID,
		RoundsDone: in.Round, Rounds: in.Rounds, Summaries: summaries, FinalValSuccess: -1}
	if in.Round < in.Rounds {
		return r.next(state)
	}
	return r.end(state)
}

// next records the round and continues as new with the next one, unless
// the run was stopped while training: the round is complete, the next
// waits.
func (r *round) next(state schemas.State) (api.TrainResult, error) {
	in := r.in
	var records *activities.Records
	if err := workflow.ExecuteActivity(summarized(controlContext(r.ctx), fmt.Sprintf("round %d: summary and state", in.Round)), records.FinishRound, activities.RoundDoneInput{Summary: r.summary, State: state}).Get(r.ctx, nil); err != nil {
		return r.result, fmt.Errorf("round %d state: %w", in.Round, err)
	}
	if r.t.stopping {
		r.t.phase("stopped")
		r.result.Stopped, r.result.StoppedRound = true, in.Round+1
		return r.result, nil
	}
	next := in
	next.Round, next.WeightsID, next.Summaries, next.PoolReport = in.Round+1, r.summary.NewWeightsID, state.Summaries, ""
	return r.result, workflow.NewContinueAsNewError(r.ctx, Train, next)
}

// end ends the run after its last round: the final validation when
// configured, then the run's state.
func (r *round) end(state schemas.State) (api.TrainResult, error) {
	in := r.in
	r.result.FinalWeightsID = r.summary.NewWeightsID
	r.result.FinalValSuccess = -1
	if in.Harness.Collect.FinalValidation && !r.t.stopping {
		rep, err := validate(r.ctx, in, r.t, in.Round+1, r.summary.NewWeightsID, false)
		if err != nil {
			return r.result, err
		}
		r.result.FinalValSuccess = rep.Overall.SuccessRate
		r.result.FinalVal = &rep.Overall
		compact(r.ctx, in.Run, in.Round+1, schemas.PhaseVal)
	}
	state.FinalValSuccess = r.result.FinalValSuccess
	var records *activities.Records
	if err := workflow.ExecuteActivity(controlContext(r.ctx), records.FinishRound, activities.RoundDoneInput{Summary: r.summary, State: state}).Get(r.ctx, nil); err != nil {
		return r.result, fmt.Errorf("round %d state: %w", in.Round, err)
	}
	r.t.phase("done")
	return r.result, nil
}

// validate runs every (task, validation init state) once with the given
// weights and writes the report tagged val-r<round>.
func validate(ctx workflow.Context, in api.TrainInput, t *tracker, round int32, weights string, again bool) (schemas.Report, error) {
	var rep schemas.Report
	ids, err := harness.ParseIDs(in.Harness.Splits.Val)
	if err != nil {
		return rep, fmt.Errorf("harness %s val_init_ids: %w", in.Harness.Name, err)
	}
	var cells []api.Cell
	for _, task := range in.Harness.Tasks {
		for _, id := range ids {
			cells = append(cells, api.Cell{Task: task, InitID: id, Group: int32(len(cells))})
		}
	}
	if tl := t.episodes(schemas.PhaseVal, round, weights, cells, again); tl.Unservable != "" {
		return rep, fmt.Errorf("round %d validation: %s", round, tl.Unservable)
	}
	if t.stopping {
		return rep, nil
	}
	t.phase("report")
	ctrl := controlContext(ctx)
	var records *activities.Records
	err = workflow.ExecuteActivity(summarized(ctrl, fmt.Sprintf("validation report %s of weights %s", schemas.ValTag(round), weights)), records.WriteReport, activities.ReportInput{
		Run: in.Run, Round: round, Phase: schemas.PhaseVal, Tag: schemas.ValTag(round), WeightsID: weights, InitKey: "val_init_ids",
	}).Get(ctx, &rep)
	if err != nil {
		return rep, fmt.Errorf("validation report of round %d: %w", round, err)
	}
	return rep, nil
}

// beatTimeout is the heartbeat timeout of control and training
// activities. Workers beat for every running activity (internal/heartbeat),
// so it bounds only how long a dead worker's activity goes unnoticed.
const beatTimeout = 30 * time.Second

// controlContext runs data activities (reports, batches, state) on the
// control queue. They read and write S3 only, so their retries are for
// storage: 10 tries, at most 30 s apart, outlast an outage of 2 minutes.
func controlContext(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: api.ControlQueue, StartToCloseTimeout: 15 * time.Minute, HeartbeatTimeout: beatTimeout,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second, MaximumAttempts: 10},
	})
}

// compact folds a phase's small files into one per table. Records are
// already durable without it, so a failure is logged, not fatal.
func compact(ctx workflow.Context, run string, round int32, phase string) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: api.ControlQueue, StartToCloseTimeout: 30 * time.Minute, HeartbeatTimeout: beatTimeout,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var records *activities.Records
	actx = summarized(actx, fmt.Sprintf("compact round %d %s", round, phase))
	if err := workflow.ExecuteActivity(actx, records.Compact, activities.CompactInput{Run: run, Round: round, Phase: phase}).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("compaction failed; per-episode files stay", "round", round, "phase", phase, "error", err)
	}
}

// startTimeouts bounds how long an episode may wait for its host's
// services, which start one after another (1m each by default).
func startTimeouts(h schemas.Harness) time.Duration {
	var d time.Duration
	for _, s := range append([]schemas.Service{h.Model.Service}, h.Services...) {
		if t := s.StartTimeout.D(); t > 0 {
			d += t
		} else {
			d += time.Minute
		}
	}
	return d
}

func withSummary(o workflow.ActivityOptions, summary string) workflow.ActivityOptions {
	o.Summary = summary
	return o
}

// summarized labels the next activity in the Temporal UI's timeline.
func summarized(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, withSummary(workflow.GetActivityOptions(ctx), summary))
}

func taskByID(h schemas.Harness, id int32) schemas.Task {
	for _, t := range h.Tasks {
		if t.ID == id {
			return t
		}
	}
	return schemas.Task{ID: id}
}
