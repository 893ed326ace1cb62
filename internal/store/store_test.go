package store_test

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/itest"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Against the real versitygw server: objects, files, listing, Parquet
// round trips and prefix deletion.
func TestStoreAgainstVersitygw(t *testing.T) {
	stack := itest.Start(t)
	s := stack.Store
	ctx := context.Background()
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	rows := []schemas.Call{
		{Run: "r", EpisodeID: "e1", CallIndex: 0, PromptTokenIDs: []int32{1, 2, 3}, CompletionTokenIDs: []int32{7, 8}, CompletionLogprobs: []float32{-0.5, 0}, Trainable: true},
		{Run: "r", EpisodeID: "e1", CallIndex: 1, Error: "upstream 500", HTTPStatus: 500},
	}
	key := schemas.Layout{Run: "r"}.Calls(1, schemas.PhaseTrain, "e1")
	if _, err := store.WriteParquet(ctx, s, key, rows); err != nil {
		t.Fatal(err)
	}
	got, err := store.ReadParquet[schemas.Call](ctx, s, key)
	if err != nil {
		t.Fatal(err)
	}
	// Empty lists come back as nil or empty; compare what matters.
	if len(got) != 2 || !reflect.DeepEqual(got[0].CompletionTokenIDs, rows[0].CompletionTokenIDs) ||
		!reflect.DeepEqual(got[0].CompletionLogprobs, rows[0].CompletionLogprobs) || got[1].HTTPStatus != 500 {
		t.Fatalf("round trip: %+v", got)
	}
	local := filepath.Join(t.TempDir(), "sub", "x.parquet")
	if err := s.GetFile(ctx, key, local); err != nil {
		t.Fatal(err)
	}
	if err := s.PutFile(ctx, "runs/r/copy.parquet", local); err != nil {
		t.Fatal(err)
	}
	objs, err := s.List(ctx, "runs/r/")
	if err != nil || len(objs) != 2 {
		t.Fatalf("list: %v %v", objs, err)
	}
	if ok, err := s.Exists(ctx, "runs/r/missing"); ok || err != nil {
		t.Fatalf("Exists(missing) = %v, %v", ok, err)
	}
	if n, err := s.DeletePrefix(ctx, "runs/r/"); n != 2 || err != nil {
		t.Fatalf("DeletePrefix = %d, %v", n, err)
	}
	if _, err := s.Get(ctx, key); err == nil || !strings.Contains(err.Error(), key) {
		t.Fatalf("get after delete: %v", err)
	}
}

func TestCheckNamesUnreachableEndpoint(t *testing.T) {
	s, err := store.New(context.Background(), store.Config{Endpoint: "http://127.0.0.1:1", Region: "us-east-1", Bucket: "b", AccessKey: "a", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "ROUNDHOUSE_S3_ENDPOINT") {
		t.Fatalf("Check = %v", err)
	}
}
