package workflows

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// failuresProbe keeps the failure table of its signals for the test to query.
func failuresProbe(ctx workflow.Context) error {
	changes := 0
	f := watchFailures(ctx, func() { changes++ })
	if err := workflow.SetQueryHandler(ctx, "md", func() (string, error) { return f.markdown(), nil }); err != nil {
		return err
	}
	return workflow.Sleep(ctx, time.Hour)
}

func TestFailuresTableFollowsSignals(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(failuresProbe)
	next := time.Date(2026, 12, 3, 10, 0, 40, 0, time.UTC)
	signal := func(at time.Duration, n schemas.ActivityFailure) {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(api.ActivityFailureSignal, n) }, at)
	}
	tables := map[string]string{}
	query := func(at time.Duration, name string) {
		env.RegisterDelayedCallback(func() {
			v, err := env.QueryWorkflow("md")
			if err != nil {
				t.Errorf("query at %s: %v", name, err)
				return
			}
			var md string
			_ = v.Get(&md)
			tables[name] = md
		}, at)
	}
	train := schemas.ActivityFailure{Activity: "Train", ActivityID: "12", Attempt: 1, Cause: "ModuleNotFoundError: No module named 'torch'", NextRetry: next}
	signal(time.Minute, train)
	query(90*time.Second, "first")
	train.Attempt = 2
	train.Cause = "a | pipe"
	signal(2*time.Minute, train)
	signal(2*time.Minute+time.Second, schemas.ActivityFailure{Activity: "WriteReport", ActivityID: "3", Attempt: 1, Cause: "s3 down"})
	signal(2*time.Minute+2*time.Second, schemas.ActivityFailure{Activity: "RunEpisode", ActivityID: "40", Label: "r1-train-g0-a1 task 2 init 11", Attempt: 1, Cause: "model down"})
	query(150*time.Second, "second")
	// A success of the attempt that failed (a late, duplicate signal) does
	// not clear it; a success of a later attempt does.
	signal(3*time.Minute, schemas.ActivityFailure{ActivityID: "12", Attempt: 2, Recovered: true})
	query(190*time.Second, "stale recovery")
	signal(4*time.Minute, schemas.ActivityFailure{ActivityID: "12", Attempt: 3, Recovered: true})
	signal(4*time.Minute, schemas.ActivityFailure{ActivityID: "3", Attempt: 2, Recovered: true})
	signal(4*time.Minute, schemas.ActivityFailure{ActivityID: "40", Attempt: 2, Recovered: true})
	query(250*time.Second, "recovered")
	env.ExecuteWorkflow(failuresProbe)

	if got := tables["first"]; !strings.Contains(got, "| Train #12 | 1 | ModuleNotFoundError: No module named 'torch' | 10:00:40 |") {
		t.Errorf("after the first failure:\n%s", got)
	}
	second := tables["second"]
	if !strings.Contains(second, "| Train #12 | 2 | a \\| pipe |") || strings.Contains(second, "| Train #12 | 1 |") ||
		!strings.Contains(second, "| WriteReport #3 | 1 | s3 down | not retried |") ||
		!strings.Contains(second, "| RunEpisode r1-train-g0-a1 task 2 init 11 | 1 | model down |") {
		t.Errorf("after the second attempt and another activity:\n%s", second)
	}
	if !strings.Contains(tables["stale recovery"], "Train #12") {
		t.Errorf("a stale recovery cleared the failure:\n%s", tables["stale recovery"])
	}
	if got := tables["recovered"]; got != "" {
		t.Errorf("after both recovered: %q, want no table", got)
	}
}
