package api

import (
	"reflect"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func payload(t *testing.T, v any) *commonpb.Payload {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func payloads(t *testing.T, v any) *commonpb.Payloads {
	return &commonpb.Payloads{Payloads: []*commonpb.Payload{payload(t, v)}}
}

// info is a train execution as the visibility store lists it.
func info(t *testing.T, run string, st enumspb.WorkflowExecutionStatus, round int64, phase string, val float64) *workflowpb.WorkflowExecutionInfo {
	attrs := map[string]*commonpb.Payload{
		KindAttr.GetName():  payload(t, "train"),
		RunAttr.GetName():   payload(t, run),
		RoundAttr.GetName(): payload(t, round),
		PhaseAttr.GetName(): payload(t, phase),
	}
	if val >= 0 {
		attrs[SuccessRateAttr.GetName()] = payload(t, val)
	}
	return &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: WorkflowID(run), RunId: "x"},
		Status: st, StartTime: timestamppb.Now(), SearchAttributes: &commonpb.SearchAttributes{IndexedFields: attrs}}
}

// A run's view comes from its search attributes, then its progress query
// (running) or its input and close event (closed). Validation counts are
// taken only where they are those of the rate shown.
func TestRunViews(t *testing.T) {
	sums := []schemas.RoundSummary{{Round: 1, ValSuccess: 0.3, WeightsID: "w0", NewWeightsID: "r1", Val: &schemas.TaskResult{Successes: 9, Valid: 30, SuccessRate: 0.3}},
		{Round: 2, ValSuccess: 0.5, WeightsID: "r1", NewWeightsID: "r2"}}
	long := "round 2 training: activity error (type: Train, scheduledEventID: 31, activityID: 31, identity: host-1):\ntrainer exited with status 1: CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.15 GiB total capacity)"

	running := viewFromInfo(info(t, "r-running", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, 2, "val", 0.3))
	applyProgress(&running, Progress{Run: "r-running", Round: 2, Rounds: 3, Phase: "train", WeightsID: "r1",
		Episodes: Tally{Total: 10, Done: 4, Valid: 3, Successes: 2}, Children: []string{"chunk-0"}, Summaries: sums[:1]})
	stopping := viewFromInfo(info(t, "r-stopping", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, 1, "train", -1))
	applyProgress(&stopping, Progress{Round: 1, Rounds: 2, Phase: "train", Stopping: true, Episodes: Tally{Total: 8, Done: 8, Valid: 8, Successes: 8}})

	closed := func(run string, st enumspb.WorkflowExecutionStatus, in *TrainInput, ev *historypb.HistoryEvent) RunView {
		v := viewFromInfo(info(t, run, st, 2, "done", 0.5))
		applyClose(&v, nil, in, ev)
		return v
	}
	in := &TrainInput{Round: 2, Rounds: 2, WeightsID: "r1", Summaries: sums[:1]}
	finalVal := &schemas.TaskResult{Successes: 14, Valid: 20, SuccessRate: 0.7}
	completed := closed("r-completed", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, in, &historypb.HistoryEvent{
		Attributes: &historypb.HistoryEvent_WorkflowExecutionCompletedEventAttributes{WorkflowExecutionCompletedEventAttributes: &historypb.WorkflowExecutionCompletedEventAttributes{
			Result: payloads(t, TrainResult{Summaries: sums, FinalWeightsID: "r2", FinalValSuccess: 0.7, FinalVal: finalVal})}}})
	stopped := closed("r-stopped", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, &TrainInput{Round: 2, Rounds: 4, Summaries: sums[:1]}, &historypb.HistoryEvent{
		Attributes: &historypb.HistoryEvent_WorkflowExecutionCompletedEventAttributes{WorkflowExecutionCompletedEventAttributes: &historypb.WorkflowExecutionCompletedEventAttributes{
			Result: payloads(t, TrainResult{Summaries: sums[:1], FinalValSuccess: -1, Stopped: true, StoppedRound: 2})}}})
	failed := closed("r-failed", enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, in, &historypb.HistoryEvent{
		Attributes: &historypb.HistoryEvent_WorkflowExecutionFailedEventAttributes{WorkflowExecutionFailedEventAttributes: &historypb.WorkflowExecutionFailedEventAttributes{
			Failure: &failurepb.Failure{Message: long, Cause: &failurepb.Failure{Message: "trainer exited with status 1"}}}}})
	canceled := closed("r-canceled", enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, in, &historypb.HistoryEvent{
		Attributes: &historypb.HistoryEvent_WorkflowExecutionCanceledEventAttributes{WorkflowExecutionCanceledEventAttributes: &historypb.WorkflowExecutionCanceledEventAttributes{}}})
	terminated := closed("r-terminated", enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, nil, &historypb.HistoryEvent{
		Attributes: &historypb.HistoryEvent_WorkflowExecutionTerminatedEventAttributes{WorkflowExecutionTerminatedEventAttributes: &historypb.WorkflowExecutionTerminatedEventAttributes{Reason: "operator: wrong harness"}}})

	// r-stopped's attribute (50 %) is newer than its summaries, so its
	// counts are not taken; r-running's attribute is round 1's validation.
	want := []RunView{
		{Run: "r-running", Status: "running", Round: 2, Rounds: 3, Phase: "train", Episodes: Tally{Total: 10, Done: 4, Valid: 3, Successes: 2}, Live: true,
			Val: 0.3, ValCounts: sums[0].Val, WeightsID: "r1", Children: []string{"chunk-0"}, Summaries: sums[:1]},
		{Run: "r-stopping", Status: "stopping", Round: 1, Rounds: 2, Phase: "train", Episodes: Tally{Total: 8, Done: 8, Valid: 8, Successes: 8}, Live: true, Val: -1},
		{Run: "r-completed", Status: "completed", Round: 2, Rounds: 2, Phase: "done", Val: 0.7, ValCounts: finalVal, FinalVal: true, WeightsID: "r2", Summaries: sums},
		{Run: "r-stopped", Status: "stopped", Round: 2, Rounds: 4, Phase: "done", Val: 0.5, Summaries: sums[:1]},
		{Run: "r-failed", Status: "failed", Round: 2, Rounds: 2, Phase: "done", Val: 0.5, WeightsID: "r1", Err: long, Summaries: sums[:1]},
		{Run: "r-canceled", Status: "canceled", Round: 2, Rounds: 2, Phase: "done", Val: 0.5, WeightsID: "r1", Summaries: sums[:1]},
		{Run: "r-terminated", Status: "terminated", Round: 2, Phase: "done", Val: 0.5, Err: "terminated: operator: wrong harness"},
	}
	for i, got := range []RunView{running, stopping, completed, stopped, failed, canceled, terminated} {
		got.Started = want[i].Started
		if got.Kind != KindTrain || got.WorkflowID != WorkflowID(want[i].Run) {
			t.Errorf("view of %s: kind %q, workflow %q", want[i].Run, got.Kind, got.WorkflowID)
		}
		got.Kind, got.WorkflowID = "", ""
		if len(got.Children) == 0 {
			got.Children = nil
		}
		if len(got.Summaries) == 0 {
			got.Summaries = nil
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("view of %s:\n got %+v\nwant %+v", want[i].Run, got, want[i])
		}
	}
	if !running.Running() || !stopping.Running() || completed.Running() || failed.Running() {
		t.Errorf("Running: running %v, stopping %v, completed %v, failed %v", running.Running(), stopping.Running(), completed.Running(), failed.Running())
	}
}

