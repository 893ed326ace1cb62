package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// TestStopAndCancelEvaluation runs two evaluations of one run on real
// servers with slow episodes: status lists both as evaluations; stop
// without --tag asks which, and stopping a run that does not run names
// the two; then one is stopped (its report written, marked incomplete)
// and the other cancelled (no report), and evaluating the stopped tag
// again finishes it.
func TestStopAndCancelEvaluation(t *testing.T) {
	itest.Slow(t)
	stack := itest.Start(t)
	bins := itest.Binaries(t)
	t.Cleanup(itest.Cleanup)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// Each episode holds its slot a second, so the evaluations run long
	// enough to be stopped; what is checked does not depend on how long.
	stack.StartWorkerEnv(t, bins, "evstop", []string{"MINIMAL_EPISODE_DELAY=1s"}, "--slots", "2")

	const run = "itest-evstop"
	flags := func(tag string, detach bool) evalFlags {
		return evalFlags{config: filepath.Join(root, "harnesses/minimal/harness.yaml"), run: run, weights: filepath.Join(root, "harnesses/minimal/weights/w0"),
			tag: tag, initKey: valKey, vars: []string{"bin=" + bins}, heartbeat: 10 * time.Second, detach: detach}
	}
	for _, tag := range []string{"a", "b"} {
		var out bytes.Buffer
		if err := runEval(ctx, &out, &stack.Endpoints, flags(tag, true)); err != nil {
			t.Fatalf("eval %s: %v\n%s", tag, err, out.String())
		}
	}
	c, err := connect.Temporal(ctx, stack.Endpoints, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	idA, idB := api.EvalWorkflowID(run, "a", 0, 1), api.EvalWorkflowID(run, "b", 0, 1)

	// Status lists both, as evaluations, once a's first episodes are done.
	var list string
	for {
		var b bytes.Buffer
		err := status(ctx, &b, &stack.Endpoints, statusFlags{limit: 20})
		p, perr := api.QueryEvalProgress(ctx, c, idA)
		list = b.String()
		if err == nil && perr == nil && p.Episodes.Done >= 2 && strings.Count(list, run+" ") == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the evaluations never showed in status (%v):\n%s", err, list)
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Logf("status:\n%s", list)
	for _, tag := range []string{"a", "b"} {
		row := evalRow(t, list, tag)
		if len(row) != 11 || row[0] != run || row[1] != "eval" || row[3] != "running" || !strings.HasPrefix(row[9], "ext-") {
			t.Errorf("row of evaluation %s: %q", tag, row)
		}
	}

	starter := func(args ...string) (string, error) {
		out, err := stack.Starter(ctx, t, bins, args...).CombinedOutput()
		return string(out), err
	}
	out, err := starter("stop", "--run", run)
	if err == nil || !strings.Contains(out, "2 evaluations running (tags a, b)") || !strings.Contains(out, "--tag") {
		t.Errorf("stop without --tag of a run with two evaluations: %v\n%s", err, out)
	}
	out, err = starter("stop", "--run", "plus9")
	if err == nil || !strings.Contains(out, "run plus9 is not running; running: "+run+" (eval, tag a), "+run+" (eval, tag b)") {
		t.Errorf("stop of a run that is not running: %v\n%s", err, out)
	}
	out, err = starter("cancel", "--run", run, "--tag", "c")
	if err == nil || !strings.Contains(out, "evaluation c of run "+run+" is not running; running: ") {
		t.Errorf("cancel of a tag that is not running: %v\n%s", err, out)
	}

	if out, err := starter("stop", "--run", run, "--tag", "a", "--reason", "itest stop"); err != nil || !strings.Contains(out, "marked incomplete") {
		t.Fatalf("stop --tag a: %v\n%s", err, out)
	}
	if out, err := starter("cancel", "--run", run, "--tag", "b"); err != nil || !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel --tag b: %v\n%s", err, out)
	}

	// a ends with its report, incomplete; b is cancelled, with none.
	var rep schemas.Report
	if err := c.GetWorkflow(ctx, idA, "").Get(ctx, &rep); err != nil {
		t.Fatalf("stopped evaluation: %v", err)
	}
	cells := 7 * 5 // the minimal harness: 7 tasks × val init ids 45–49
	if rep.Stopped == nil || rep.Stopped.Reason != "itest stop" || rep.Stopped.Skipped == 0 || rep.Stopped.Skipped >= cells ||
		rep.Overall.Episodes+rep.Stopped.Skipped != cells {
		t.Errorf("stopped report: stopped %+v, overall %+v; want some of %d cells skipped, the rest run", rep.Stopped, rep.Overall, cells)
	}
	l := schemas.Layout{Run: run}
	var stored schemas.Report
	if err := store.GetJSON(ctx, stack.Store, l.Report("a"), &stored); err != nil || stored.Stopped == nil {
		t.Errorf("stored report of a: %v, stopped %+v", err, stored.Stopped)
	}
	if b, err := stack.Store.Get(ctx, l.ReportText("a")); err != nil || !strings.Contains(string(b), "!! INCOMPLETE") {
		t.Errorf("report.txt of a (%v):\n%s", err, b)
	}
	var canceled *temporal.CanceledError
	if err := c.GetWorkflow(ctx, idB, "").Get(ctx, nil); !errors.As(err, &canceled) {
		t.Errorf("cancelled evaluation ended with %v, want cancelled", err)
	}
	if ok, _ := stack.Store.Exists(ctx, l.Report("b")); ok {
		t.Error("the cancelled evaluation wrote a report")
	}
	var b bytes.Buffer
	if err := status(ctx, &b, &stack.Endpoints, statusFlags{run: run, limit: 20}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if a, bb := evalRow(t, page, "a"), evalRow(t, page, "b"); a[3] != "stopped" || !strings.HasSuffix(a[8], "(incomplete)") || bb[3] != "canceled" {
		t.Errorf("status --run after stop and cancel:\n%s", page)
	}
	out, err = starter("stop", "--run", run, "--tag", "a")
	if err == nil || !strings.Contains(out, "evaluation a of run "+run+" is not running, and nothing else is") {
		t.Errorf("stop of an ended evaluation: %v\n%s", err, out)
	}

	// The same evaluation again finishes the stopped one: its report
	// replaces the incomplete one and covers every cell.
	var again bytes.Buffer
	if err := runEval(ctx, &again, &stack.Endpoints, flags("a", false)); err != nil {
		t.Fatalf("eval a again: %v\n%s", err, again.String())
	}
	stored = schemas.Report{}
	if err := store.GetJSON(ctx, stack.Store, l.Report("a"), &stored); err != nil || stored.Stopped != nil || stored.Overall.Episodes != cells || stored.Overall.Lost != 0 {
		t.Errorf("report of a finished (%v): stopped %+v, overall %+v", err, stored.Stopped, stored.Overall)
	}
}

// evalRow is the row of evaluation tag in a status table, cut into its
// columns (rowOf finds rows by run, and both evaluations share one).
func evalRow(t *testing.T, table, tag string) []string {
	t.Helper()
	lines := strings.Split(table, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "RUN ") {
			continue
		}
		for _, r := range lines[i+1:] {
			if f := strings.Fields(r); len(f) > 2 && f[2] == tag {
				return rowOf(t, strings.Join([]string{l, r}, "\n"), f[0])
			}
		}
	}
	t.Fatalf("no row of evaluation %s in\n%s", tag, table)
	return nil
}
