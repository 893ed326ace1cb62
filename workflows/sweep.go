package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Sweep evaluates the complete weights of in.Source that the leaderboard
// does not hold yet, each in an Eval child workflow, and rewrites the
// leaderboard after each one, so it fills in as evaluations finish.
func Sweep(ctx workflow.Context, in api.SweepInput) (api.SweepResult, error) {
	log := workflow.GetLogger(ctx)
	res := api.SweepResult{Leaderboard: schemas.SweepLeaderboard(in.Name)}
	if in.InitKey == "" {
		in.InitKey = "val_init_ids"
	}
	ctrl := controlContext(ctx)
	var head string // what the sweep is doing; failing activities follow it
	var fails *failures
	details := func() { workflow.SetCurrentDetails(ctx, head+"\n\n"+fails.markdown()) }
	fails = watchFailures(ctx, details)
	var records *activities.Records
	var found []activities.SweepWeights
	err := workflow.ExecuteActivity(ctrl, records.ListSweepWeights, activities.SweepSource{
		Source: in.Source, Run: in.Run, HarnessDigest: in.Harness.Digest,
	}).Get(ctx, &found)
	if err != nil {
		return res, fmt.Errorf("sweep %s: list weights of %s: %w", in.Name, in.Source, err)
	}
	var lb schemas.Leaderboard
	if err := workflow.ExecuteActivity(ctrl, records.ReadLeaderboard, in.Name).Get(ctx, &lb); err != nil {
		return res, fmt.Errorf("sweep %s: read leaderboard: %w", in.Name, err)
	}
	if lb.Source != "" && (lb.Source != in.Source || lb.Run != in.Run) {
		return res, fmt.Errorf("sweep %s: its leaderboard holds weights of %s evaluated in run %s, not %s in %s: give the sweep another name", in.Name, lb.Source, lb.Run, in.Source, in.Run)
	}
	lb.Sweep, lb.Source, lb.Run, lb.InitKey = in.Name, in.Source, in.Run, in.InitKey
	done := map[string]bool{}
	for _, e := range lb.Entries {
		done[e.WeightsID] = true
	}
	var todo []activities.SweepWeights
	for _, w := range found {
		if done[w.ID] {
			res.Skipped++
		} else {
			todo = append(todo, w)
		}
	}
	head = fmt.Sprintf("**sweep %s**: %d weights found, %d on the leaderboard, %d to evaluate", in.Name, len(found), res.Skipped, len(todo))
	details()
	log.Info("sweep", "found", len(found), "skipped", res.Skipped, "todo", len(todo))

	// Leaderboard writes take turns and each sends the entries as they are
	// when its turn comes, so the last write always holds every entry.
	writing := workflow.NewSemaphore(ctx, 1)
	write := func(ctx workflow.Context) error {
		if err := writing.Acquire(ctx, 1); err != nil {
			return err
		}
		defer writing.Release(1)
		snap := lb
		snap.Entries = append([]schemas.LeaderboardEntry(nil), lb.Entries...)
		return workflow.ExecuteActivity(ctrl, records.WriteLeaderboard, snap).Get(ctx, nil)
	}
	slots := workflow.NewSemaphore(ctx, int64(max(in.Parallel, 1)))
	wg := workflow.NewWaitGroup(ctx)
	var writeErr error
	for _, w := range todo {
		if err := slots.Acquire(ctx, 1); err != nil {
			return res, err
		}
		wg.Add(1)
		workflow.Go(ctx, func(ctx workflow.Context) {
			defer wg.Done()
			defer slots.Release(1)
			e, err := evaluateWeights(ctx, in, w)
			if err != nil {
				log.Error("sweep evaluation failed", "weights", w.ID, "error", err)
				res.Failed = append(res.Failed, w.ID)
				return
			}
			lb.Entries = append(lb.Entries, e)
			res.Evaluated = append(res.Evaluated, w.ID)
			if err := write(ctx); err != nil && writeErr == nil {
				writeErr = err
			}
		})
	}
	wg.Wait(ctx)
	// Once more even when nothing was new: the leaderboard then exists for
	// every sweep that ran, and says when it last looked.
	if err := write(ctx); err != nil {
		return res, fmt.Errorf("sweep %s: write leaderboard: %w", in.Name, err)
	}
	if writeErr != nil {
		log.Warn("a leaderboard update failed; the last one succeeded", "error", writeErr)
	}
	head = fmt.Sprintf("**sweep %s** done: %d evaluated, %d already on the leaderboard, %d failed", in.Name, len(res.Evaluated), res.Skipped, len(res.Failed))
	details()
	if len(res.Failed) > 0 {
		return res, fmt.Errorf("sweep %s: evaluation of %s failed (details in their Eval workflows); the next sweep tries again", in.Name, strings.Join(res.Failed, ", "))
	}
	return res, nil
}

