package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

func TestBar(t *testing.T) {
	cases := []struct {
		done, total int
		want        string // the count and percentage the bar shows
		fill        int    // '=' and '>' cells of 20
	}{
		{0, 10, "0% [", 0},
		{3, 10, "30% [", 6},
		{10, 10, "100% [", 20},
		{15, 10, "100% [", 20}, // more done than total (a retried chunk counted twice) clamps
	}
	for _, c := range cases {
		got := bar(c.done, c.total)
		if !strings.Contains(got, c.want) || !strings.HasSuffix(got, fmt.Sprintf("(%d/%d)", min(c.done, c.total), c.total)) {
			t.Errorf("bar(%d, %d) = %q, want %q and the count", c.done, c.total, got, c.want)
		}
		inner := got[strings.Index(got, "[")+1 : strings.Index(got, "]")]
		if len(inner) != 20 || strings.Count(inner, "=")+strings.Count(inner, ">") != c.fill {
			t.Errorf("bar(%d, %d) = %q: want 20 cells, %d filled", c.done, c.total, got, c.fill)
		}
		if strings.ContainsAny(got, "\r\x1b") {
			t.Errorf("bar(%d, %d) = %q carries terminal control characters", c.done, c.total, got)
		}
	}
	if got := bar(0, 0); got != "-" {
		t.Errorf("bar(0, 0) = %q, want -", got)
	}
	// Percentages of different widths keep the bars aligned in a column.
	if a, b := bar(3, 10), bar(10, 10); strings.Index(a, "[") != strings.Index(b, "[") {
		t.Errorf("bars not aligned: %q / %q", a, b)
	}
}

// rowOf finds a run's row in the rendered list and cuts it into columns
// where the header's columns start (cells may hold spaces: the bars do).
func rowOf(t *testing.T, table, run string) []string {
	t.Helper()
	lines := strings.Split(table, "\n")
	var starts []int
	for i, name := range strings.Fields(strings.Replace(lines[0], "LAST ERROR", "LAST_ERROR", 1)) {
		starts = append(starts, strings.Index(lines[0], strings.Replace(name, "_", " ", 1)))
		if i > 0 && starts[i] <= starts[i-1] {
			t.Fatalf("header %q", lines[0])
		}
	}
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, run+" ") {
			continue
		}
		r := []rune(l) // the … of a cut error is one column wide
		var cols []string
		for i, s := range starts {
			end := len(r)
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			cols = append(cols, strings.TrimSpace(string(r[min(s, len(r)):min(end, len(r))])))
		}
		return cols
	}
	t.Fatalf("no row for run %s in\n%s", run, table)
	return nil
}

