package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// TestStagedTriesMeasured evaluates the minimal harness over 7 tasks × 49
// init states (343 cells) in two shards at once on the real stack and
// prints what the run stores per top-level folder; with the staged tries
// of published episodes dropped, staged/ must be empty. It takes a few
// minutes, so it runs only when ROUNDHOUSE_MEASURE_STAGED is set
// (docs/performance.md, "Staged tries"); ROUNDHOUSE_MEASURE_STAGED=keep
// skips the emptiness check, to measure code that keeps them.
func TestStagedTriesMeasured(t *testing.T) {
	mode := os.Getenv("ROUNDHOUSE_MEASURE_STAGED")
	if mode == "" {
		t.Skip("set ROUNDHOUSE_MEASURE_STAGED=1 to measure (a few minutes)")
	}
	stack := itest.Start(t)
	bins := itest.Build(t, "./workers/worker", "./harnesses/minimal/cmd/...")
	t.Cleanup(itest.Cleanup)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	stack.StartWorker(t, bins, "main")
	root := itest.Root(t)
	config := filepath.Join(t.TempDir(), "wide.yaml")
	variant := fmt.Sprintf("base: %s\nname: minimal-wide\nsplits: {train_init_ids: \"50-60\", val_init_ids: \"1-49\", eval_init_ids: \"61-70\"}\n", filepath.Join(root, "harnesses/minimal/harness.yaml"))
	if err := os.WriteFile(config, []byte(variant), 0o644); err != nil {
		t.Fatal(err)
	}
	const run, tag = "staged-measure", "wide"
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runEval(ctx, &outs[i], &stack.Endpoints, evalFlags{config: config, run: run,
				weights: filepath.Join(root, "harnesses/minimal/weights/w0"), tag: tag, initKey: valKey,
				shard: fmt.Sprintf("%d/2", i), vars: []string{"bin=" + bins}, heartbeat: 10 * time.Second})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("shard %d/2: %v\n%s", i, err, outs[i].String())
		}
	}
	l := schemas.Layout{Run: run}
	objs, err := stack.Store.List(ctx, l.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	type size struct {
		n     int
		bytes int64
	}
	by := map[string]size{}
	var total size
	for _, o := range objs {
		dir, _, _ := strings.Cut(strings.TrimPrefix(o.Key, l.Prefix()), "/")
		s := by[dir]
		s.n++
		s.bytes += o.Size
		by[dir] = s
		total.n++
		total.bytes += o.Size
	}
	dirs := make([]string, 0, len(by))
	for d := range by {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	var b strings.Builder
	for _, d := range dirs {
		fmt.Fprintf(&b, "%-12s %6d objects %12s bytes\n", d, by[d].n, strconv.FormatInt(by[d].bytes, 10))
	}
	fmt.Fprintf(&b, "%-12s %6d objects %12s bytes\n", "run", total.n, strconv.FormatInt(total.bytes, 10))
	t.Logf("run %s after 343 cells in 2 shards:\n%s", run, b.String())
	if s := by["staged"]; mode != "keep" && s.n != 0 {
		t.Errorf("%d staged objects (%d bytes) left after every episode was published, want none", s.n, s.bytes)
	}
}
