package api

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// This file is the client side of the contract: what a starter or a worker
// does with a client.Client. Nothing here runs inside a workflow.

// RegisterSearchAttributes adds Roundhouse's search attributes to the
// namespace unless they exist; workers and the starter call it at start so
// no one has to run `temporal operator search-attribute create` by hand.
func RegisterSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes of namespace %s: %w", namespace, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range searchAttributes {
		got, ok := have.CustomAttributes[name]
		if !ok {
			missing[name] = typ
			continue
		}
		if got != typ {
			return fmt.Errorf("search attribute %s exists in namespace %s as %s, Roundhouse needs %s: remove it (temporal operator search-attribute remove --name %s)", name, namespace, got, typ, name)
		}
	}
	if len(missing) > 0 {
		_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
		var exists *serviceerror.AlreadyExists
		if err != nil && !errors.As(err, &exists) {
			return fmt.Errorf("add search attributes to namespace %s: %w; where the namespace does not let clients add them (Temporal Cloud), create them once: %s",
				namespace, err, CreateAttributesHint(namespace, missing))
		}
	}
	return awaitAttributes(ctx, c, namespace)
}

// registeredAttributes reports whether any of Roundhouse's search
// attributes is registered in namespace.
func registeredAttributes(ctx context.Context, c client.Client, namespace string) (bool, error) {
	have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return false, fmt.Errorf("list search attributes of namespace %s: %w", namespace, err)
	}
	for name := range searchAttributes {
		if _, ok := have.CustomAttributes[name]; ok {
			return true, nil
		}
	}
	return false, nil
}

// CreateAttributesHint is the command that creates attrs in namespace.
func CreateAttributesHint(namespace string, attrs map[string]enumspb.IndexedValueType) string {
	var args []string
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		t := map[enumspb.IndexedValueType]string{enumspb.INDEXED_VALUE_TYPE_KEYWORD: "Keyword",
			enumspb.INDEXED_VALUE_TYPE_INT: "Int", enumspb.INDEXED_VALUE_TYPE_DOUBLE: "Double"}[attrs[name]]
		args = append(args, fmt.Sprintf("--name %s --type %s", name, t))
	}
	return fmt.Sprintf("temporal operator search-attribute create --namespace %s %s", namespace, strings.Join(args, " "))
}

// awaitAttributes waits until the namespace's frontend takes a query on
// every Roundhouse search attribute. A production frontend caches the
// namespace's attributes (refreshed every 10 s or so): just after they
// were added, starting a workflow with them fails with "has no mapping
// defined for search attribute". The dev server refreshes on every read
// and answers at once.
func awaitAttributes(ctx context.Context, c client.Client, namespace string) error {
	var terms []string
	for _, name := range slices.Sorted(maps.Keys(searchAttributes)) {
		if searchAttributes[name] == enumspb.INDEXED_VALUE_TYPE_KEYWORD {
			terms = append(terms, fmt.Sprintf("%s = ''", name))
		} else {
			terms = append(terms, fmt.Sprintf("%s = 0", name))
		}
	}
	q := strings.Join(terms, " AND ")
	for {
		_, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: q})
		if err == nil {
			return nil
		}
		if !IsUnmappedAttribute(err) {
			return fmt.Errorf("query namespace %s by Roundhouse's search attributes: %w", namespace, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s still does not take Roundhouse's search attributes after they were registered (%w): its frontend did not refresh them; restart it, or check dynamic config system.namespaceCacheRefreshInterval: %w", namespace, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// IsUnmappedAttribute reports whether err is a frontend refusing one of
// Roundhouse's search attributes as unknown to the namespace: not
// registered, or registered and not yet in its cache.
func IsUnmappedAttribute(err error) bool {
	var bad *serviceerror.InvalidArgument
	if !errors.As(err, &bad) {
		return false
	}
	for name := range searchAttributes {
		if strings.Contains(bad.Message, name) {
			return true
		}
	}
	return false
}

// StartTrain starts a run's train workflow, or finds it running: one run,
// one workflow id.
func StartTrain(ctx context.Context, c client.Client, in TrainInput) (client.WorkflowRun, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: WorkflowID(in.Run), TaskQueue: ControlQueue,
		StaticSummary: fmt.Sprintf("run %s: %s, %d rounds × %d groups × %d attempts from %s", in.Run, in.Harness.Name, in.Rounds, in.Groups, in.Attempts, in.InitialWeightsID),
		TypedSearchAttributes: temporal.NewSearchAttributes(RunAttr.ValueSet(in.Run), KindAttr.ValueSet("train"),
			RoundAttr.ValueSet(int64(in.Round)), WeightsAttr.ValueSet(in.WeightsID)),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, TrainWorkflow, in)
}

// StartEval starts an evaluation (shard) workflow, or finds it running.
func StartEval(ctx context.Context, c client.Client, in EvalInput) (client.WorkflowRun, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	shards := max(in.Shards, 1)
	return c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: EvalWorkflowID(in.Run, in.Tag, in.Shard, shards), TaskQueue: ControlQueue,
		StaticSummary: fmt.Sprintf("eval %s of run %s: weights %s on %s, shard %d/%d", in.Tag, in.Run, in.WeightsID, in.InitKey, in.Shard, shards),
		TypedSearchAttributes: temporal.NewSearchAttributes(RunAttr.ValueSet(in.Run), KindAttr.ValueSet("eval"),
			PhaseAttr.ValueSet(schemas.TagPhase(in.Tag)), WeightsAttr.ValueSet(in.WeightsID)),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, EvalWorkflow, in)
}