func TestStatusRows(t *testing.T) {
	sums := []schemas.RoundSummary{{Round: 1, ValSuccess: 0.3, WeightsID: "w0", NewWeightsID: "r1", Val: &schemas.TaskResult{Successes: 9, Valid: 30, SuccessRate: 0.3}},
		{Round: 2, ValSuccess: 0.5, WeightsID: "r1", NewWeightsID: "r2"}}
	long := "round 2 training: activity error (type: Train, scheduledEventID: 31, activityID: 31, identity: host-1):\ntrainer exited with status 1: CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.15 GiB total capacity)"

	// The views as api.ListRuns gives them (api.TestRunViews): running
	// and stopping from the progress query, the others closed.
	running := api.RunView{Run: "r-running", Kind: api.KindTrain, Status: "running", Round: 2, Rounds: 3, Phase: "train", Episodes: api.Tally{Total: 10, Done: 4, Valid: 3, Successes: 2},
		Live: true, Val: 0.3, ValCounts: sums[0].Val, WeightsID: "r1", Children: []string{"chunk-0"}, Summaries: sums[:1]}
	stopping := api.RunView{Run: "r-stopping", Kind: api.KindTrain, Status: "stopping", Round: 1, Rounds: 2, Phase: "train", Episodes: api.Tally{Total: 8, Done: 8, Valid: 8, Successes: 8}, Live: true, Val: -1}
	completed := api.RunView{Run: "r-completed", Kind: api.KindTrain, Status: "completed", Round: 2, Rounds: 2, Phase: "done", Val: 0.7, ValCounts: &schemas.TaskResult{Successes: 14, Valid: 20, SuccessRate: 0.7},
		FinalVal: true, WeightsID: "r2", Summaries: sums}
	stopped := api.RunView{Run: "r-stopped", Kind: api.KindTrain, Status: "stopped", Round: 2, Rounds: 4, Phase: "done", Val: 0.5, Summaries: sums[:1]}
	failed := api.RunView{Run: "r-failed", Kind: api.KindTrain, Status: "failed", Round: 2, Rounds: 2, Phase: "done", Val: 0.5, WeightsID: "r1", Err: long, Summaries: sums[:1]}
	canceled := api.RunView{Run: "r-canceled", Kind: api.KindTrain, Status: "canceled", Round: 2, Rounds: 2, Phase: "done", Val: 0.5, WeightsID: "r1", Summaries: sums[:1]}
	terminated := api.RunView{Run: "r-terminated", Kind: api.KindTrain, Status: "terminated", Round: 2, Phase: "done", Val: 0.5, Err: "terminated: operator: wrong harness"}

	// Evaluations: running (one shard of two), stopped with an incomplete
	// report, and a sweep's, completed.
	evalRunning := api.RunView{Run: "e-running", Kind: api.KindEval, Tag: "plus", Shard: 1, Shards: 2, Status: "running", Phase: "episodes",
		Episodes: api.Tally{Total: 5015, Done: 500, Valid: 500, Successes: 250}, Live: true, Val: -1, WeightsID: "r7"}
	evalStopped := api.RunView{Run: "e-stopped", Kind: api.KindEval, Tag: "t1", Shards: 1, Status: "stopped", Phase: "done", Val: 0.5,
		ValCounts: &schemas.TaskResult{Successes: 10, Valid: 20, SuccessRate: 0.5}, FinalVal: true, WeightsID: "w0", Err: "incomplete: stopped (starter stop), 15 cells skipped"}
	sweepEval := api.RunView{Run: "e-sweep", Kind: api.KindSweepEval, Tag: "sweep-nightly-r2", Shards: 1, Status: "completed", Phase: "done", Val: 0.7,
		ValCounts: &schemas.TaskResult{Successes: 14, Valid: 20, SuccessRate: 0.7}, FinalVal: true, WeightsID: "r2"}

	var b bytes.Buffer
	renderList(&b, []api.RunView{running, stopping, completed, stopped, failed, canceled, terminated, evalRunning, evalStopped, sweepEval})
	table := b.String()
	if head := strings.Fields(strings.SplitN(table, "\n", 2)[0]); strings.Join(head, " ") != "RUN KIND TAG STATUS ROUND PHASE EPISODES SUCCESS VALIDATION WEIGHTS LAST ERROR" {
		t.Fatalf("header %q", head)
	}
	// run, status, round, phase, episodes, success, validation, last error.
	// Validation carries its counts and interval where they are those of
	// the rate shown; r-stopped's attribute (50 %) is newer than its
	// summaries, so it stays bare.
	want := map[string][]string{
		"r-running":    {"r-running", "train", "-", "running", "2/3", "train", "40% [=======>            ] (4/10)", "2/3 (66.7% [20–94]) · 2/4 done", "9/30 " + stats.Rate(9, 30), "r1", "-"},
		"r-stopping":   {"r-stopping", "train", "-", "stopping", "1/2", "train", "100% [====================] (8/8)", "8/8 (100.0% [67–100]) · 8/8 done", "-", "-", "-"},
		"r-completed":  {"r-completed", "train", "-", "completed", "2/2", "done", "-", "-", "14/20 " + stats.Rate(14, 20) + " (final)", "r2", "-"},
		"r-stopped":    {"r-stopped", "train", "-", "stopped", "2/4", "done", "-", "-", "50.0%", "-", "-"},
		"r-canceled":   {"r-canceled", "train", "-", "canceled", "2/2", "done", "-", "-", "50.0%", "r1", "-"},
		"r-terminated": {"r-terminated", "train", "-", "terminated", "2/?", "done", "-", "-", "50.0%", "-", "terminated: operator: wrong harness"},
		"e-running":    {"e-running", "eval", "plus 1/2", "running", "-", "episodes", "9% [>                   ] (500/5015)", "250/500 (" + stats.Rate(250, 500) + ") · 250/500 done", "-", "r7", "-"},
		"e-stopped":    {"e-stopped", "eval", "t1", "stopped", "-", "done", "-", "-", "10/20 " + stats.Rate(10, 20) + " (incomplete)", "w0", "incomplete: stopped (starter stop), 15 cells skipped"},
		"e-sweep":      {"e-sweep", "sweep-eval", "sweep-nightly-r2", "completed", "-", "done", "-", "-", "14/20 " + stats.Rate(14, 20) + " (report)", "r2", "-"},
	}
	for run, w := range want {
		if got := rowOf(t, table, run); strings.Join(got, "|") != strings.Join(w, "|") {
			t.Errorf("row of %s:\n got %q\nwant %q", run, got, w)
		}
	}
	// A failure is one line, cut to the column's width, its start kept.
	f := rowOf(t, table, "r-failed")
	if len(f) != 11 || f[3] != "failed" || !strings.HasPrefix(f[10], "round 2 training: activity error") ||
		!strings.HasSuffix(f[10], "…") || len([]rune(f[10])) != 60 {
		t.Errorf("failed row %q: want the failure's first 59 characters and …", f)
	}
	if strings.Count(table, "\n") != 11 {
		t.Errorf("a row spans more than one line:\n%s", table)
	}

	// The detail adds the running chunks and the per-round table.
	b.Reset()
	renderDetail(&b, running)
	d := b.String()
	for _, s := range []string{"run r-running: running, round 2/3, phase train, weights r1", "(4/10)", "successes 2/3 (66.7% [20–94]) · 2/4 done", "running episode chunks: chunk-0", "val success", "30.0%"} {
		if !strings.Contains(d, s) {
			t.Errorf("detail lacks %q:\n%s", s, d)
		}
	}
	b.Reset()
	renderDetail(&b, failed)
	if d := b.String(); !strings.Contains(d, "last error: round 2 training") || !strings.Contains(d, "CUDA out of memory") {
		t.Errorf("failed detail lacks the whole failure:\n%s", d)
	}
	// One run's page: its training in detail, then its evaluations.
	b.Reset()
	evalOfRunning := evalRunning
	evalOfRunning.Run = "r-running"
	if done := renderRun(&b, []api.RunView{running, evalOfRunning}); done {
		t.Error("a run with a running evaluation is said to be done")
	}
	page := b.String()
	if i, j := strings.Index(page, "run r-running: running"), strings.Index(page, "evaluations of run r-running:"); i < 0 || j < i || !strings.Contains(page[j:], "plus 1/2") {
		t.Errorf("run page:\n%s", page)
	}
	b.Reset()
	if done := renderRun(&b, []api.RunView{evalStopped}); !done || !strings.HasPrefix(b.String(), "evaluations of run e-stopped:") {
		t.Errorf("a run of one stopped evaluation (done %v):\n%s", done, b.String())
	}
	b.Reset()
	renderList(&b, nil)
	if !strings.Contains(b.String(), "no runs yet") {
		t.Errorf("empty list says %q", b.String())
	}
}

