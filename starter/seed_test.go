package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Two evaluations of the same weights, under other runs and tags, give
// the same outcome in every cell: the minimal harness sets
// collect.call_seeds, so each call's seed comes from the cell, the attempt
// and the call index alone, and the toy samples from it. Before, the same
// weights scored 15/35 and 9/35 on these cells (issue 24).
func TestEvalRepeats(t *testing.T) {
	stack, bins, root, ctx := evalStack(t)
	config := filepath.Join(root, "harnesses/minimal/harness.yaml")
	w0 := filepath.Join(root, "harnesses/minimal/weights/w0")

	type cellRun struct {
		outcome string
		seeds   []int64
	}
	cells := make([]map[string]cellRun, 2)
	for i, rt := range [][2]string{{"itest-seed-a", "first"}, {"itest-seed-b", "second"}} {
		run, tag := rt[0], rt[1]
		var out bytes.Buffer
		f := evalFlags{config: config, run: run, weights: w0, tag: tag, initKey: valKey, vars: []string{"bin=" + bins}, heartbeat: 10 * time.Second}
		if err := runEval(ctx, &out, &stack.Endpoints, f); err != nil {
			t.Fatalf("eval %s/%s: %v\n%s", run, tag, err, out.String())
		}
		l := schemas.Layout{Run: run}
		phase := schemas.TagPhase(tag)
		eps, err := store.ReadTable(ctx, stack.Store, l.EpisodesDir(0, phase), func(e schemas.Episode) string { return e.EpisodeID })
		if err != nil {
			t.Fatal(err)
		}
		calls, err := store.ReadTable(ctx, stack.Store, l.CallsDir(0, phase), func(c schemas.Call) string { return c.EpisodeID })
		if err != nil {
			t.Fatal(err)
		}
		byEpisode := map[string][]int64{}
		for _, c := range calls {
			if c.Seed == nil || !c.SeedInjected {
				t.Fatalf("%s call %d: seed %v injected %v; want a seed the proxy injected", c.EpisodeID, c.CallIndex, c.Seed, c.SeedInjected)
			}
			s := byEpisode[c.EpisodeID]
			for len(s) <= int(c.CallIndex) {
				s = append(s, -1)
			}
			s[c.CallIndex] = *c.Seed
			byEpisode[c.EpisodeID] = s
		}
		cells[i] = map[string]cellRun{}
		for _, e := range eps {
			if !e.Valid {
				t.Errorf("%s %s: invalid (%s)", run, e.EpisodeID, e.Termination)
			}
			cells[i][schemas.CellID(e.Task, e.InitID)] = cellRun{outcome: fmt.Sprintf("success %v after %d calls (%s)", e.Success, e.NumCalls, e.Termination),
				seeds: byEpisode[e.EpisodeID]}
		}
		t.Logf("%s/%s:\n%s", run, tag, out.String())
	}
	if len(cells[0]) != 35 || len(cells[1]) != 35 {
		t.Fatalf("%d and %d cells, want 35 each", len(cells[0]), len(cells[1]))
	}
	successes := 0
	for id, a := range cells[0] {
		b := cells[1][id]
		if a.outcome != b.outcome || fmt.Sprint(a.seeds) != fmt.Sprint(b.seeds) {
			t.Errorf("cell %s: %s with seeds %v, then %s with seeds %v", id, a.outcome, a.seeds, b.outcome, b.seeds)
		}
		if strings.HasPrefix(a.outcome, "success true") {
			successes++
		}
	}
	// Sampling decides these cells: w0 neither always wins nor always
	// loses, so agreement is the seeds' doing.
	if successes == 0 || successes == 35 {
		t.Errorf("%d of 35 cells succeeded; the test needs weights whose outcomes vary", successes)
	}
}

// With the toy ignoring seeds (MINIMAL_MODEL_IGNORE_SEED=1), the proxy's
// repeatability check catches it: the evaluation fails, its error naming
// SeedsIgnored, the setting and the fix, and writes no report.
func TestEvalCatchesIgnoredSeeds(t *testing.T) {
	stack := itest.Start(t)
	bins := itest.Build(t, "./workers/worker", "./harnesses/minimal/cmd/...")
	t.Cleanup(itest.Cleanup)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	stack.StartWorkerEnv(t, bins, "main", []string{"MINIMAL_MODEL_IGNORE_SEED=1"})
	root := itest.Root(t)

	const run, tag = "itest-ignored-seeds", "unseeded"
	f := evalFlags{config: filepath.Join(root, "harnesses/minimal/harness.yaml"), run: run,
		weights: filepath.Join(root, "harnesses/minimal/weights/w0"), tag: tag, initKey: valKey,
		vars: []string{"bin=" + bins}, heartbeat: 10 * time.Second}
	var out bytes.Buffer
	err := runEval(ctx, &out, &stack.Endpoints, f)
	if err == nil {
		t.Fatalf("eval on a server that ignores seeds succeeded:\n%s", out.String())
	}
	for _, want := range []string{"SeedsIgnored", "ignores the per-request seed", "turn collect.call_seeds off", "honours seeds"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if ok, _ := stack.Store.Exists(ctx, schemas.Layout{Run: run}.Report(tag)); ok {
		t.Error("a report was written for an evaluation whose sampling was not seeded")
	}
	t.Logf("error: %v", err)
}
