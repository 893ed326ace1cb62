package workflows

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// EvalInput is one evaluation of a weights id on one split of init states,
// or one shard of it (Shards > 1: cells i with i % Shards == Shard).
type EvalInput struct {
	Run       string // the run whose prefix holds harness.json, the weights and eval/<tag>/
	Harness   schemas.Harness
	WeightsID string
	Tag       string
	InitKey   string // val_init_ids or eval_init_ids
	Shard     int
	Shards    int // 0 or 1: the whole split
	Heartbeat time.Duration
}

// EvalProgressQuery returns an evaluation's EvalProgress.
const EvalProgressQuery = "eval-progress"

// EvalProgress is what an evaluation has done so far.
type EvalProgress struct {
	Run       string
	Tag       string
	WeightsID string
	InitKey   string
	Shard     int
	Shards    int
	Phase     string // episodes, report, done
	// Episodes as of the last finished chunk; QueryEvalProgress adds the
	// live counts of the running chunks named in Children.
	Episodes Tally
	Children []string
}

// EvalPhase is the partition an evaluation's records go to: one per tag,
// so evaluations never mix their episodes.
func EvalPhase(tag string) string { return "eval-" + tag }

// EvalWorkflowID names an evaluation (shard) workflow.
func EvalWorkflowID(run, tag string, shard, shards int) string {
	if shards > 1 {
		return fmt.Sprintf("eval-%s-%s-%dof%d", run, tag, shard, shards)
	}
	return fmt.Sprintf("eval-%s-%s", run, tag)
}

// Eval runs every (task, init state) cell of the split once — or the
// cells of one shard — and writes the report: eval/<tag>/report.json, or
// the shard's eval/<tag>/shards/<i>-of-<n>.json.
func Eval(ctx workflow.Context, in EvalInput) (schemas.Report, error) {
	var rep schemas.Report
	h := in.Harness
	shards := max(in.Shards, 1)
	split, _, err := activities.SplitCells(h, in.InitKey, in.Shard, shards)
	if err != nil {
		return rep, fmt.Errorf("eval %s: %w", in.Tag, err)
	}
	cells := make([]Cell, len(split))
	for i, c := range split {
		// The cell's index in the whole split names its episode, so shards
		// never write the same keys.
		cells[i] = Cell{Task: c.Task, InitID: c.InitID, Group: int32(c.Index)}
	}
	phase := EvalPhase(in.Tag)
	prog := EvalProgress{Run: in.Run, Tag: in.Tag, WeightsID: in.WeightsID, InitKey: in.InitKey, Shard: in.Shard, Shards: shards,
		Phase: "episodes", Episodes: Tally{Total: len(cells)}}
	running := map[string]bool{}
	if err := workflow.SetQueryHandler(ctx, EvalProgressQuery, func() (EvalProgress, error) {
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
	details := func() {
		t := prog.Episodes
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("**eval %s** of weights %s on %s · %s\n\n%s| done | valid | successes | lost |\n|---|---|---|---|\n| %d/%d | %d | %d | %d |\n",
			in.Tag, in.WeightsID, what, prog.Phase, fails.markdown(), t.Done, t.Total, t.Valid, t.Successes, t.Lost))
	}
	fails = watchFailures(ctx, details)
	started := workflow.GetInfo(ctx).WorkflowStartTime.UnixMilli()
	t := runEpisodes(ctx, phaseRun{Run: in.Run, Phase: phase, Weights: in.WeightsID, Harness: h, Heartbeat: in.Heartbeat,
		OnProgress: func(t Tally) { prog.Episodes = t; details() }}, cells, running)
	workflow.GetLogger(ctx).Info("evaluation episodes done", "tag", in.Tag, "shard", in.Shard, "shards", shards, "done", t.Done, "lost", t.Lost)
	prog.Phase = "report"
	details()
	var control *activities.Control
	err = workflow.ExecuteActivity(controlContext(ctx), control.WriteReport, activities.ReportInput{
		Run: in.Run, Phase: phase, Tag: in.Tag, WeightsID: in.WeightsID, InitKey: in.InitKey,
		Shard: in.Shard, Shards: shards, StartedAtMS: started,
	}).Get(ctx, &rep)
	if err != nil {
		return rep, fmt.Errorf("eval %s report: %w", in.Tag, err)
	}
	if shards == 1 {
		// Other shards may still write into a sharded tag's partition, so
		// only a whole evaluation folds its files.
		compact(ctx, in.Run, 0, phase)
		if err := workflow.UpsertTypedSearchAttributes(ctx, SuccessRateAttr.ValueSet(rep.Overall.SuccessRate)); err != nil {
			workflow.GetLogger(ctx).Warn("search attributes not updated", "error", err)
		}
	}
	prog.Phase = "done"
	details()
	return rep, nil
}

// QueryEvalProgress asks an evaluation workflow for its progress and adds
// the live counts of its running episode chunks.
func QueryEvalProgress(ctx context.Context, c client.Client, id string) (EvalProgress, error) {
	var p EvalProgress
	if err := queryWithChunks(ctx, c, id, EvalProgressQuery, &p); err != nil {
		return p, fmt.Errorf("evaluation %s: %w", id, err)
	}
	addChunks(ctx, c, p.Children, &p.Episodes)
	return p, nil
}
