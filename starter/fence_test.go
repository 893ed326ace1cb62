package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/deploy/drill"
	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/spool"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// The zombie case (issue 14): host A runs three episodes slowly and loses
// Temporal (S3 still reachable) for longer than the heartbeat timeout;
// Temporal gives the episodes to host B, which completes them; A's stale
// tries finish later and write. What is stored must be, for every
// episode, exactly the try the workflow accepted: its row once, its calls
// only, its artifacts.
func TestZombieTryNeverReplacesTheAcceptedOne(t *testing.T) {
	itest.Slow(t)
	stack := itest.Start(t)
	bins := itest.Binaries(t)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Two tasks × three init states: six episodes, three for each host.
	config := filepath.Join(t.TempDir(), "zombie.yaml")
	variant := fmt.Sprintf("base: %s\nname: minimal-zombie\ntasks:\n  - {id: 0, name: cube_in_drawer, suite: toy}\n  - {id: 2, name: bowl_on_plate, suite: toy}\nsplits: {val_init_ids: \"45-47\"}\n",
		filepath.Join(root, "harnesses/minimal/harness.yaml"))
	if err := os.WriteFile(config, []byte(variant), 0o644); err != nil {
		t.Fatal(err)
	}
	relay := itest.StartRelay(t, stack.Endpoints.Temporal)
	workA := filepath.Join(stack.Dir, "work-a")
	stack.StartWorkerEnv(t, bins, "a", []string{"ROUNDHOUSE_TEMPORAL=" + relay.Addr, "MINIMAL_EPISODE_DELAY=12s"},
		"--workdir", workA, "--slots", "3")

	const run, tag = "zombie", "z1"
	starter := func(args ...string) string {
		out, err := stack.Starter(ctx, t, bins, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("starter %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	starter("eval", "--config", config, "--run", run, "--weights", filepath.Join(root, "harnesses/minimal/weights/w0"),
		"--tag", tag, "--var", "bin="+bins, "--heartbeat-timeout", "5s", "--detach")
	// A takes three episodes; once they run, cut A from Temporal and
	// bring up B, which takes the rest and then A's, timed out.
	tries := filepath.Join(workA, "episodes", run)
	waitFor(t, 60*time.Second, "host A to run 3 episodes", func() bool {
		ds, _ := os.ReadDir(tries)
		return len(ds) >= 3
	})
	relay.Partition()
	stack.StartWorker(t, bins, "b", "--workdir", filepath.Join(stack.Dir, "work-b"), "--slots", "3")

	c, err := connect.Temporal(ctx, stack.Endpoints, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id := api.EvalWorkflowID(run, tag, 0, 1)
	if err := c.GetWorkflow(ctx, id, "").Get(ctx, nil); err != nil {
		t.Fatalf("evaluation: %v", err)
	}
	// A's tries end and write while A is still cut off: its spool empties
	// once a try has stored (or refused to store) its records.
	waitFor(t, 90*time.Second, "host A's stale tries to finish", func() bool {
		open, err := spool.Pending(filepath.Join(workA, "spool"))
		return err == nil && len(open) == 0
	})
	relay.Heal()

	accepted := acceptedTries(ctx, t, c, id)
	if len(accepted) != 6 {
		t.Fatalf("accepted tries %v, want 6 episodes", accepted)
	}
	stale := 0
	for _, r := range accepted {
		if r.Retry > 0 {
			stale++
		}
	}
	if stale == 0 {
		t.Fatalf("no episode was retried: the partition did not take A's episodes away (accepted %v)", accepted)
	}
	phase := schemas.TagPhase(tag)
	checkAccepted(ctx, t, stack.Store, run, 0, phase, accepted)
	// Published episodes' staged tries were dropped: what is left is A's
	// late tries that staged after the drop, never an accepted one.
	l := schemas.Layout{Run: run}
	left, err := stack.Store.List(ctx, l.StagedDir(0, phase))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range left {
		for ep, r := range accepted {
			if strings.HasPrefix(o.Key, l.Staged(0, phase, ep, r.Try)) {
				t.Errorf("accepted try %s of %s still staged: %s", r.Try, ep, o.Key)
			}
		}
	}
	arts, err := stack.Store.List(ctx, l.ArtifactsDir(0, phase))
	if err != nil {
		t.Fatal(err)
	}
	lateArts := 0
	for _, o := range arts {
		if r, ok := accepted[strings.Split(strings.TrimPrefix(o.Key, l.ArtifactsDir(0, phase)), "/")[0]]; ok && !strings.Contains(o.Key, "/"+r.Try+"/") {
			lateArts++
		}
	}
	t.Logf("%d staged objects left (late tries); %d artifacts of tries not accepted", len(left), lateArts)
}

// waitFor polls cond every 200 ms until it holds, failing after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// acceptedTries reads, from the histories of a workflow's Episodes
// children, the result Temporal accepted for each episode (drill.AcceptedOf).
func acceptedTries(ctx context.Context, t *testing.T, c client.Client, id string) map[string]activities.EpisodeResult {
	t.Helper()
	acc, err := drill.AcceptedOf(ctx, c, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, cf := range acc.Conflicts {
		t.Errorf("accepted twice: %s", cf)
	}
	return acc.Episodes
}

// checkAccepted reads a phase's tables as any reader of the documented
// layout would — every Parquet object of the partition — and checks that
// each episode's row is there once and is its accepted try, that its calls
// are that try's and as many as the row says, and that its artifacts
// (outcome.json) agree with the row.
func checkAccepted(ctx context.Context, t *testing.T, s *store.Store, run string, round int32, phase string, accepted map[string]activities.EpisodeResult) {
	t.Helper()
	l := schemas.Layout{Run: run}
	rows := readAll[schemas.Episode](ctx, t, s, l.EpisodesDir(round, phase))
	calls := readAll[schemas.Call](ctx, t, s, l.CallsDir(round, phase))
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.EpisodeID]++
		a, ok := accepted[r.EpisodeID]
		switch {
		case !ok:
			t.Errorf("row of %s, which the workflow never accepted", r.EpisodeID)
			continue
		case r.Retry != a.Retry:
			t.Errorf("%s: stored row is try %d (host %s), the workflow accepted try %d", r.EpisodeID, r.Retry, r.Host, a.Retry)
		}
		n := 0
		for _, c := range calls {
			if c.EpisodeID != r.EpisodeID {
				continue
			}
			n++
			if c.Retry != a.Retry {
				t.Errorf("%s: a stored call of try %d, the workflow accepted try %d", r.EpisodeID, c.Retry, a.Retry)
			}
		}
		if n != int(r.NumCalls) {
			t.Errorf("%s: %d stored calls, the row says %d", r.EpisodeID, n, r.NumCalls)
		}
		b, err := s.Get(ctx, strings.TrimPrefix(r.Artifacts, "s3://"+s.Bucket+"/")+"outcome.json")
		if err != nil {
			t.Errorf("%s: artifacts: %v", r.EpisodeID, err)
			continue
		}
		var o struct {
			Success bool `json:"success"`
			Calls   int  `json:"calls"`
		}
		if err := json.Unmarshal(b, &o); err != nil || o.Success != r.Success || o.Calls != int(r.NumCalls) {
			t.Errorf("%s: artifacts' outcome.json %s does not match the row (success %v, %d calls)", r.EpisodeID, b, r.Success, r.NumCalls)
		}
	}
	for id := range accepted {
		if seen[id] != 1 {
			t.Errorf("%s: %d stored rows, want 1", id, seen[id])
		}
	}
}

// readAll is drill.ReadAll, strict: an object that does not decode fails.
func readAll[T any](ctx context.Context, t *testing.T, s *store.Store, dir string) []T {
	t.Helper()
	rows, err := drill.ReadAll[T](ctx, s, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
