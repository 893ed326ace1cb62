package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"golang.org/x/sync/errgroup"

	"github.com/roundhouse-rl/roundhouse/internal/failnote"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Listing and describing runs — training runs, evaluations and a sweep's
// evaluations — all from Temporal (the progress query of running ones,
// search attributes and the histories of finished ones), nothing from S3:
// what `starter status` prints.

// Kinds of RunView: a training run, an evaluation (`starter eval`, one
// view per shard), and an evaluation a sweep started.
const (
	KindTrain     = "train"
	KindEval      = "eval"
	KindSweepEval = "sweep-eval"
)

// RunView is one training run, or one evaluation (shard), as Temporal
// knows it.
type RunView struct {
	Run  string
	Kind string // KindTrain, KindEval, KindSweepEval
	// WorkflowID is the workflow the view describes.
	WorkflowID string
	// Tag, Shard, Shards and InitKey are an evaluation's.
	Tag           string
	Shard, Shards int
	InitKey       string
	Status        string // running, stopping, completed, stopped, failed, canceled, terminated, timed out
	Round         int32
	Rounds        int32 // 0 when unknown
	Phase         string
	// Episodes are the current phase's live counts; Live says they are known.
	Episodes Tally
	Live     bool
	Val      float64 // latest validation success, -1 when none
	// ValCounts are Val's counts when known, for its interval.
	ValCounts *schemas.TaskResult
	FinalVal  bool // Val is the final validation's (of an evaluation: its report's)
	WeightsID string
	Err       string // the run's failure, or the last failure of an activity being retried
	Started   time.Time
	Children  []string
	// Summaries are the finished rounds.
	Summaries []schemas.RoundSummary
}

// Running says the run's workflow has not ended.
func (v RunView) Running() bool { return v.Status == "running" || v.Status == "stopping" }

// listQuery finds the current workflow execution of each training run
// and evaluation, and more (and ...): the rounds a run has left behind
// through continue-as-new are not runs of their own; episode chunks and
// sweeps are not listed.
func listQuery(more ...string) string {
	q := fmt.Sprintf(`(%[1]s = "train" OR %[1]s = "eval") AND ExecutionStatus != "ContinuedAsNew"`, KindAttr.GetName())
	for _, m := range more {
		q += " AND " + m
	}
	return q
}

// ListRuns lists the newest limit training runs and evaluations of
// namespace ns from the visibility store, each described, a few at a
// time. dc decodes the payloads of histories: the client's converter,
// with the payload codec when payloads are encrypted.
func ListRuns(ctx context.Context, c client.Client, ns string, dc converter.DataConverter, limit int) ([]RunView, error) {
	infos, err := list(ctx, c, ns, listQuery(), limit)
	if err != nil {
		return nil, err
	}
	return describeAll(ctx, c, ns, dc, infos), nil
}

// DescribeRunAll is everything of one run: its training run (first, if
// it has one) and its evaluations, newest first, each described. A run
// the visibility store does not know is looked up by its training
// workflow's id, as DescribeRun does.
func DescribeRunAll(ctx context.Context, c client.Client, ns string, dc converter.DataConverter, run string) ([]RunView, error) {
	infos, err := list(ctx, c, ns, listQuery(fmt.Sprintf(`%s = %q`, RunAttr.GetName(), run)), 1000)
	if err != nil {
		return nil, err
	}
	views := describeAll(ctx, c, ns, dc, infos)
	if len(views) == 0 {
		v, err := DescribeRun(ctx, c, ns, dc, run)
		if err != nil {
			return nil, err
		}
		return []RunView{v}, nil
	}
	// The training run first; the list is newest first already.
	sort.SliceStable(views, func(i, j int) bool { return views[i].Kind == KindTrain && views[j].Kind != KindTrain })
	return views, nil
}

