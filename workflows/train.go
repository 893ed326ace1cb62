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
	log := workflow.GetLogger(ctx)
	t := newTracker(ctx, in)
	prog := t.prog
	if err := workflow.SetQueryHandler(ctx, api.ProgressQuery, func() (api.Progress, error) { return t.snapshot(), nil }); err != nil {
		return api.TrainResult{}, fmt.Errorf("progress query: %w", err)
	}
	h := in.Harness
	c := h.Collect
	l := schemas.Layout{Run: in.Run}
	result := api.TrainResult{Run: in.Run, Prefix: l.Prefix(), Summaries: in.Summaries}
	ctrl := controlContext(ctx)
	var records *activities.Records
	stopped := func(phase string) (api.TrainResult, error) {
		state := schemas.State{Run: in.Run, Harness: h.Name, InitialWeights: in.InitialWeights, Weights: in.Weights,
			RoundsDone: in.Round - 1, Rounds: in.Rounds, Summaries: in.Summaries, FinalValSuccess: -1,
			Stopped: true, StoppedPhase: phase}
		if err := workflow.ExecuteActivity(ctrl, records.SaveState, state).Get(ctx, nil); err != nil {
			return result, fmt.Errorf("round %d state after stop: %w", in.Round, err)
		}
		t.phase("stopped")
		log.Info("run stopped on request", "round", in.Round, "phase", phase)
		result.Stopped, result.StoppedRound = true, in.Round
		return result, nil
	}

	// 1. Validate (before round 1 without a pool report; every round when configured).
	var report schemas.Report
	summary := schemas.RoundSummary{Round: in.Round, WeightsIn: in.Weights, ValSuccess: -1, Prefix: l.Prefix(),
		MaxInvalidShare: in.Harness.Collect.InvalidLimit()}
	switch {
	case in.Round == 1 && in.PoolReport != "":
		if err := workflow.ExecuteActivity(ctrl, records.ReadReport, in.PoolReport).Get(ctx, &report); err != nil {
			return result, fmt.Errorf("pool report %s: %w", in.PoolReport, err)
		}
	case in.Round == 1 || c.ValidateEveryRound:
		var err error
		// The round's collection follows with the same weights.
		if report, err = validate(ctx, in, t, in.Round, in.Weights, true); err != nil {
			return result, err
		}
		if t.stopping {
			return stopped(schemas.PhaseVal)
		}
		summary.ValSuccess = report.Overall.SuccessRate
		val := report.Overall
		summary.Val = &val
		t.successRate(summary.ValSuccess)
	}

	// 2. Pool: only tasks with mixed outcomes teach.
	pool := rl.SelectPool(report.Tasks, c.PoolBand[0], c.PoolBand[1])
	if len(pool) == 0 {
		log.Warn("no task in the pool band; collecting on all tasks", "band", c.PoolBand)
		for _, t := range h.Tasks {
			pool = append(pool, t.ID)
		}
	}
	summary.PoolTasks = pool

	// 3. Collect groups × attempts episodes.
	trainIDs, err := harness.ParseIDs(h.Splits.Train)
	if err != nil {
		return result, fmt.Errorf("harness %s train_init_ids: %w", h.Name, err)
	}
	var eps []api.Cell
	for gi, g := range rl.PlanGroups(pool, trainIDs, in.Groups, c.Seed, in.Round) {
		for a := 0; a < in.Attempts; a++ {
			eps = append(eps, api.Cell{Task: taskByID(h, g.Task), InitID: g.InitID, Group: int32(gi), Attempt: int32(a)})
		}
	}
	collected := t.episodes(schemas.PhaseTrain, in.Round, in.Weights, eps, false)
	if collected.Unservable != "" {
		return result, fmt.Errorf("round %d collection: %s", in.Round, collected.Unservable)
	}
	lost := collected.Lost
	if t.stopping {
		return stopped(schemas.PhaseTrain)
	}

	// 4. Advantages and selection.
	t.phase("advantages")
	var batch schemas.BatchSummary
	if err := workflow.ExecuteActivity(summarized(ctrl, fmt.Sprintf("round %d: advantages and selection over %d episodes", in.Round, len(eps))), records.BuildBatch, activities.BatchInput{
		Run: in.Run, Round: in.Round, MaxCallsPerEpisode: c.MaxCallsPerEpisode, Selection: c.Selection, Seed: c.Seed, Filters: c.Filters,
	}).Get(ctx, &batch); err != nil {
		return result, fmt.Errorf("round %d batch: %w", in.Round, err)
	}
	summary.BatchSummary = batch
	t.batch = &batch
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
	if workflow.GetVersion(ctx, "collection-success-rate", workflow.DefaultVersion, 1) == 1 && batch.Valid > 0 {
		t.successRate(summary.SuccessRate)
	}

	// 5. Train: a batch without samples leaves the weights as they were.
	summary.WeightsOut = in.Weights
	if batch.BatchKey != "" {
		t.phase("training")
		out := fmt.Sprintf("r%d", in.Round)
		// A failing trainer is retried without limit, backing off to every 5
		// minutes: the round waits, its last error (with the log's tail)
		// visible in the UI, and resumes by itself once the trainer or its
		// host is fixed. Harness errors are not retried. The first retry
		// waits 10 s so the terminal and the UI show a failed attempt, with
		// its next try, before that try runs.
		tctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue: api.TrainQueue, StartToCloseTimeout: h.Trainer.Timeout.D() + 5*time.Minute, HeartbeatTimeout: beatTimeout,
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: 10 * time.Second, BackoffCoefficient: 2,
				MaximumInterval: 5 * time.Minute, NonRetryableErrorTypes: []string{"BadHarness"}},
		})
		var trainer *activities.Trainer
		tctx = summarized(tctx, fmt.Sprintf("round %d: train %s → %s on %d samples (heartbeat: step, loss, tokens/s)", in.Round, in.Weights, out, batch.Samples))
		if err := workflow.ExecuteActivity(tctx, trainer.Train, activities.TrainInput{
			Run: in.Run, Round: in.Round, BatchKey: batch.BatchKey, WeightsIn: in.Weights, WeightsOut: out,
		}).Get(ctx, &summary.Trainer); err != nil {
			return result, fmt.Errorf("round %d training: %w", in.Round, err)
		}
		summary.WeightsOut = out
		// Version 1: RoundhouseWeights follows the run to its new weights.
		if workflow.GetVersion(ctx, "weights-after-training", workflow.DefaultVersion, 1) == 1 {
			t.weights(out)
		}
	} else {
		log.Warn("no training samples this round; weights unchanged", "round", in.Round)
	}

	// 6. Compact the round's records, record the round and go on.
	compact(ctx, in.Run, in.Round, schemas.PhaseTrain)
	if summary.ValSuccess >= 0 {
		compact(ctx, in.Run, in.Round, schemas.PhaseVal)
	}
	summary.OverInvalidLimit = summary.OverLimit()
	summaries := append(append([]schemas.RoundSummary(nil), in.Summaries...), summary)
	prog.Summaries = summaries
	result.Summaries = summaries
	t.update()
	state := schemas.State{Run: in.Run, Harness: h.Name, InitialWeights: in.InitialWeights, Weights: summary.WeightsOut,
		RoundsDone: in.Round, Rounds: in.Rounds, Summaries: summaries, FinalValSuccess: -1}
	if in.Round < in.Rounds {
		if err := workflow.ExecuteActivity(summarized(ctrl, fmt.Sprintf("round %d: summary and state", in.Round)), records.FinishRound, activities.RoundDoneInput{Summary: summary, State: state}).Get(ctx, nil); err != nil {
			return result, fmt.Errorf("round %d state: %w", in.Round, err)
		}
		if t.stopping {
			// Stopped while training: the round is complete, the next waits.
			t.phase("stopped")
			result.Stopped, result.StoppedRound = true, in.Round+1
			return result, nil
		}
		next := in
		next.Round, next.Weights, next.Summaries, next.PoolReport = in.Round+1, summary.WeightsOut, summaries, ""
		return result, workflow.NewContinueAsNewError(ctx, Train, next)
	}
	result.FinalWeights = summary.WeightsOut
	result.FinalValSuccess = -1
	if c.FinalValidation && !t.stopping {
		rep, err := validate(ctx, in, t, in.Round+1, summary.WeightsOut, false)
		if err != nil {
			return result, err
		}
		result.FinalValSuccess = rep.Overall.SuccessRate
		result.FinalVal = &rep.Overall
		compact(ctx, in.Run, in.Round+1, schemas.PhaseVal)
	}
	state.FinalValSuccess = result.FinalValSuccess
	if err := workflow.ExecuteActivity(ctrl, records.FinishRound, activities.RoundDoneInput{Summary: summary, State: state}).Get(ctx, nil); err != nil {
		return result, fmt.Errorf("round %d state: %w", in.Round, err)
	}
	t.phase("done")
	return result, nil
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
