package store_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
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
	// A file past the multipart threshold (16 MiB) goes up in parts and
	// comes back byte for byte.
	big := make([]byte, 21<<20+123)
	for i := range big {
		big[i] = byte(i*7 + i>>13)
	}
	bigPath := filepath.Join(t.TempDir(), "shard.bin")
	if err := os.WriteFile(bigPath, big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.PutFile(ctx, "runs/big/shard.bin", bigPath); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(t.TempDir(), "back.bin")
	if err := s.GetFile(ctx, "runs/big/shard.bin", back); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(back); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("multipart round trip: %d bytes back, want %d (%v)", len(b), len(big), err)
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

func episodeOf(c schemas.Call) string { return c.EpisodeID }

// Compaction folds per-episode files into one part; a crash that leaves
// both (or a retried episode written after compaction) never double-counts.
func TestCompactAndReadTable(t *testing.T) {
	stack := itest.Start(t)
	s := stack.Store
	ctx := context.Background()
	l := schemas.Layout{Run: "c"}
	dir := "runs/c/calls/round=1/phase=train/"
	write := func(ep string, n int, retry int32) {
		var rows []schemas.Call
		for i := 0; i < n; i++ {
			rows = append(rows, schemas.Call{EpisodeID: ep, CallIndex: int32(i), Retry: retry, PromptTokenIDs: []int32{int32(i)}})
		}
		if _, err := store.WriteParquet(ctx, s, l.Calls(1, schemas.PhaseTrain, ep), rows); err != nil {
			t.Fatal(err)
		}
	}
	write("e1", 3, 0)
	write("e2", 2, 0)
	st, err := store.Compact(ctx, s, dir, episodeOf)
	if err != nil {
		t.Fatal(err)
	}
	if st.Merged != 2 || st.Rows != 5 {
		t.Fatalf("compact stats %+v", st)
	}
	objs, _ := s.List(ctx, dir)
	if len(objs) != 1 || !strings.HasSuffix(objs[0].Key, store.PartFile) {
		t.Fatalf("after compaction: %v", objs)
	}
	// e2 is written again (a later try) beside the part: it replaces the
	// part's rows of e2 for readers and for the next compaction.
	write("e2", 4, 1)
	rows, err := store.ReadTable(ctx, s, dir, episodeOf)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range rows {
		count[r.EpisodeID]++
		if r.EpisodeID == "e2" && r.Retry != 1 {
			t.Errorf("stale e2 row from the part: %+v", r)
		}
	}
	if count["e1"] != 3 || count["e2"] != 4 {
		t.Fatalf("rows per episode %v, want e1:3 e2:4", count)
	}
	if st, err := store.Compact(ctx, s, dir, episodeOf); err != nil || st.Rows != 7 || st.Merged != 1 {
		t.Fatalf("second compaction %+v %v", st, err)
	}
	if again, _ := store.ReadTable(ctx, s, dir, episodeOf); len(again) != 7 {
		t.Fatalf("after second compaction %d rows, want 7", len(again))
	}
	if st, err := store.Compact(ctx, s, dir, episodeOf); err != nil || st.Merged != 0 {
		t.Fatalf("compacting a compacted partition must do nothing: %+v %v", st, err)
	}
}

// A column projection over a compacted part reads the footer and its own
// column chunks by range, not the token arrays beside them.
func TestScanPartFetchesOnlyProjectedColumns(t *testing.T) {
	stack := itest.Start(t)
	s := stack.Store
	ctx := context.Background()
	dir := "runs/p/calls/round=1/phase=train/"
	for ep := 0; ep < 4; ep++ {
		var rows []schemas.Call
		for c := 0; c < 500; c++ {
			ids := make([]int32, 2000)
			for i := range ids {
				ids[i] = int32((ep*1_000_003 + c*7919 + i*104729) % 151_000) // incompressible enough
			}
			rows = append(rows, schemas.Call{EpisodeID: fmt.Sprint("e", ep), CallIndex: int32(c), PromptTokens: 2000, PromptTokenIDs: ids, Trainable: true})
		}
		if _, err := store.WriteParquet(ctx, s, dir+fmt.Sprint("e", ep, ".parquet"), rows); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Compact(ctx, s, dir, episodeOf); err != nil {
		t.Fatal(err)
	}
	objs, err := s.List(ctx, dir)
	if err != nil || len(objs) != 1 {
		t.Fatalf("after compaction: %v %v", objs, err)
	}
	before := store.Received()
	n := 0
	err = store.ScanTable(ctx, s, dir, func(c schemas.CallCounts) string { return c.EpisodeID }, nil, func(rows []schemas.CallCounts) error {
		for _, r := range rows {
			if r.PromptTokens != 2000 || !r.Trainable {
				return fmt.Errorf("row %+v", r)
			}
		}
		n += len(rows)
		return nil
	})
	fetched := store.Received() - before
	if err != nil || n != 2000 {
		t.Fatalf("scan: %d rows, %v", n, err)
	}
	if fetched*10 > objs[0].Size {
		t.Fatalf("projected scan fetched %d of the part's %d bytes; want under a tenth", fetched, objs[0].Size)
	}
	t.Logf("projected scan fetched %d of %d bytes", fetched, objs[0].Size)
}

// Copy duplicates an object server-side, keys with = and / included.
func TestCopy(t *testing.T) {
	stack := itest.Start(t)
	s := stack.Store
	ctx := context.Background()
	src, dst := "runs/r/staged/round=1/phase=train/e1/try0-ab/calls.parquet", "runs/r/calls/round=1/phase=train/e1.parquet"
	if err := s.Put(ctx, src, []byte("rows")); err != nil {
		t.Fatal(err)
	}
	if err := s.Copy(ctx, src, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Get(ctx, dst); err != nil || string(b) != "rows" {
		t.Errorf("copied %q (%v)", b, err)
	}
	if err := s.Copy(ctx, "runs/r/none", dst); err == nil || !strings.Contains(err.Error(), "runs/r/none") {
		t.Errorf("copy of a missing object: %v", err)
	}
}

// A conditional write creates a key once: the second writer is told, and
// the first writer's bytes stay (versitygw implements If-None-Match: *).
func TestPutIfAbsent(t *testing.T) {
	stack := itest.Start(t)
	s := stack.Store
	ctx := context.Background()
	for i, body := range []string{"first", "second"} {
		created, err := s.PutIfAbsent(ctx, "fence/k", []byte(body))
		if err != nil || created != (i == 0) {
			t.Fatalf("write %d: created %v, %v; want only the first created", i, created, err)
		}
	}
	if b, err := s.Get(ctx, "fence/k"); err != nil || string(b) != "first" {
		t.Errorf("stored %q (%v), want the first writer's", b, err)
	}
}

// Hosts starting together probe the bucket at once, each with its own key
// under one folder that their deletes empty: every probe passes (CI saw
// versitygw refuse one with ExistingObjectIsDirectory).
func TestProbesAtOnce(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	for round := range 20 {
		errs := make(chan error, 8)
		for range 8 {
			go func() { errs <- stack.Store.CheckWritable(ctx) }()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// DeleteKeys removes keys in batches of 1000 (1,005 keys: two requests),
// counts a key that is already gone as deleted, leaves keys it was not
// given, and deletes nothing more when run again.
func TestDeleteKeys(t *testing.T) {
	stack := itest.Start(t)
	s := stack.Store
	ctx := context.Background()
	var keys []string
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range 1005 {
		k := fmt.Sprintf("runs/d/staged/e%04d/try0-x/calls.parquet", i)
		keys = append(keys, k)
		g.Go(func() error { return s.Put(gctx, k, []byte("x")) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "runs/d/calls/kept.parquet", []byte("y")); err != nil {
		t.Fatal(err)
	}
	withMissing := append(slices.Clone(keys), "runs/d/staged/never/written")
	for range 2 {
		if n, err := s.DeleteKeys(ctx, withMissing); n != len(withMissing) || err != nil {
			t.Fatalf("DeleteKeys = %d, %v; want %d", n, err, len(withMissing))
		}
	}
	objs, err := s.List(ctx, "runs/d/")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Key != "runs/d/calls/kept.parquet" {
		t.Fatalf("left %d objects (%v…), want only runs/d/calls/kept.parquet", len(objs), objs[:min(len(objs), 3)])
	}
	if n, err := s.DeleteKeys(ctx, nil); n != 0 || err != nil {
		t.Fatalf("DeleteKeys(nil) = %d, %v", n, err)
	}
}
