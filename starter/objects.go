package main

import (
	"context"
	"encoding/json"
	"fmt"

	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/store"
)

func putJSON(ctx context.Context, s *store.Store, key string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return s.Put(ctx, key, b)
}

func getJSON(ctx context.Context, s *store.Store, key string, v any) error {
	b, err := s.Get(ctx, key)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("s3://%s/%s: %w", s.Bucket, key, err)
	}
	return nil
}

func isNotFound(err error) bool { return store.IsNotFound(err) }

// connectBoth connects to Temporal and S3, the pair most commands need;
// the caller closes the client.
func connectBoth(ctx context.Context, e *connect.Endpoints) (client.Client, *store.Store, error) {
	c, err := connect.Temporal(ctx, *e, quietLogger())
	if err != nil {
		return nil, nil, err
	}
	s, err := connect.Store(ctx, *e)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, s, nil
}
