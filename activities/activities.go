// Package activities holds every side effect of a round, one activity each:
// running an episode (with the model server and recording proxy of its host),
// building the training batch, training, and writing reports and state.
package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.temporal.io/sdk/activity"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// tracer names the spans activities add inside Temporal's own activity spans.
var tracer = otel.Tracer("github.com/roundhouse-rl/roundhouse/activities")

// harnessCache keeps each run's resolved harness file once per worker,
// keyed by the object's ETag so a run replaced under the same name is re-read.
type harnessCache struct {
	mu sync.Mutex
	m  map[string]schemas.Harness
}

func (c *harnessCache) get(ctx context.Context, s *store.Store, run string) (schemas.Harness, error) {
	var h schemas.Harness
	key := schemas.Layout{Run: run}.Harness()
	etag, err := s.ETag(ctx, key)
	if err != nil {
		return h, fmt.Errorf("harness of run %s: %w", run, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.m[etag]; ok {
		return h, nil
	}
	b, err := s.Get(ctx, key)
	if err != nil {
		return h, fmt.Errorf("harness of run %s: %w", run, err)
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("harness of run %s (%s): %w", run, key, err)
	}
	if c.m == nil {
		c.m = map[string]schemas.Harness{}
	}
	c.m[etag] = h
	return h, nil
}

// heartbeat records progress when ctx is an activity's (benchmarks call
// the batch code directly).
func heartbeat(ctx context.Context, v any) {
	if activity.IsActivity(ctx) {
		activity.RecordHeartbeat(ctx, v)
	}
}
