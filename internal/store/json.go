package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// PutJSON stores v as indented JSON under key.
func PutJSON(ctx context.Context, s *Store, key string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return s.Put(ctx, key, b)
}

// PutJSONIfAbsent writes v as JSON under key unless the key exists, and
// says whether it wrote.
func PutJSONIfAbsent(ctx context.Context, s *Store, key string, v any) (bool, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return false, fmt.Errorf("encode %s: %w", key, err)
	}
	return s.PutIfAbsent(ctx, key, b)
}

// GetJSON reads the JSON object under key into v; a missing key's error
// satisfies IsNotFound.
func GetJSON(ctx context.Context, s *Store, key string, v any) error {
	b, err := s.Get(ctx, key)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("s3://%s/%s: %w", s.Bucket, key, err)
	}
	return nil
}
