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

func TestFailureMessage(t *testing.T) {
	f := &failurepb.Failure{Message: "round 1 batch: activity error: s3 down", Cause: &failurepb.Failure{Message: "activity error",
		Cause: &failurepb.Failure{Message: "s3 down", Cause: &failurepb.Failure{Message: "dial tcp 127.0.0.1:9100: connection refused"}}}}
	if got, want := failureMessage(f), "round 1 batch: activity error: s3 down: dial tcp 127.0.0.1:9100: connection refused"; got != want {
		t.Errorf("failureMessage = %q, want %q", got, want)
	}
}