// Running lists the training runs and evaluations that run now, as the
// visibility store has them (no query, no history): what stop and cancel
// choose from, and name when asked for one that does not run.
func Running(ctx context.Context, c client.Client, ns string) ([]RunView, error) {
	infos, err := list(ctx, c, ns, listQuery(`ExecutionStatus = "Running"`), 1000)
	if err != nil {
		return nil, err
	}
	views := make([]RunView, len(infos))
	for i, x := range infos {
		views[i] = viewFromInfo(x)
	}
	return views, nil
}

// list runs a visibility query and keeps the newest execution of each
// workflow id, newest first, at most limit.
func list(ctx context.Context, c client.Client, ns, query string, limit int) ([]*workflowpb.WorkflowExecutionInfo, error) {
	lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := c.ListWorkflow(lctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: ns, PageSize: int32(limit), Query: query})
	if IsUnmappedAttribute(err) {
		// Never registered: no run was ever started in this namespace (a
		// start registers them first). Registered but not yet known to the
		// frontend: wait for its cache, then answer. An empty list in any
		// other case would say "no runs" where the truth is "cannot tell".
		registered, lerr := registeredAttributes(lctx, c, ns)
		if lerr == nil && !registered {
			return nil, nil
		}
		if lerr == nil && awaitAttributes(lctx, c, ns) == nil {
			resp, err = c.ListWorkflow(lctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: ns, PageSize: int32(limit), Query: query})
		}
	}
	if IsUnmappedAttribute(err) {
		return nil, fmt.Errorf("list runs on Temporal: namespace %s does not know Roundhouse's search attributes (%w): a worker or `starter train` registers them at start; where clients may not (Temporal Cloud), create them: %s",
			ns, err, CreateAttributesHint(ns, searchAttributes))
	}
	var bad *serviceerror.InvalidArgument
	if errors.As(err, &bad) {
		return nil, fmt.Errorf("list runs on Temporal: the visibility store of namespace %s refused the query %q: %w", ns, query, err)
	}
	if err != nil {
		return nil, fmt.Errorf("list runs on Temporal (namespace %s): %w", ns, err)
	}
	byID := map[string]*workflowpb.WorkflowExecutionInfo{}
	for _, x := range resp.Executions {
		id := x.GetExecution().GetWorkflowId()
		if old := byID[id]; old == nil || x.GetStartTime().AsTime().After(old.GetStartTime().AsTime()) {
			byID[id] = x
		}
	}
	infos := make([]*workflowpb.WorkflowExecutionInfo, 0, len(byID))
	for _, x := range byID {
		infos = append(infos, x)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].GetStartTime().AsTime().After(infos[j].GetStartTime().AsTime()) })
	if len(infos) > limit {
		infos = infos[:limit]
	}
	return infos, nil
}

// describeAll describes executions a few at a time.
func describeAll(ctx context.Context, c client.Client, ns string, dc converter.DataConverter, infos []*workflowpb.WorkflowExecutionInfo) []RunView {
	views := make([]RunView, len(infos))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, x := range infos {
		g.Go(func() error {
			views[i] = describe(gctx, c, ns, dc, x)
			return nil
		})
	}
	_ = g.Wait() // describe records its errors in the view
	return views
}

// DescribeRun is one run's current execution, described.
func DescribeRun(ctx context.Context, c client.Client, ns string, dc converter.DataConverter, run string) (RunView, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := c.DescribeWorkflowExecution(dctx, WorkflowID(run), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return RunView{}, fmt.Errorf("run %s not found: see `starter status` for the runs", run)
	}
	if err != nil {
		return RunView{}, fmt.Errorf("describe run %s (workflow %s): %w", run, WorkflowID(run), err)
	}
	return describe(ctx, c, ns, dc, d.GetWorkflowExecutionInfo()), nil
}

