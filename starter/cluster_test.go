package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/deploy/drill"
	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// TestOnProductionCluster runs the starter and a worker on the
// production-shaped Temporal (issue 27): PostgreSQL persistence and SQL
// visibility, four services, mTLS. What the dev server hides: a namespace
// made a moment before, whose frontend has not yet seen Roundhouse's
// search attributes, must take the first `starter train`; `starter
// status` lists runs through SQL visibility and says what is wrong when
// it cannot; a history service killed mid-collection loses nothing.
// As root (StartCluster skips otherwise); not under -short.
func TestOnProductionCluster(t *testing.T) {
	itest.Slow(t)
	stack, c := itest.StartCluster(t, "fresh")
	bins := itest.Binaries(t)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	// Before any worker or run: nothing registered the search attributes,
	// so there can be no run, and status says so without an error.
	out, err := stack.Starter(ctx, t, bins, "status").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "no runs yet") {
		t.Fatalf("status of a fresh namespace: %v\n%s", err, out)
	}
	// The first run, started before any worker registered anything: the
	// starter registers the attributes and starts at once.
	run := "prod1"
	out, err = stack.Starter(ctx, t, bins, "train", "--config", filepath.Join(root, "harnesses/minimal/harness.yaml"), "--run", run,
		"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"), "--rounds", "2", "--groups", "4", "--detach",
		"--var", "bin="+bins).CombinedOutput()
	if err != nil {
		t.Fatalf("first starter train in a fresh namespace: %v\n%s", err, out)
	}
	stack.StartWorkerEnv(t, bins, "main", []string{"MINIMAL_EPISODE_DELAY=1s"})

	// Listed through SQL visibility.
	waitFor(t, 2*time.Minute, "status to list run "+run, func() bool {
		out, err = stack.Starter(ctx, t, bins, "status").CombinedOutput()
		return err == nil && strings.Contains(string(out), run)
	})

	// kill -9 of the history service once collection has staged episodes,
	// back 5 s later.
	l := schemas.Layout{Run: run}
	waitFor(t, 3*time.Minute, "round 1's collection to stage episodes", func() bool {
		objs, err := stack.Store.List(ctx, l.Prefix()+"staged/round=1/phase=train/")
		return err == nil && len(objs) >= 3
	})
	if err := c.Kill("history"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if err := c.Start(ctx, "history"); err != nil {
		t.Fatal(err)
	}
	tc, err := connect.Temporal(ctx, stack.Endpoints, tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	werr := tc.GetWorkflow(ctx, api.WorkflowID(run), "").Get(ctx, nil)
	var st schemas.State
	if gerr := store.GetJSON(ctx, stack.Store, l.State(), &st); werr != nil || gerr != nil || st.RoundsDone != 2 {
		t.Fatalf("run after the history service's restart: rounds done %d (%v, %v)", st.RoundsDone, werr, gerr)
	}
	res, err := drill.Check(ctx, tc, stack.Store, run)
	if err != nil || !res.OK() || res.Lost != 0 || res.Duplicated != 0 || res.Stored != res.Planned {
		t.Errorf("records after the history service's restart: %d planned, %d stored, %d lost, %d duplicated; %v %v",
			res.Planned, res.Stored, res.Lost, res.Duplicated, res.Problems, err)
	}

	// A client certificate of another CA: one line that names the flag.
	bad := stack
	bad.Endpoints.TLS.CertFile, bad.Endpoints.TLS.KeyFile = c.Certs().Stranger, c.Certs().StrangerKey
	out, err = bad.Starter(ctx, t, bins, "status").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--tls-cert") {
		t.Errorf("status with a certificate the frontend does not trust: %v\n%s", err, out)
	}
}