// evaluateWeights imports weights from an s3 prefix into the evaluation
// run if needed, then reuses the tag's report if an earlier sweep wrote it
// for the same weights, or runs the Eval workflow.
func evaluateWeights(ctx workflow.Context, in api.SweepInput, w activities.SweepWeights) (schemas.LeaderboardEntry, error) {
	var records *activities.Records
	tag := schemas.SweepTag(in.Name, w.ID)
	runID := w.ID
	if strings.HasPrefix(in.Source, "s3://") {
		runID = schemas.ImportedID(w.ID, w.Digest)
		ictx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue: api.ControlQueue, StartToCloseTimeout: 6 * time.Hour, HeartbeatTimeout: beatTimeout,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 5},
			Summary:     fmt.Sprintf("import %s as %s", w.Prefix, runID),
		})
		err := workflow.ExecuteActivity(ictx, records.ImportWeights, activities.ImportInput{From: w.Prefix, Run: in.Run, Target: runID, Digest: w.Digest}).Get(ctx, nil)
		if err != nil {
			return schemas.LeaderboardEntry{}, fmt.Errorf("import weights %s: %w", w.ID, err)
		}
	}
	key := schemas.Layout{Run: in.Run}.Report(tag)
	var found activities.FoundReport
	if err := workflow.ExecuteActivity(controlContext(ctx), records.FindReport, key).Get(ctx, &found); err != nil {
		return schemas.LeaderboardEntry{}, fmt.Errorf("look for report %s: %w", key, err)
	}
	rep := found.Report
	// A stopped evaluation's report is incomplete: evaluated again, it
	// is finished and replaced. (Reports stored before had no Stopped, so
	// recorded histories take the same path.)
	if !found.Found || rep.WeightsID != runID || rep.InitKey != in.InitKey || rep.Stopped != nil {
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:    api.EvalWorkflowID(in.Run, tag, 0, 1),
			TaskQueue:     api.ControlQueue,
			StaticSummary: fmt.Sprintf("sweep %s: weights %s of %s on %s", in.Name, w.ID, in.Source, in.InitKey),
			TypedSearchAttributes: temporal.NewSearchAttributes(api.RunAttr.ValueSet(in.Run), api.KindAttr.ValueSet("eval"),
				api.WeightsAttr.ValueSet(runID), api.PhaseAttr.ValueSet(schemas.TagPhase(tag))),
		})
		rep = schemas.Report{}
		err := workflow.ExecuteChildWorkflow(cctx, Eval, api.EvalInput{
			Run: in.Run, Harness: in.Harness, WeightsID: runID, Tag: tag, InitKey: in.InitKey, Heartbeat: in.Heartbeat,
			Priority: in.Priority,
		}).Get(ctx, &rep)
		if err != nil {
			return schemas.LeaderboardEntry{}, fmt.Errorf("evaluate weights %s: %w", w.ID, err)
		}
		if rep.Stopped != nil {
			return schemas.LeaderboardEntry{}, fmt.Errorf("evaluation of weights %s was stopped (%s) with %d cells skipped: an incomplete report never enters the leaderboard; the next sweep finishes it",
				w.ID, rep.Stopped.Reason, rep.Stopped.Skipped)
		}
	}
	o := rep.Overall
	return schemas.LeaderboardEntry{WeightsID: w.ID, RunWeightsID: runID, Tag: tag, SuccessRate: o.SuccessRate,
		Successes: o.Successes, Valid: o.Valid, Episodes: o.Episodes, Invalid: o.Invalid, Lost: o.Lost, ReportKey: key,
		EvaluatedAtMS: workflow.Now(ctx).UnixMilli()}, nil
}