// describe completes a view from Temporal: a running run answers the
// progress query; a closed one has its input and its close event.
func describe(ctx context.Context, c client.Client, ns string, dc converter.DataConverter, info *workflowpb.WorkflowExecutionInfo) RunView {
	v := viewFromInfo(info)
	if v.Kind != KindTrain {
		return describeEval(ctx, c, ns, dc, info, v)
	}
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		p, err := QueryProgress(ctx, c, v.Run)
		if err != nil {
			v.Err = fmt.Sprintf("no progress (is a control worker running?): %v", err)
		} else {
			applyProgress(&v, p)
		}
		// A round waiting on a failing trainer or model server says why.
		if fs, err := failnote.Pending(ctx, c, info.GetExecution().GetWorkflowId()); err == nil && len(fs) > 0 && v.Err == "" {
			v.Err = strings.TrimPrefix(failnote.Line(fs[len(fs)-1], time.Now()), "! ")
		}
		return v
	}
	exec := info.GetExecution()
	var in *TrainInput
	if first, err := historyEvent(ctx, c, ns, exec, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT); err == nil {
		var x TrainInput
		if a := first.GetWorkflowExecutionStartedEventAttributes(); a != nil && decode(dc, a.GetInput(), &x) == nil {
			in = &x
		}
	}
	last, err := historyEvent(ctx, c, ns, exec, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	if err != nil {
		v.Err = err.Error()
	}
	applyClose(&v, dc, in, last)
	return v
}

// describeEval completes an evaluation's view: a running one answers its
// progress query; a closed one has its input and its close event, whose
// result is the report.
func describeEval(ctx context.Context, c client.Client, ns string, dc converter.DataConverter, info *workflowpb.WorkflowExecutionInfo, v RunView) RunView {
	id := info.GetExecution().GetWorkflowId()
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		p, err := QueryEvalProgress(ctx, c, id)
		if err != nil {
			v.Err = fmt.Sprintf("no progress (is a control worker running?): %v", err)
		} else {
			applyEvalProgress(&v, p)
		}
		if fs, err := failnote.Pending(ctx, c, id); err == nil && len(fs) > 0 && v.Err == "" {
			v.Err = strings.TrimPrefix(failnote.Line(fs[len(fs)-1], time.Now()), "! ")
		}
		return v
	}
	exec := info.GetExecution()
	if first, err := historyEvent(ctx, c, ns, exec, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT); err == nil {
		var in EvalInput
		if a := first.GetWorkflowExecutionStartedEventAttributes(); a != nil && decode(dc, a.GetInput(), &in) == nil {
			v.Tag, v.WeightsID, v.InitKey, v.Shard, v.Shards = in.Tag, in.WeightsID, in.InitKey, in.Shard, max(in.Shards, 1)
		}
	}
	last, err := historyEvent(ctx, c, ns, exec, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	if err != nil {
		v.Err = err.Error()
	}
	applyEvalClose(&v, dc, last)
	return v
}

// applyEvalProgress takes a running evaluation's live state.
func applyEvalProgress(v *RunView, p EvalProgress) {
	v.Tag, v.WeightsID, v.InitKey, v.Shard, v.Shards, v.Phase = p.Tag, p.WeightsID, p.InitKey, p.Shard, p.Shards, p.Phase
	v.Episodes, v.Live, v.Children = p.Episodes, true, p.Children
	if p.Stopping {
		v.Status = "stopping"
	}
}