// StartDrift starts the drift measurement of a round, or finds it
// running. It carries no search attributes: it is no run of its own, and
// `starter status` does not list it.
func StartDrift(ctx context.Context, c client.Client, in DriftInput) (client.WorkflowRun, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: DriftWorkflowID(in.Run, in.Round), TaskQueue: ControlQueue,
		StaticSummary:            fmt.Sprintf("drift of run %s round %d: the trainer's logprobs against the recorded ones", in.Run, in.Round),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, DriftWorkflow, in)
}

// RequestStop sends a run's train workflow the stop signal (a STOP file
// beside `starter train`; `starter stop` uses Stop).
func RequestStop(ctx context.Context, c client.Client, run, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err := c.SignalWorkflow(ctx, WorkflowID(run), "", StopSignal, reason)
	var nf *serviceerror.NotFound
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nf):
		return fmt.Errorf("run %s is not running (unknown run, or it already ended): see `starter status`", run)
	}
	return fmt.Errorf("run %s: %w", run, err)
}

// Stopped is what Stop or Cancel acted on: a training run, or an
// evaluation (every running shard of its tag).
type Stopped struct {
	Kind        string   // KindTrain, KindEval, KindSweepEval
	Tag         string   // an evaluation's
	WorkflowIDs []string // the workflows signalled or cancelled
}

// Stop asks for a controlled stop: running episodes finish, the others
// are skipped. A training run ends with its state recorded (`starter
// train` resumes it); an evaluation writes its report, marked incomplete.
// Without tag it is the run's training run, or its one running evaluation.
func Stop(ctx context.Context, c client.Client, ns, run, tag, reason string) (Stopped, error) {
	return act(ctx, c, ns, run, tag, func(ctx context.Context, id string) error {
		return c.SignalWorkflow(ctx, id, "", StopSignal, reason)
	})
}

// Cancel cancels a training run or an evaluation, as Stop chooses it: a
// hard stop, killing its episodes (and trainer).
func Cancel(ctx context.Context, c client.Client, ns, run, tag string) (Stopped, error) {
	return act(ctx, c, ns, run, tag, func(ctx context.Context, id string) error {
		return c.CancelWorkflow(ctx, id, "")
	})
}

// act does what Stop or Cancel does to the workflows of run (and tag).
// The training run's id and an unsharded evaluation's are known, so they
// are tried directly; the visibility store, which may lag a start by a
// moment, is asked only for the rest, and for the runs that do run when
// the one asked for does not.
func act(ctx context.Context, c client.Client, ns, run, tag string, do func(context.Context, string) error) (Stopped, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	try := func(kind, tag, id string) (Stopped, bool, error) {
		err := do(ctx, id)
		var nf *serviceerror.NotFound
		switch {
		case err == nil:
			return Stopped{Kind: kind, Tag: tag, WorkflowIDs: []string{id}}, true, nil
		case errors.As(err, &nf):
			return Stopped{}, false, nil
		}
		return Stopped{}, false, fmt.Errorf("workflow %s of run %s: %w", id, run, err)
	}
	if tag == "" {
		if st, ok, err := try(KindTrain, "", WorkflowID(run)); ok || err != nil {
			return st, err
		}
	}
	running, err := Running(ctx, c, ns)
	if err != nil {
		return Stopped{}, err
	}
	var evals []RunView
	tags := map[string]bool{}
	for _, v := range running {
		if v.Kind != KindTrain && v.Run == run && (tag == "" || v.Tag == tag) {
			evals = append(evals, v)
			tags[v.Tag] = true
		}
	}
	if len(tags) > 1 {
		return Stopped{}, fmt.Errorf("run %s has %d evaluations running (tags %s): name one with --tag", run, len(tags), strings.Join(slices.Sorted(maps.Keys(tags)), ", "))
	}
	if len(evals) == 0 && tag != "" {
		if st, ok, err := try(KindEval, tag, EvalWorkflowID(run, tag, 0, 1)); ok || err != nil {
			return st, err
		}
	}
	if len(evals) == 0 {
		return Stopped{}, notRunning(run, tag, running)
	}
	st := Stopped{Kind: evals[0].Kind, Tag: evals[0].Tag}
	for _, v := range evals {
		s, ok, err := try(v.Kind, v.Tag, v.WorkflowID)
		if err != nil {
			return st, err
		}
		if ok { // a shard may have ended meanwhile
			st.WorkflowIDs = append(st.WorkflowIDs, s.WorkflowIDs...)
		}
	}
	if len(st.WorkflowIDs) == 0 {
		return st, notRunning(run, tag, running)
	}
	return st, nil
}