// An evaluation's view: kind, tag and shard from its search attributes
// and id (a sweep's has a parent), then its progress query or its
// report; a stopped report makes it stopped and says why.
func TestEvalViews(t *testing.T) {
	evalInfo := func(run, tag string, shard, shards int, parent bool, st enumspb.WorkflowExecutionStatus) *workflowpb.WorkflowExecutionInfo {
		x := &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: EvalWorkflowID(run, tag, shard, shards), RunId: "x"},
			Status: st, StartTime: timestamppb.Now(), SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
				KindAttr.GetName(): payload(t, "eval"), RunAttr.GetName(): payload(t, run), PhaseAttr.GetName(): payload(t, schemas.TagPhase(tag)),
				WeightsAttr.GetName(): payload(t, "r7")}}}
		if parent {
			x.ParentExecution = &commonpb.WorkflowExecution{WorkflowId: "sweep-nightly-2026", RunId: "y"}
		}
		return x
	}
	sharded := viewFromInfo(evalInfo("plus", "t-2of3", 1, 4, false, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING))
	if sharded.Kind != KindEval || sharded.Tag != "t-2of3" || sharded.Shard != 1 || sharded.Shards != 4 || sharded.Phase != "" || sharded.WeightsID != "r7" || sharded.Run != "plus" {
		t.Errorf("sharded evaluation %+v", sharded)
	}
	// A tag that looks like a shard suffix is still the tag.
	whole := viewFromInfo(evalInfo("plus", "t-2of3", 0, 1, false, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING))
	if whole.Tag != "t-2of3" || whole.Shards != 1 {
		t.Errorf("whole evaluation %+v", whole)
	}
	applyEvalProgress(&whole, EvalProgress{Tag: "t-2of3", WeightsID: "r7", InitKey: "val_init_ids", Shards: 1, Phase: "episodes", Stopping: true,
		Episodes: Tally{Total: 10, Done: 3}})
	if !whole.Running() || whole.Status != "stopping" || !whole.Live || whole.Episodes.Done != 3 || whole.Phase != "episodes" {
		t.Errorf("stopping evaluation %+v", whole)
	}
	sweep := viewFromInfo(evalInfo("lab", "sweep-nightly-r2", 0, 1, true, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED))
	rep := schemas.Report{Overall: schemas.TaskResult{Episodes: 20, Valid: 20, Successes: 7, SuccessRate: 0.35}, Stopped: &schemas.ReportStop{Reason: "starter stop", Skipped: 15}}
	applyEvalClose(&sweep, nil, &historypb.HistoryEvent{Attributes: &historypb.HistoryEvent_WorkflowExecutionCompletedEventAttributes{
		WorkflowExecutionCompletedEventAttributes: &historypb.WorkflowExecutionCompletedEventAttributes{Result: payloads(t, rep)}}})
	if sweep.Kind != KindSweepEval || sweep.Status != "stopped" || sweep.Running() || sweep.Val != 0.35 || sweep.ValCounts == nil || sweep.ValCounts.Successes != 7 ||
		sweep.Err != "incomplete: stopped (starter stop), 15 cells skipped" {
		t.Errorf("stopped sweep evaluation %+v", sweep)
	}
	if got := RunningName(sweep); got != "lab (sweep-eval, tag sweep-nightly-r2)" {
		t.Errorf("RunningName = %q", got)
	}
}

func TestFailureMessage(t *testing.T) {
	f := &failurepb.Failure{Message: "round 1 batch: activity error: s3 down", Cause: &failurepb.Failure{Message: "activity error",
		Cause: &failurepb.Failure{Message: "s3 down", Cause: &failurepb.Failure{Message: "dial tcp 127.0.0.1:9100: connection refused"}}}}
	if got, want := failureMessage(f), "round 1 batch: activity error: s3 down: dial tcp 127.0.0.1:9100: connection refused"; got != want {
		t.Errorf("failureMessage = %q, want %q", got, want)
	}
}