// applyEvalClose completes a closed evaluation's view from its close
// event: a completed one's report gives its success; a stopped one's
// report says it is incomplete.
func applyEvalClose(v *RunView, dc converter.DataConverter, last *historypb.HistoryEvent) {
	v.Phase = "done"
	switch {
	case last.GetWorkflowExecutionCompletedEventAttributes() != nil:
		var rep schemas.Report
		if err := decode(dc, last.GetWorkflowExecutionCompletedEventAttributes().GetResult(), &rep); err != nil {
			v.Err = fmt.Sprintf("result unreadable: %v", err)
			return
		}
		o := rep.Overall
		v.Val, v.ValCounts, v.FinalVal = o.SuccessRate, &o, true
		if rep.Stopped != nil {
			v.Status = "stopped"
			v.Err = fmt.Sprintf("incomplete: stopped (%s), %d cells skipped", rep.Stopped.Reason, rep.Stopped.Skipped)
		}
	case last.GetWorkflowExecutionFailedEventAttributes() != nil:
		v.Err = failureMessage(last.GetWorkflowExecutionFailedEventAttributes().GetFailure())
	case last.GetWorkflowExecutionTerminatedEventAttributes() != nil:
		if r := last.GetWorkflowExecutionTerminatedEventAttributes().GetReason(); r != "" {
			v.Err = "terminated: " + r
		}
	case last.GetWorkflowExecutionTimedOutEventAttributes() != nil:
		v.Err = "the workflow timed out"
	}
}

// shardSuffix is how EvalWorkflowID names a shard.
var shardSuffix = regexp.MustCompile(`-([0-9]+)of([0-9]+)$`)

// viewFromInfo is what the visibility store knows: status and search
// attributes, which the SDK writes unencoded. An evaluation's tag is its
// phase attribute's (eval-<tag>); one started by a sweep has a parent.
func viewFromInfo(info *workflowpb.WorkflowExecutionInfo) RunView {
	id := info.GetExecution().GetWorkflowId()
	v := RunView{Run: strings.TrimPrefix(id, "train-"), Kind: KindTrain, WorkflowID: id, Val: -1,
		Started: info.GetStartTime().AsTime(), Status: statusName(info.GetStatus())}
	f := info.GetSearchAttributes().GetIndexedFields()
	attr := func(name string, to any) bool {
		p, ok := f[name]
		return ok && converter.GetDefaultDataConverter().FromPayload(p, to) == nil
	}
	var run string
	if attr(RunAttr.GetName(), &run) && run != "" {
		v.Run = run
	}
	var round int64
	if attr(RoundAttr.GetName(), &round) {
		v.Round = int32(round)
	}
	attr(PhaseAttr.GetName(), &v.Phase)
	attr(WeightsAttr.GetName(), &v.WeightsID)
	var rate float64
	if attr(SuccessRateAttr.GetName(), &rate) {
		v.Val = rate
	}
	var kind string
	if attr(KindAttr.GetName(), &kind) && kind == KindEval {
		v.Kind, v.Shards = KindEval, 1
		if info.GetParentExecution() != nil {
			v.Kind = KindSweepEval
		}
		v.Tag, v.Phase = strings.TrimPrefix(v.Phase, schemas.PhaseEval+"-"), ""
		if m := shardSuffix.FindStringSubmatch(id); m != nil && strings.HasSuffix(strings.TrimSuffix(id, m[0]), "-"+v.Tag) {
			v.Shard, _ = strconv.Atoi(m[1])
			v.Shards, _ = strconv.Atoi(m[2])
		}
		v.FinalVal = v.Val >= 0
	}
	return v
}