// notRunning says that run (its evaluation tag) is not running, and
// names what is.
func notRunning(run, tag string, running []RunView) error {
	what := "run " + run
	if tag != "" {
		what = fmt.Sprintf("evaluation %s of run %s", tag, run)
	}
	if len(running) == 0 {
		return fmt.Errorf("%s is not running, and nothing else is: see `starter status`", what)
	}
	names := make([]string, len(running))
	for i, v := range running {
		names[i] = RunningName(v)
	}
	slices.Sort(names)
	return fmt.Errorf("%s is not running; running: %s", what, strings.Join(slices.Compact(names), ", "))
}

// RunningName names a running run or evaluation as an error lists it:
// "r7 (train)", "plus1 (eval, tag t1)".
func RunningName(v RunView) string {
	if v.Kind == KindTrain {
		return fmt.Sprintf("%s (%s)", v.Run, v.Kind)
	}
	return fmt.Sprintf("%s (%s, tag %s)", v.Run, v.Kind, v.Tag)
}

// IsRunning says whether workflow id has a running execution.
func IsRunning(ctx context.Context, c client.Client, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := c.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("describe workflow %s: %w", id, err)
	}
	return d.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}

// QueryProgress asks a run's train workflow for its progress and adds the
// live counts of its running episode chunks.
func QueryProgress(ctx context.Context, c client.Client, run string) (Progress, error) {
	var p Progress
	if err := queryWithChunks(ctx, c, WorkflowID(run), ProgressQuery, &p); err != nil {
		return p, fmt.Errorf("run %s: %w", run, err)
	}
	addChunks(ctx, c, p.Children, &p.Episodes)
	return p, nil
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

// queryWithChunks runs a query on a workflow that runs episode chunks.
func queryWithChunks(ctx context.Context, c client.Client, id, query string, into any) error {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := c.QueryWorkflow(qctx, id, "", query)
	if err != nil {
		return fmt.Errorf("query %s: %w", query, err)
	}
	if err := v.Get(into); err != nil {
		return fmt.Errorf("decode %s: %w", query, err)
	}
	return nil
}

// addChunks adds the live counts of running episode chunks to t.
func addChunks(ctx context.Context, c client.Client, children []string, t *Tally) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, id := range children {
		v, err := c.QueryWorkflow(qctx, id, "", EpisodesQuery)
		if err != nil {
			continue // finished between the two queries: the parent counts it next time
		}
		var ct Tally
		if v.Get(&ct) == nil {
			ct.Total = 0
			t.Add(ct)
		}
	}
}

// QueryFleet asks the fleet workflow what each rollout host serves and
// what waits; ok is false when no fleet runs (no host and no episode
// since the server started).
func QueryFleet(ctx context.Context, c client.Client) (st FleetStatus, ok bool, err error) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := c.DescribeWorkflowExecution(qctx, FleetID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("fleet %s: %w", FleetID, err)
	}
	if d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return st, false, nil
	}
	v, err := c.QueryWorkflow(qctx, FleetID, "", FleetStatusQuery)
	if err != nil {
		return st, false, fmt.Errorf("fleet %s: %w", FleetID, err)
	}
	if err := v.Get(&st); err != nil {
		return st, false, fmt.Errorf("fleet %s status: %w", FleetID, err)
	}
	return st, true, nil
}
