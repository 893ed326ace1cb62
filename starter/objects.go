package main

import (
	"context"
	"encoding/json"
	"fmt"

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