func TestStatusBadInput(t *testing.T) {
	e := connect.Endpoints{Temporal: "127.0.0.1:1", Namespace: "default"}
	for _, c := range []struct {
		f    statusFlags
		want string
	}{
		{statusFlags{run: "no such/run", limit: 20}, `--run "no such/run"`},
		{statusFlags{limit: 0}, "--limit 0"},
		{statusFlags{limit: 5, watch: true, interval: time.Millisecond}, "--interval 1ms"},
	} {
		err := status(context.Background(), io.Discard, &e, c.f)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: error %v, want one line naming %s", c.f, err, c.want)
		}
	}
}

// Status shows each host's assignment, loaded weights and figures — all
// runs', or one run's with --run — and the weights episodes wait for.
func TestRenderFleet(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	st := api.FleetStatus{
		State: fleet.State{
			Hosts: map[string]*fleet.Host{"h1": {Name: "h1", Slots: 4, Servers: 1, Loaded: []fleet.Server{{Weights: "tr/r1", Busy: 3}}}},
			Demands: map[string]fleet.Demand{
				"tr-1": {Key: "tr-1", Run: "tr", Weights: "tr/r1", Priority: 1, Episodes: 64},
				"sw-1": {Key: "sw-1", Run: "sweep-x", Weights: "sweep-x/c3", Priority: 3, Episodes: 35},
				// An evaluation of 1,030 cells waits as three chunks.
				"ev-0": {Key: "ev-0", Run: "plus", Weights: "plus/r7", Priority: 3, Episodes: 500},
				"ev-1": {Key: "ev-1", Run: "plus", Weights: "plus/r7", Priority: 3, Episodes: 500, Remaining: 120},
				"ev-2": {Key: "ev-2", Run: "plus", Weights: "plus/r7", Priority: 3, Episodes: 30},
			},
			Assign:  map[string][]string{"h1": {"tr/r1"}},
			Waiting: map[string]time.Time{"sweep-x/c3": now.Add(-42 * time.Second)},
		},
		Stats: map[string][]schemas.SlotStats{"h1": {
			{Run: "sweep-x", Loads: 2, LoadTime: 40 * time.Second, FetchTime: 10 * time.Second, Idle: 3 * time.Second, Waits: 4},
			{Run: "tr", Loads: 3, Failed: 1, LoadTime: 61 * time.Second, FetchTime: 21 * time.Second, Idle: 9 * time.Second, Waits: 1, Waiting: 2},
		}},
	}
	var all bytes.Buffer
	renderFleet(&all, st, "", now)
	out := all.String()
	// Loads split into the transfer (31 s fetching) and the serving pause (1m10s).
	for _, want := range []string{"rollout fleet: 1 hosts", "tr/r1 (3)", "   5+1✗", "FETCHING", "PAUSED", "      31s", "    1m10s", "tr/r1 ", "sweep-x/c3", "42s"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "tr/r1      ") > strings.Index(out, "sweep-x/c3") {
		t.Errorf("training's weights are not listed first:\n%s", out)
	}
	// One line per weights, its chunks summed: 650 of 1,030 left.
	if n := strings.Count(out, "plus/r7"); n != 1 || !strings.Contains(out, "650/1030") {
		t.Errorf("the evaluation's weights on %d lines, want one saying 650/1030:\n%s", n, out)
	}
	var one bytes.Buffer
	renderFleet(&one, st, "tr", now)
	out = one.String()
	if !strings.Contains(out, "   3+1✗") || !strings.Contains(out, "      21s") || !strings.Contains(out, "      40s") || strings.Contains(out, "sweep-x/c3") {
		t.Errorf("run tr's view:\n%s", out)
	}
}

