// Package heartbeat keeps every activity of a worker heartbeating while it
// runs, whatever it is doing. A heartbeat timeout is how Temporal notices
// a worker that died mid-activity, and it can only be as short as the
// longest stretch without a heartbeat: a trainer downloading weights or
// publishing them, a compaction between tables, a report reading a phase.
// With the interceptor those stretches beat too, so activities can have
// heartbeat timeouts of seconds and a lost host costs seconds, not the
// minutes its slowest step would need.
//
// A stuck activity (not a dead one) also keeps beating; StartToClose and
// every external call's own timeout bound those.
package heartbeat

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
)

// Interceptor returns the worker interceptor. It re-sends an activity's
// latest heartbeat details (nil before it sent any) every quarter of the
// activity's heartbeat timeout, between 0.1 s and 20 s; activities without a
// heartbeat timeout are left alone.
func Interceptor() interceptor.WorkerInterceptor { return &workerInterceptor{} }

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
}

func (*workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &inbound{}
	a.Next = next
	return a
}

// Every is how often an activity with heartbeat timeout d beats.
func Every(d time.Duration) time.Duration {
	return min(max(d/4, 100*time.Millisecond), 20*time.Second)
}

type inbound struct {
	interceptor.ActivityInboundInterceptorBase
	last *details
}

// details is the latest heartbeat details an activity recorded.
type details struct {
	mu sync.Mutex
	v  []any
}

func (a *inbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	a.last = &details{}
	o := &outboundBeats{last: a.last}
	o.Next = outbound
	return a.Next.Init(o)
}

func (a *inbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	timeout := activity.GetInfo(ctx).HeartbeatTimeout
	if timeout <= 0 {
		return a.Next.ExecuteActivity(ctx, in)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(Every(timeout))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				a.last.mu.Lock()
				v := a.last.v
				a.last.mu.Unlock()
				activity.RecordHeartbeat(ctx, v...)
			}
		}
	}()
	defer func() {
		close(done)
		wg.Wait()
	}()
	return a.Next.ExecuteActivity(ctx, in)
}

// outboundBeats remembers the details of each heartbeat on its way out.
type outboundBeats struct {
	interceptor.ActivityOutboundInterceptorBase
	last *details
}

func (o *outboundBeats) RecordHeartbeat(ctx context.Context, v ...any) {
	o.last.mu.Lock()
	o.last.v = v
	o.last.mu.Unlock()
	o.Next.RecordHeartbeat(ctx, v...)
}
