package heartbeat

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// quiet beats once with its progress, then works for 3 s without a beat.
func quiet(ctx context.Context) (int32, error) {
	activity.RecordHeartbeat(ctx, "step 3")
	select {
	case <-time.After(3 * time.Second):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return activity.GetInfo(ctx).Attempt, nil
}

func run(ctx workflow.Context) (int32, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, HeartbeatTimeout: time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	var attempt int32
	err := workflow.ExecuteActivity(ctx, quiet).Get(ctx, &attempt)
	return attempt, err
}

// beats runs quiet under a 1 s heartbeat timeout with the given
// interceptors and returns the workflow's error and the details of every
// heartbeat the activity sent.
func beats(t *testing.T, icpt []interceptor.WorkerInterceptor) (error, []string) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: icpt})
	env.SetTestTimeout(time.Minute)
	env.RegisterWorkflow(run)
	env.RegisterActivity(quiet)
	var got []string
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) {
		var v string
		if d.HasValues() {
			_ = d.Get(&v)
		}
		got = append(got, v)
	})
	env.ExecuteWorkflow(run)
	return env.GetWorkflowError(), got
}

// TestQuietStretchKeepsBeating: an activity silent for longer than its
// heartbeat timeout times out on a worker without the interceptor and
// completes with it, every extra beat carrying its last progress.
func TestQuietStretchKeepsBeating(t *testing.T) {
	err, got := beats(t, nil)
	if err == nil {
		t.Fatalf("without the interceptor a 3 s silence under a 1 s heartbeat timeout must time out; heartbeats %q", got)
	}
	err, got = beats(t, []interceptor.WorkerInterceptor{Interceptor()})
	if err != nil {
		t.Fatalf("with the interceptor: %v (heartbeats %q)", err, got)
	}
	if len(got) < 2 {
		t.Fatalf("heartbeats %q: want the activity's own and at least one more", got)
	}
	for i, v := range got {
		if v != "step 3" {
			t.Errorf("heartbeat %d carried %q, want the activity's last details \"step 3\"", i, v)
		}
	}
}

func TestEvery(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{
		time.Second: 250 * time.Millisecond, 10 * time.Millisecond: 100 * time.Millisecond, 30 * time.Second: 7500 * time.Millisecond, 5 * time.Minute: 20 * time.Second,
	} {
		if got := Every(d); got != want {
			t.Errorf("Every(%v) = %v, want %v", d, got, want)
		}
	}
}
