package workflows_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// TestStopAndResume stops a real run in the middle of collection, checks it
// ends cleanly with its state recorded, refuses to resume it from other
// weights, then resumes it: the episodes stored before the stop are kept as
// they are, the rest run, and the round completes with each episode once.
func TestStopAndResume(t *testing.T) {
	itest.Slow(t)
	stack := itest.Start(t)
	bins := itest.Binaries(t)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	stack.StartWorker(t, bins, "stop")
	const run, groups, attempts = "itest-stop", 40, 3
	starter := func(args ...string) (string, error) {
		out, err := stack.Starter(ctx, t, bins, args...).CombinedOutput()
		return string(out), err
	}
	config := filepath.Join(root, "harnesses/minimal/harness.yaml")
	if out, err := starter("train", "--config", config, "--run", run, "--weights", filepath.Join(root, "harnesses/minimal/weights/w0"),
		"--rounds", "1", "--groups", "40", "--attempts", "3", "--var", "bin="+bins, "--detach"); err != nil {
		t.Fatalf("starter train: %v\n%s", err, out)
	}
	c, err := connect.Temporal(ctx, stack.Endpoints, tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		if p, err := api.QueryProgress(ctx, c, run); err == nil && p.Phase == schemas.PhaseTrain && p.Episodes.Done >= 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("collection never started")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if out, err := starter("stop", "--run", run); err != nil {
		t.Fatalf("starter stop: %v\n%s", err, out)
	}
	var res api.TrainResult
	if err := c.GetWorkflow(ctx, api.WorkflowID(run), "").Get(ctx, &res); err != nil {
		t.Fatalf("stopped run: %v", err)
	}
	if !res.Stopped || res.StoppedRound != 1 {
		t.Fatalf("result %+v, want stopped in round 1", res)
	}
	l := schemas.Layout{Run: run}
	var st schemas.State
	if b, err := stack.Store.Get(ctx, l.State()); err != nil || json.Unmarshal(b, &st) != nil || !st.Stopped || st.StoppedPhase != schemas.PhaseTrain || st.RoundsDone != 0 {
		t.Fatalf("state after stop: %+v (%v)", st, err)
	}
	before := episodeRows(t, stack, l)
	if len(before) == 0 || len(before) >= groups*attempts {
		t.Fatalf("%d episodes stored before the stop; want some, not all %d", len(before), groups*attempts)
	}

	// Other starting weights are refused, and nothing is written.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "policy.json"), []byte(`{"other":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	w0, _ := stack.Store.ETag(ctx, l.Weights("w0")+schemas.WeightsManifestFile)
	out, err := starter("train", "--config", config, "--run", run, "--weights", other, "--var", "bin="+bins, "--detach")
	if err == nil || !strings.Contains(out, "other weights") {
		t.Fatalf("resume from other weights: %v\n%s", err, out)
	}
	if got, _ := stack.Store.ETag(ctx, l.Weights("w0")+schemas.WeightsManifestFile); got != w0 {
		t.Fatal("a refused resume changed the run's w0")
	}

	if out, err := starter("train", "--config", config, "--run", run, "--var", "bin="+bins, "--detach"); err != nil || !strings.Contains(out, "resuming run "+run+" at round 1/1") {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	res = api.TrainResult{}
	if err := c.GetWorkflow(ctx, api.WorkflowID(run), "").Get(ctx, &res); err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	if res.Stopped || len(res.Summaries) != 1 || res.Summaries[0].Episodes != groups*attempts {
		t.Fatalf("resumed result %+v", res)
	}
	if ok, _ := stack.Store.Exists(ctx, l.Stop()); ok {
		t.Error("the STOP marker outlived the resume")
	}
	// The round was compacted: check the episodes through the table.
	rows := episodeRows(t, stack, l)
	if len(rows) != groups*attempts {
		t.Fatalf("%d episode rows after the resume, want %d", len(rows), groups*attempts)
	}
	for id, b := range before {
		if e := rows[id]; e.StartedAtMS != b.StartedAtMS || e.Host != b.Host {
			t.Errorf("episode %s, stored before the stop, was run again: %+v, then %+v", id, b, e)
		}
	}
}

// episodeRows reads the train-phase episodes of round 1 by id, failing on
// an episode stored twice.
func episodeRows(t *testing.T, stack itest.Stack, l schemas.Layout) map[string]schemas.Episode {
	t.Helper()
	rows, err := store.ReadTable(context.Background(), stack.Store, l.EpisodesDir(1, schemas.PhaseTrain), func(e schemas.Episode) string { return e.EpisodeID })
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]schemas.Episode{}
	for _, e := range rows {
		if _, dup := out[e.EpisodeID]; dup {
			t.Fatalf("episode %s stored twice", e.EpisodeID)
		}
		out[e.EpisodeID] = e
	}
	return out
}