// TestStatusAndReportOnRealRun runs a tiny real run (1 round of 2 groups × 2
// attempts on the minimal harness) on a real Temporal and S3 with the worker
// and starter binaries, then checks what status and report say about it.
func TestStatusAndReportOnRealRun(t *testing.T) {
	itest.Slow(t)
	stack := itest.Start(t)
	bins := itest.Binaries(t)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	stack.StartWorker(t, bins, "main")

	starter := func(args ...string) (string, error) {
		out, err := stack.Starter(ctx, t, bins, args...).CombinedOutput()
		return string(out), err
	}
	const run = "itest-status"
	if out, err := starter("train", "--config", filepath.Join(root, "harnesses/minimal/harness.yaml"), "--run", run,
		"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"), "--rounds", "1", "--groups", "2", "--attempts", "2",
		"--var", "bin="+bins, "--detach"); err != nil {
		t.Fatalf("starter train: %v\n%s", err, out)
	}

	// --watch --run follows the run and returns by itself when it ends.
	out, err := starter("status", "--run", run, "--watch", "--interval", "500ms")
	if err != nil {
		t.Fatalf("status --watch: %v\n%s", err, out)
	}
	frames := strings.Count(out, "(Ctrl-C ends)\n")
	last := out[strings.LastIndex(out, "(Ctrl-C ends)\n"):]
	if !strings.Contains(last, "run "+run+": completed, round 1/1") || !strings.Contains(last, "(final)") {
		t.Fatalf("last frame of status --watch is not the completed run:\n%s", out)
	}
	t.Logf("status --watch drew %d frames; the last:\n%s", frames, last)

	c, err := connect.Temporal(ctx, stack.Endpoints, tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var res api.TrainResult
	if err := c.GetWorkflow(ctx, api.WorkflowID(run), "").Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Summaries) != 1 || res.FinalValSuccess < 0 {
		t.Fatalf("result %+v: want one round and a final validation", res)
	}
	sum := res.Summaries[0]

	// The list shows the run with its final state once visibility has it.
	var row []string
	for {
		out, err := starter("status")
		if err != nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		if strings.Contains(out, run+" ") {
			if row = rowOf(t, out, run); row[3] == "completed" {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("status never listed %s as completed:\n%s", run, out)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if res.FinalVal == nil || res.FinalVal.SuccessRate != res.FinalValSuccess {
		t.Fatalf("the result's final validation counts %+v do not match its rate %v", res.FinalVal, res.FinalValSuccess)
	}
	fv := res.FinalVal
	if want := fmt.Sprintf("%d/%d %s (final)", fv.Successes, fv.Valid, stats.Rate(fv.Successes, fv.Valid)); row[1] != "train" || row[4] != "1/1" || row[5] != "done" || row[8] != want || row[10] != "-" {
		t.Errorf("status row %q: want round 1/1, phase done, validation %s, no error", row, want)
	}

	out, err = starter("status", "--run", "no-such-run")
	if err == nil || !strings.Contains(out, "run no-such-run not found: see `starter status` for the runs") {
		t.Errorf("status of an unknown run: %v\n%s", err, out)
	}
	out, err = starter("report", "--run", "no-such-run")
	if err == nil || !strings.Contains(out, "run no-such-run not found") {
		t.Errorf("report of an unknown run: %v\n%s", err, out)
	}

	// compare: the run's first validation (w0) against its final one (r1),
	// paired on the same cells; the comparison is stored next to the reports.
	out, err = starter("compare", "--run", run, "--a", "val-r1", "--b", "val-r2")
	if err != nil {
		t.Fatalf("compare: %v\n%s", err, out)
	}
	t.Logf("compare:\n%s", out)
	var cmp schemas.Comparison
	if err := store.GetJSON(ctx, stack.Store, schemas.Layout{Run: run}.Comparison("val-r1", "val-r2"), &cmp); err != nil {
		t.Fatalf("stored comparison: %v", err)
	}
	allRow := false
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "all" && f[1] == fmt.Sprint(cmp.Overall.Pairs) {
			allRow = true
		}
	}
	if cmp.Overall.Pairs+cmp.Unpaired == 0 || cmp.Overall.OnlyA+cmp.Overall.OnlyB != len(cmp.Discordant) || cmp.WeightsA != "w0" ||
		!strings.Contains(out, "McNemar p") || !allRow {
		t.Errorf("comparison %+v does not match the printed table", cmp.Overall)
	}
	if out, err = starter("compare", "--run", run, "--a", "val-r1", "--b", "no-such-tag"); err == nil || !strings.Contains(out, "has no report no-such-tag") {
		t.Errorf("compare with a missing report: %v\n%s", err, out)
	}

	// compare by weights: w0 has its validation reports, which are reused;
	// weights compare has never seen (w0 with one byte more, a local
	// directory) are published and evaluated by compare itself, then
	// reused by the next compare.
	other := t.TempDir()
	policy, err := os.ReadFile(filepath.Join(root, "harnesses/minimal/weights/w0/policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "policy.json"), append(policy, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	cmpChart := filepath.Join(t.TempDir(), "compare.png")
	byWeights := []string{"compare", "--config", filepath.Join(root, "harnesses/minimal/harness.yaml"), "--var", "bin=" + bins,
		"--run", run, "--weights-a", "w0", "--weights-b", other, "--chart", cmpChart}
	out, err = starter(byWeights...)
	if err != nil {
		t.Fatalf("compare by weights: %v\n%s", err, out)
	}
	t.Logf("compare by weights:\n%s", out)
	var byW schemas.Comparison
	if i := strings.Index(out, "stored: s3://"+stack.Store.Bucket+"/"); i < 0 {
		t.Fatalf("compare by weights stored nothing:\n%s", out)
	} else if err := store.GetJSON(ctx, stack.Store, strings.Fields(out[i+len("stored: s3://"+stack.Store.Bucket+"/"):])[0], &byW); err != nil {
		t.Fatalf("stored comparison: %v", err)
	}
	if !strings.HasPrefix(byW.A, "val-r") || byW.WeightsA != "w0" || !strings.HasPrefix(byW.B, "cmp-ext-") || !strings.HasPrefix(byW.WeightsB, "ext-") ||
		byW.Overall.Pairs+byW.Unpaired != 35 {
		t.Errorf("comparison by weights %s (%s) vs %s (%s), %d pairs + %d unpaired: want w0's validation against a new evaluation on all 35 cells",
			byW.A, byW.WeightsA, byW.B, byW.WeightsB, byW.Overall.Pairs, byW.Unpaired)
	}
	for _, want := range []string{"A: weights w0 — reusing report " + byW.A, "B: weights " + byW.WeightsB + " — no report covers its 35 cells of val_init_ids",
		"evaluating under tag " + byW.B, "started evaluation " + byW.B, "B: weights " + byW.WeightsB + " evaluated under tag " + byW.B, "chart: " + cmpChart} {
		if !strings.Contains(out, want) {
			t.Errorf("compare by weights does not say %q", want)
		}
	}
	if b, err := os.ReadFile(cmpChart); err != nil {
		t.Errorf("compare chart: %v", err)
	} else if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Errorf("compare chart is not a PNG: %v", err)
	}
	out, err = starter(byWeights[:len(byWeights)-2]...)
	if err != nil || !strings.Contains(out, "B: weights "+byW.WeightsB+" — reusing report "+byW.B) || strings.Contains(out, "started evaluation") {
		t.Errorf("compare by weights again does not reuse both reports: %v\n%s", err, out)
	}

	// report: the round's success counted from the episode files agrees
	// with the workflow's summary, and the chart has both rounds.
	dir := t.TempDir()
	chartFile := filepath.Join(dir, "success.svg")
	out, err = starter("report", "--run", run, "--chart", chartFile)
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	t.Logf("report:\n%s", out)
	collect := fmt.Sprintf("%d/%d (%.1f%% [", sum.Successes, sum.Valid, 100*sum.SuccessRate)
	var r1 []string
	for _, l := range strings.Split(out, "\n") {
		// The first such row: the by-suite table below repeats round 1.
		if f := strings.Fields(l); len(f) >= 5 && f[0] == "1" && strings.Contains(l, collect) && r1 == nil {
			r1 = f
		}
	}
	if r1 == nil || !strings.Contains(strings.Join(r1, " "), fmt.Sprintf("(%.1f%% [", 100*sum.ValSuccess)) {
		t.Errorf("report has no round 1 row with collection %s and validation %.1f%%", collect, 100*sum.ValSuccess)
	}
	if !strings.Contains(out, fmt.Sprintf("(%.1f%% [", 100*res.FinalValSuccess)) || !strings.Contains(out, "2 (final)") {
		t.Errorf("report lacks the final validation (%.1f%%) as round 2 (final)", 100*res.FinalValSuccess)
	}
	if !strings.Contains(out, "chart: "+chartFile) {
		t.Errorf("report does not name the chart %s", chartFile)
	}
	svg := readSVG(t, chartFile)
	for _, s := range []string{"1", "2 (final)"} {
		if !svg.texts[s] {
			t.Errorf("chart lacks the text %q", s)
		}
	}
	// The legend names each series with its latest value.
	for _, prefix := range []string{seriesTrain + " — round 1: ", fmt.Sprintf("%s — round 2 (final): %.1f%% [", seriesVal, 100*res.FinalValSuccess)} {
		found := false
		for s := range svg.texts {
			found = found || strings.HasPrefix(s, prefix)
		}
		if !found {
			t.Errorf("chart has no legend text starting %q", prefix)
		}
	}
	if svg.dots[svgColor(colorTrain)] != 1 || svg.dots[svgColor(colorVal)] != 2 {
		t.Errorf("chart dots by colour %v: want 1 collection point and 2 validation points", svg.dots)
	}
}

// svgDoc is what a chart test reads from an SVG file: its texts and the
// number of dots (circles) of each fill colour.
type svgDoc struct {
	texts map[string]bool
	dots  map[string]int
	// bars counts vertical one-segment lines (error bars) by stroke colour.
	bars map[string]int
	// fills counts closed filled paths (a bar chart's bars) by fill colour.
	fills map[string]int
}

// readSVG parses the file as XML: a malformed SVG fails the test.
func readSVG(t *testing.T, file string) svgDoc {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc := svgDoc{texts: map[string]bool{}, dots: map[string]int{}, bars: map[string]int{}, fills: map[string]int{}}
	d := xml.NewDecoder(f)
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", file, err)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = el.Name.Local
		}
		switch el.Name.Local {
		case "text":
			var s string
			if err := d.DecodeElement(&s, &el); err != nil {
				t.Fatal(err)
			}
			doc.texts[s] = true
		case "path":
			var d, stroke, fill string
			for _, a := range el.Attr {
				switch a.Name.Local {
				case "d":
					d = a.Value
				case "style":
					for _, p := range strings.Split(a.Value, ";") {
						if v, ok := strings.CutPrefix(p, "stroke:"); ok {
							stroke = v
						}
						if v, ok := strings.CutPrefix(p, "fill:"); ok {
							fill = v
						}
					}
				}
			}
			if strings.HasSuffix(strings.TrimSpace(d), "Z") {
				doc.fills[fill]++
			}
			var x1, y1, x2, y2 int
			if n, _ := fmt.Sscanf(strings.Join(strings.Fields(d), " "), "M %d %d L %d %d", &x1, &y1, &x2, &y2); n == 4 && x1 == x2 && y1 != y2 && strings.Count(d, "L") == 1 {
				doc.bars[stroke]++
			}
		case "circle":
			for _, a := range el.Attr {
				if a.Name.Local == "style" {
					for _, p := range strings.Split(a.Value, ";") {
						if v, ok := strings.CutPrefix(p, "fill:"); ok {
							doc.dots[v]++
						}
					}
				}
			}
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q, want svg", file, root)
	}
	return doc
}

func TestMain(m *testing.M) {
	code := m.Run()
	itest.Cleanup()
	os.Exit(code)
}
