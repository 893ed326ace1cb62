// Package connect opens Roundhouse's two external services, Temporal and S3,
// with timeouts and errors that say how to fix an unreachable endpoint.
package connect

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/store"
)

// Endpoints are the addresses of Temporal and S3.
type Endpoints struct {
	Temporal  string
	Namespace string
	S3        store.Config
}

// FromEnv reads ROUNDHOUSE_TEMPORAL (default 127.0.0.1:7233),
// ROUNDHOUSE_NAMESPACE (default "default") and the S3 settings.
func FromEnv() Endpoints {
	e := Endpoints{Temporal: "127.0.0.1:7233", Namespace: "default", S3: store.FromEnv()}
	if v := os.Getenv("ROUNDHOUSE_TEMPORAL"); v != "" {
		e.Temporal = v
	}
	if v := os.Getenv("ROUNDHOUSE_NAMESPACE"); v != "" {
		e.Namespace = v
	}
	return e
}

// Env is the environment that makes FromEnv return e in a child process
// (a worker or starter started by the dev stack or a test).
func (e Endpoints) Env() []string {
	c := e.S3
	return []string{
		"ROUNDHOUSE_TEMPORAL=" + e.Temporal, "ROUNDHOUSE_NAMESPACE=" + e.Namespace,
		"ROUNDHOUSE_S3_ENDPOINT=" + c.Endpoint, "ROUNDHOUSE_BUCKET=" + c.Bucket,
		"AWS_ACCESS_KEY_ID=" + c.AccessKey, "AWS_SECRET_ACCESS_KEY=" + c.SecretKey, "AWS_REGION=" + c.Region,
	}
}

// Temporal dials the server and checks it answers within 10 seconds.
func Temporal(ctx context.Context, e Endpoints, logger tlog.Logger) (client.Client, error) {
	// One trace follows a round from the starter through workflows and
	// activities; spans go to the global OpenTelemetry provider (a no-op
	// until one is configured).
	tracer, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{})
	if err != nil {
		return nil, fmt.Errorf("tracing interceptor: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: e.Temporal, Namespace: e.Namespace, Logger: logger,
		Interceptors: []interceptor.ClientInterceptor{tracer}})
	if err != nil {
		return nil, fmt.Errorf("Temporal at %s is not reachable (start the dev stack with `go tool task up`, or pass --temporal host:port): %w", e.Temporal, err)
	}
	return c, nil
}

// Store opens the bucket and checks it is reachable.
func Store(ctx context.Context, e Endpoints) (*store.Store, error) {
	s, err := store.New(ctx, e.S3)
	if err != nil {
		return nil, err
	}
	if err := s.Check(ctx); err != nil {
		return nil, err
	}
	return s, nil
}
