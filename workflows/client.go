package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// This file is the client side of the contract: what a starter or a worker
// does with a client.Client. Nothing here runs inside a workflow.

// RegisterSearchAttributes adds Roundhouse's search attributes to the
// namespace unless they exist; workers and the starter call it at start so
// no one has to run `temporal operator search-attribute create` by hand.
func RegisterSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
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
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("add search attributes to namespace %s (on Temporal Cloud, create them in the namespace's settings): %w", namespace, err)
	}
	return nil
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
			t.add(ct)
		}
	}
}