func statusName(s enumspb.WorkflowExecutionStatus) string {
	switch s {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return "running"
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return "completed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		return "failed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "canceled"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return "terminated"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return "timed out"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return "continued"
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_"))
}

// applyProgress takes a running run's live state from its progress query.
func applyProgress(v *RunView, p Progress) {
	v.Round, v.Rounds, v.Phase, v.WeightsID = p.Round, p.Rounds, p.Phase, p.WeightsID
	v.Episodes, v.Live, v.Children, v.Summaries = p.Episodes, true, p.Children, p.Summaries
	if p.Stopping {
		v.Status = "stopping"
	}
	v.takeVal(p.Summaries)
}

// applyClose completes a closed run's view from its input (the round it
// ran, of how many, after which summaries) and its close event.
func applyClose(v *RunView, dc converter.DataConverter, in *TrainInput, last *historypb.HistoryEvent) {
	if in != nil {
		v.Round, v.Rounds, v.Summaries = in.Round, in.Rounds, in.Summaries
		if v.WeightsID == "" {
			v.WeightsID = in.WeightsID
		}
	}
	switch {
	case last.GetWorkflowExecutionCompletedEventAttributes() != nil:
		var res TrainResult
		if err := decode(dc, last.GetWorkflowExecutionCompletedEventAttributes().GetResult(), &res); err != nil {
			v.Err = fmt.Sprintf("result unreadable: %v", err)
			break
		}
		v.Summaries = res.Summaries
		if res.Stopped {
			v.Status, v.Round = "stopped", res.StoppedRound
		} else if n := len(res.Summaries); n > 0 {
			v.Round = res.Summaries[n-1].Round
			v.WeightsID = res.FinalWeightsID
		}
		if res.FinalValSuccess >= 0 {
			v.Val, v.FinalVal, v.ValCounts = res.FinalValSuccess, true, res.FinalVal
		}
	case last.GetWorkflowExecutionFailedEventAttributes() != nil:
		v.Err = failureMessage(last.GetWorkflowExecutionFailedEventAttributes().GetFailure())
	case last.GetWorkflowExecutionTerminatedEventAttributes() != nil:
		if r := last.GetWorkflowExecutionTerminatedEventAttributes().GetReason(); r != "" {
			v.Err = "terminated: " + r
		}
	case last.GetWorkflowExecutionTimedOutEventAttributes() != nil:
		v.Err = "the workflow timed out"
	}
	v.takeVal(v.Summaries)
}

// takeVal fills Val from the summaries when no search attribute gave it,
// and its counts when they belong to the same validation (the attribute
// may already carry a newer one, whose round has no summary yet).
func (v *RunView) takeVal(ss []schemas.RoundSummary) {
	rate, counts := latestVal(ss)
	if v.Val < 0 {
		v.Val = rate
	}
	if v.ValCounts == nil && counts != nil && math.Abs(counts.SuccessRate-v.Val) < 1e-9 {
		v.ValCounts = counts
	}
}

// latestVal is the last validation success among finished rounds, -1 when
// none, with its counts when the summary has them.
func latestVal(ss []schemas.RoundSummary) (float64, *schemas.TaskResult) {
	for i := len(ss) - 1; i >= 0; i-- {
		if ss[i].ValSuccess >= 0 {
			return ss[i].ValSuccess, ss[i].Val
		}
	}
	return -1, nil
}

// failureMessage is a failure's message; the SDK puts the whole wrapped
// chain into the top message, so causes are added only when it lacks them.
func failureMessage(f *failurepb.Failure) string {
	msg := f.GetMessage()
	for c := f.GetCause(); c != nil; c = c.GetCause() {
		if m := c.GetMessage(); m != "" && !strings.Contains(msg, m) {
			msg += ": " + m
		}
	}
	return msg
}

// historyEvent reads one event of an execution: the first (its start, with
// the input) or the close event. Pages of one event keep this cheap.
func historyEvent(ctx context.Context, c client.Client, ns string, exec *commonpb.WorkflowExecution, filter enumspb.HistoryEventFilterType) (*historypb.HistoryEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.WorkflowService().GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
		Namespace: ns, Execution: exec, MaximumPageSize: 1, HistoryEventFilterType: filter})
	if err != nil {
		return nil, fmt.Errorf("history of workflow %s: %w", exec.GetWorkflowId(), err)
	}
	ev := resp.GetHistory().GetEvents()
	if len(ev) == 0 {
		return nil, fmt.Errorf("history of workflow %s is empty", exec.GetWorkflowId())
	}
	return ev[0], nil
}

// decode reads the first payload with dc (the default converter when nil).
func decode(dc converter.DataConverter, p *commonpb.Payloads, to any) error {
	if len(p.GetPayloads()) == 0 {
		return errors.New("no payload")
	}
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	return dc.FromPayload(p.GetPayloads()[0], to)
}
