package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
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
// cells of one shard — and writes the report.
func Eval(ctx workflow.Context, in EvalInput) (schemas.Report, error) {
	var rep schemas.Report
	h := in.Harness
	var split string
	switch in.InitKey {
	case "val_init_ids":
		split = h.Splits.Val
	case "eval_init_ids":
		split = h.Splits.Eval
	default:
		return rep, fmt.Errorf("init key %q: use val_init_ids or eval_init_ids", in.InitKey)
	}
	ids, err := harness.ParseIDs(split)
	if err != nil {
		return rep, fmt.Errorf("harness %s %s: %w", h.Name, in.InitKey, err)
	}
	shards := max(in.Shards, 1)
	var cells []Cell
	i := 0
	for _, task := range h.Tasks {
		for _, id := range ids {
			if i%shards == in.Shard {
				cells = append(cells, Cell{Task: task, InitID: id, Group: int32(i)})
			}
			i++
		}
	}
	phase := EvalPhase(in.Tag)
	t := runEpisodes(ctx, phaseRun{Run: in.Run, Phase: phase, Weights: in.WeightsID, Harness: h, Heartbeat: in.Heartbeat,
		OnProgress: func(t Tally) {
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("**eval %s** of weights %s on %s: %d/%d episodes, %d successes", in.Tag, in.WeightsID, in.InitKey, t.Done, t.Total, t.Successes))
		}}, cells, map[string]bool{})
	workflow.GetLogger(ctx).Info("evaluation episodes done", "tag", in.Tag, "done", t.Done, "lost", t.Lost)
	var control *activities.Control
	err = workflow.ExecuteActivity(controlContext(ctx), control.WriteReport, activities.ReportInput{
		Run: in.Run, Phase: phase, Tag: in.Tag, WeightsID: in.WeightsID, InitKey: in.InitKey,
	}).Get(ctx, &rep)
	if err != nil {
		return rep, fmt.Errorf("eval %s report: %w", in.Tag, err)
	}
	return rep, nil
}
