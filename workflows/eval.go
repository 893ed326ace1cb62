package workflows

import (
	"cmp"
	"fmt"
	"sort"

	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Eval runs every (task, init state) cell of the split once — or the
// cells of one shard — and writes the report: eval/<tag>/report.json, or
// the shard's eval/<tag>/shards/<i>-of-<n>.json.
func Eval(ctx workflow.Context, in api.EvalInput) (schemas.Report, error) {
	var rep schemas.Report
	h := in.Harness
	shards := max(in.Shards, 1)
	split, _, err := report.SplitCells(h, in.InitKey, in.Shard, shards)
	if err != nil {
		return rep, fmt.Errorf("eval %s: %w", in.Tag, err)
	}
	cells := make([]api.Cell, len(split))
	for i, c := range split {
		// The cell's index in the whole split names its episode, so shards
		// never write the same keys.
		cells[i] = api.Cell{Task: c.Task, InitID: c.InitID, Group: int32(c.Index)}
	}
	phase := schemas.TagPhase(in.Tag)
	prog := api.EvalProgress{Run: in.Run, Tag: in.Tag, WeightsID: in.WeightsID, InitKey: in.InitKey, Shard: in.Shard, Shards: shards,
		Phase: "episodes", Episodes: api.Tally{Total: len(cells)}}
	running := map[string]bool{}
	if err := workflow.SetQueryHandler(ctx, api.EvalProgressQuery, func() (api.EvalProgress, error) {
		p := prog
		p.Children = nil
		for id := range running {
			p.Children = append(p.Children, id)
		}
		sort.Strings(p.Children)
		return p, nil
	}); err != nil {
		return rep, fmt.Errorf("eval progress query: %w", err)
	}
	what := in.InitKey
	if shards > 1 {
		what = fmt.Sprintf("%s, shard %d/%d", in.InitKey, in.Shard, shards)
	}
	var fails *failures
	var note *fleetNote
	details := func() {
		t := prog.Episodes
		state := prog.Phase
		if prog.Stopping {
			state += " (stopping)"
		}
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("**eval %s** of weights %s on %s · %s\n\n%s| done | valid | successes | lost | skipped |\n|---|---|---|---|---|\n| %d/%d | %d | %d | %d | %d |\n",
			in.Tag, in.WeightsID, what, state, note.markdown()+fails.markdown(), t.Done, t.Total, t.Valid, t.Successes, t.Lost, t.Skipped))
	}
	fails = watchFailures(ctx, details)
	note = watchFleetNotes(ctx, details, false)
	// An evaluation can be stopped like a run (docs/design.md §1); its
	// marker is its own, so a training run in the same prefix goes on.
	// Histories from before took no stop.
	var stopKey, why string
	stoppable := workflow.GetVersion(ctx, "eval-stop", workflow.DefaultVersion, 1) == 1
	if stoppable {
		stopKey = schemas.Layout{Run: in.Run}.EvalStop(in.Tag, workflow.GetInfo(ctx).WorkflowExecution.RunID)
		workflow.Go(ctx, func(ctx workflow.Context) {
			workflow.GetSignalChannel(ctx, api.StopSignal).Receive(ctx, &why)
			why = cmp.Or(why, "stop signal")
			prog.Stopping = true
			details()
			workflow.GetLogger(ctx).Info("evaluation stop requested; running episodes finish, the rest are skipped", "tag", in.Tag, "reason", why)
			var records *activities.Records
			if err := workflow.ExecuteActivity(controlContext(ctx), records.MarkEvalStop, stopKey, why).Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Error("evaluation stop marker not written; its episodes all run", "key", stopKey, "error", err)
			}
		})
	}
	started := workflow.GetInfo(ctx).WorkflowStartTime.UnixMilli()
	t := runEpisodes(ctx, phaseRun{Run: in.Run, Phase: phase, WeightsID: in.WeightsID, Harness: h, Heartbeat: in.Heartbeat, StopKey: stopKey,
		Priority: cmp.Or(in.Priority, fleet.EvalPriority), OnProgress: func(t api.Tally) { prog.Episodes = t; note.fromChunk(t); details() }}, cells, running)
	if t.Unservable != "" {
		return rep, fmt.Errorf("eval %s: %s", in.Tag, t.Unservable)
	}
	// Skipped cells have no record: the report says it is incomplete. A
	// skip without a stop of its own came from the run's STOP marker.
	var stopped *schemas.ReportStop
	if stoppable && t.Skipped > 0 {
		stopped = &schemas.ReportStop{Reason: cmp.Or(why, "the run was stopping (its STOP marker)"), Skipped: t.Skipped}
	}
	workflow.GetLogger(ctx).Info("evaluation episodes done", "tag", in.Tag, "shard", in.Shard, "shards", shards, "done", t.Done, "lost", t.Lost)
	prog.Phase = "report"
	details()
	var records *activities.Records
	err = workflow.ExecuteActivity(controlContext(ctx), records.WriteReport, activities.ReportInput{
		Run: in.Run, Phase: phase, Tag: in.Tag, WeightsID: in.WeightsID, InitKey: in.InitKey,
		Shard: in.Shard, Shards: shards, StartedAtMS: started, Stopped: stopped,
	}).Get(ctx, &rep)
	if err != nil {
		return rep, fmt.Errorf("eval %s report: %w", in.Tag, err)
	}
	if shards == 1 && rep.Stopped == nil {
		// Other shards may still write into a sharded tag's partition, so
		// only a whole evaluation folds its files.
		compact(ctx, in.Run, 0, phase)
		if err := workflow.UpsertTypedSearchAttributes(ctx, api.SuccessRateAttr.ValueSet(rep.Overall.SuccessRate)); err != nil {
			workflow.GetLogger(ctx).Warn("search attributes not updated", "error", err)
		}
	}
	prog.Phase = "done"
	details()
	return rep, nil
}
