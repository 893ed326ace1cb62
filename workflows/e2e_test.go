package workflows_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
	tlog "go.temporal.io/sdk/log"
)

// TestTrainSurvivesWorkerKill runs a real round on a real Temporal server and
// S3 server, kills -9 the worker in the middle of collection, starts another
// one, and checks the run finishes with every episode stored exactly once.
func TestTrainSurvivesWorkerKill(t *testing.T) {
	itest.Slow(t)
	stack := itest.Start(t)
	bins := itest.Binaries(t)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The first worker holds each episode 1 s, so its collection of 8 × 3
	// episodes on 4 slots lasts at least 6 s and a progress poll sees it
	// under way: without the delay the toy can collect them all between two
	// polls (CI, stop 20). The second worker runs at full speed.
	first := stack.StartWorkerEnv(t, bins, "first", []string{"MINIMAL_EPISODE_DELAY=1s"})
	const run, groups, attempts = "itest-kill", 8, 3
	starter := stack.Starter(ctx, t, bins, "train",
		"--config", filepath.Join(root, "harnesses/minimal/harness.yaml"), "--run", run,
		"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"), "--rounds", "1",
		"--groups", strconv.Itoa(groups), "--attempts", strconv.Itoa(attempts), "--var", "bin="+bins, "--heartbeat-timeout", "5s", "--detach")
	if out, err := starter.CombinedOutput(); err != nil {
		t.Fatalf("starter: %v\n%s", err, out)
	}

	c, err := connect.Temporal(ctx, stack.Endpoints, tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id := api.WorkflowID(run)
	// Wait until collection is under way, then kill the worker mid-phase.
	for {
		p, err := api.QueryProgress(ctx, c, run)
		if err == nil && p.Phase == schemas.PhaseTrain && p.Episodes.Done >= 2 {
			if p.Episodes.Done >= p.Episodes.Total {
				t.Fatalf("collection finished before the kill: %+v", p)
			}
			break
		}
		// Past collection without the kill: fail now, not at the timeout.
		if err == nil && p.Phase != "" && p.Phase != schemas.PhaseVal && p.Phase != schemas.PhaseTrain && p.Phase != "report" {
			t.Fatalf("collection finished between two progress polls (phase %s): nothing to kill mid-collection", p.Phase)
		}
		select {
		case <-ctx.Done():
			t.Fatal("collection never started")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := first.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = first.Wait()
	stack.StartWorker(t, bins, "second")

	var res api.TrainResult
	if err := c.GetWorkflow(ctx, id, "").Get(ctx, &res); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	if len(res.Summaries) != 1 {
		t.Fatalf("want 1 round summary, got %+v", res.Summaries)
	}
	sum := res.Summaries[0]
	if sum.Episodes != groups*attempts {
		t.Errorf("summary counts %d episodes, want %d", sum.Episodes, groups*attempts)
	}

	l := schemas.Layout{Run: run}
	// The round's partitions are compacted into one part file each.
	for _, dir := range []string{l.EpisodesDir(1, schemas.PhaseTrain), l.CallsDir(1, schemas.PhaseTrain), l.CallsDir(1, schemas.PhaseVal)} {
		objs, err := stack.Store.List(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != 1 || !strings.HasSuffix(objs[0].Key, store.PartFile) {
			t.Errorf("%s not compacted: %v", dir, objs)
		}
	}
	rows, err := store.ReadTable(ctx, stack.Store, l.EpisodesDir(1, schemas.PhaseTrain), func(e schemas.Episode) string { return e.EpisodeID })
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != groups*attempts {
		t.Fatalf("%d episode rows, want %d", len(rows), groups*attempts)
	}
	allCalls, err := store.ReadTable(ctx, stack.Store, l.CallsDir(1, schemas.PhaseTrain), func(c schemas.Call) string { return c.EpisodeID })
	if err != nil {
		t.Fatal(err)
	}
	callsOf := map[string][]schemas.Call{}
	for _, c := range allCalls {
		callsOf[c.EpisodeID] = append(callsOf[c.EpisodeID], c)
	}
	episodes := map[string]schemas.Episode{}
	retried := 0
	for _, e := range rows {
		if _, dup := episodes[e.EpisodeID]; dup {
			t.Fatalf("episode %s stored twice", e.EpisodeID)
		}
		episodes[e.EpisodeID] = e
		if e.Retry > 0 {
			retried++
		}
		if !e.Valid {
			t.Errorf("episode %s invalid: %s", e.EpisodeID, e.Termination)
		}
		calls := callsOf[e.EpisodeID]
		sort.Slice(calls, func(i, j int) bool { return calls[i].CallIndex < calls[j].CallIndex })
		if int(e.NumCalls) != len(calls) || len(calls) == 0 {
			t.Errorf("episode %s: row says %d calls, calls file has %d", e.EpisodeID, e.NumCalls, len(calls))
		}
		for i, call := range calls {
			if call.EpisodeID != e.EpisodeID || call.Retry != e.Retry || int(call.CallIndex) != i {
				t.Errorf("call %d of %s misattributed: %+v", i, e.EpisodeID, call)
			}
			if !call.Trainable || len(call.CompletionTokenIDs) != len(call.CompletionLogprobs) || len(call.PromptTokenIDs) == 0 {
				t.Errorf("call %d of %s lacks token data", i, e.EpisodeID)
			}
		}
	}
	if retried == 0 {
		t.Error("no episode is marked as retried, though the worker was killed mid-collection")
	}
	// Calls of the killed tries are kept as orphans, outside calls/, never
	// trainable, and belong to an earlier try than the stored episode.
	orphans, err := stack.Store.List(ctx, l.Prefix()+"orphans/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range orphans {
		calls, err := store.ReadParquet[schemas.Call](ctx, stack.Store, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range calls {
			if c.Trainable {
				t.Errorf("orphaned call %s/%d is trainable", c.EpisodeID, c.CallIndex)
			}
			final := episodes[c.EpisodeID]
			if final.Retry <= c.Retry {
				t.Errorf("orphan of %s try %d, but the stored episode is try %d", c.EpisodeID, c.Retry, final.Retry)
			}
		}
	}
	t.Logf("%d episodes retried, %d orphaned tries stored", retried, len(orphans))
	if sum.Samples > 0 {
		man, err := weights.Read(ctx, stack.Store, l.Weights("r1"))
		if err == nil {
			err = weights.Verify(ctx, stack.Store, l.Weights("r1"), man)
		}
		if err != nil {
			t.Errorf("round 1 trained on %d samples but weights r1 are missing: %v", sum.Samples, err)
		}
		if sum.NewWeightsID != "r1" {
			t.Errorf("weights out = %q, want r1", sum.NewWeightsID)
		}
	}
	if ok, _ := stack.Store.Exists(ctx, l.State()); !ok {
		t.Error("state.json missing")
	}
	if !strings.HasPrefix(res.Prefix, "runs/"+run) {
		t.Errorf("prefix %q", res.Prefix)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	itest.Cleanup()
	os.Exit(code)
}
