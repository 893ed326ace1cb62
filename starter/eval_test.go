package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Every bad input fails before any server is contacted, with a one-line
// message naming the input and the fix.
func TestEvalBadInput(t *testing.T) {
	dir := t.TempDir()
	good := "../harnesses/minimal/harness.yaml"
	w0 := "../harnesses/minimal/weights/w0"
	port := itest.Port(t)
	e := connect.Endpoints{Temporal: "127.0.0.1:" + strconv.Itoa(port), Namespace: "default"}
	ok := evalFlags{config: good, run: "r", weights: w0, tag: "t", initKey: valKey}
	with := func(change func(*evalFlags)) evalFlags { f := ok; change(&f); return f }
	cases := []struct {
		name string
		f    evalFlags
		want []string
	}{
		{"missing config", with(func(f *evalFlags) { f.config = "" }), []string{"--config", "harness.yaml"}},
		{"bad run", with(func(f *evalFlags) { f.run = "a b" }), []string{"--run", "a b"}},
		{"missing tag", with(func(f *evalFlags) { f.tag = "" }), []string{"--tag"}},
		{"training's tag", with(func(f *evalFlags) { f.tag = "val-r2" }), []string{"--tag val-r2", "another tag"}},
		{"train split", with(func(f *evalFlags) { f.initKey = "train_init_ids" }), []string{"--init-key", "val_init_ids", "eval_init_ids"}},
		{"final score replaced", with(func(f *evalFlags) { f.initKey = finalKey; f.replaceTag = true }), []string{"--replace-tag", "never replaced", "new --tag"}},
		{"shard past its count", with(func(f *evalFlags) { f.shard = "2/2" }), []string{"--shard \"2/2\"", "0 ≤ i < n"}},
		{"shard not a number", with(func(f *evalFlags) { f.shard = "x" }), []string{"--shard \"x\""}},
		{"zero shards", with(func(f *evalFlags) { f.shard = "0/0" }), []string{"--shard \"0/0\""}},
		{"missing weights", with(func(f *evalFlags) { f.weights = "" }), []string{"--weights", "w0"}},
		{"absent weights dir", with(func(f *evalFlags) { f.weights = filepath.Join(dir, "w9") }), []string{"--weights", "w9", "does not exist"}},
		{"weights dir without the file", with(func(f *evalFlags) { f.weights = dir }), []string{"policy.json"}},
		{"unknown var", with(func(f *evalFlags) { f.vars = []string{"gpu=0"} }), []string{"--var gpu=0"}},
		{"priority out of range", with(func(f *evalFlags) { f.priority = -1 }), []string{"--priority -1", "1 (served first) to 5"}},
	}
	for _, c := range cases {
		err := runEval(context.Background(), &bytes.Buffer{}, &e, c.f)
		if !wantInputError(t, c.name, err, c.want) {
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: not a one-line input error: %v", c.name, err)
		}
	}
	err := runEval(context.Background(), &bytes.Buffer{}, &e, ok)
	if err == nil || !strings.Contains(err.Error(), "is not reachable") {
		t.Fatalf("unreachable Temporal: %v", err)
	}
}

// A stale pool report is refused by `starter train` before any server is
// contacted (the checks themselves are tested in internal/report).
func TestTrainRefusesStalePool(t *testing.T) {
	h, err := harness.Load("../harnesses/minimal/harness.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	stale := schemas.Report{Run: "sft", Tag: "sft_val", WeightsID: "w0", InitKey: valKey, Harness: h.Name, Digest: h.Digest,
		WeightsDigest: "0123456789abcdef", Scope: schemas.ScopeFull, Shards: 1, Tasks: []schemas.TaskResult{{Task: 0}}}
	dir := t.TempDir()
	pool := filepath.Join(dir, "report.json")
	b, _ := json.Marshal(stale)
	os.WriteFile(pool, b, 0o644)
	port := itest.Port(t)
	e := connect.Endpoints{Temporal: "127.0.0.1:" + strconv.Itoa(port), Namespace: "default"}
	err = train(context.Background(), &bytes.Buffer{}, &e, trainFlags{config: "../harnesses/minimal/harness.yaml", run: "r",
		weights: "../harnesses/minimal/weights/w0", rounds: 1, poolReport: pool})
	if err == nil || !strings.Contains(err.Error(), "--pool-report "+pool+" is stale") {
		t.Errorf("train with a stale pool report: %v", err)
	}
}

// evalStack starts real servers and a worker with the minimal harness's
// programs, and returns them, the binaries' folder, the repository root
// and a context that bounds the test.
func evalStack(t *testing.T) (itest.Stack, string, string, context.Context) {
	t.Helper()
	stack := itest.Start(t)
	bins := itest.Build(t, "./workers/worker", "./harnesses/minimal/cmd/...")
	t.Cleanup(itest.Cleanup)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	stack.StartWorker(t, bins, "main")
	return stack, bins, itest.Root(t), ctx
}

// TestEvalShardsMerge evaluates the minimal harness's validation split in
// two shards at once on real servers, merges them, and checks that the
// merged report counts every cell once and that evaluating or merging
// the tag again is refused or a no-op, writing nothing.
func TestEvalShardsMerge(t *testing.T) {
	stack, bins, root, ctx := evalStack(t)

	const run, tag = "itest-eval", "sft_val"
	config := filepath.Join(root, "harnesses/minimal/harness.yaml")
	w0 := filepath.Join(root, "harnesses/minimal/weights/w0")
	flags := func(shard string) evalFlags {
		return evalFlags{config: config, run: run, weights: w0, tag: tag, initKey: valKey, shard: shard,
			vars: []string{"bin=" + bins}, heartbeat: 10 * time.Second}
	}
	// Both shards at once, into a run that does not exist yet.
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runEval(ctx, &outs[i], &stack.Endpoints, flags(fmt.Sprintf("%d/2", i)))
		}()
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatalf("shard %d/2: %v\n%s", i, errs[i], outs[i].String())
		}
		if !strings.Contains(outs[i].String(), fmt.Sprintf("SHARD %d/2", i)) {
			t.Errorf("shard %d/2's output does not say it is a shard:\n%s", i, outs[i].String())
		}
	}
	t.Logf("shard 0/2:\n%s", outs[0].String())

	var merged bytes.Buffer
	if err := mergeReports(ctx, &merged, stack.Store, run, tag, false); err != nil {
		t.Fatalf("merge: %v", err)
	}
	t.Logf("merge:\n%s", merged.String())
	h, err := harness.Load(config, map[string]string{"bin": bins})
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := harness.IDs(h, valKey)
	cells := len(h.Tasks) * len(ids)
	l := schemas.Layout{Run: run}
	// Every episode was published, so none of its staged tries is left.
	if staged, err := stack.Store.List(ctx, l.Prefix()+"staged/"); err != nil || len(staged) != 0 {
		t.Errorf("%d staged objects left after publishing (%v), want none", len(staged), err)
	}
	var rep schemas.Report
	if err := store.GetJSON(ctx, stack.Store, l.Report(tag), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.IsShard() || len(rep.MergedFrom) != 2 || rep.SplitCells != cells || len(rep.Cells) != cells {
		t.Errorf("merged report: scope %q, from %v, %d split cells, %d cells; want full, 2 shards, %d", rep.Scope, rep.MergedFrom, rep.SplitCells, len(rep.Cells), cells)
	}
	if rep.Overall.Episodes != cells || rep.Overall.Lost != 0 || rep.Overall.Valid+rep.Overall.Invalid != cells {
		t.Errorf("merged overall %+v, want %d episodes", rep.Overall, cells)
	}
	for _, tr := range rep.Tasks {
		if tr.Episodes != len(ids) {
			t.Errorf("task %d counts %d episodes, want %d", tr.Task, tr.Episodes, len(ids))
		}
	}
	// The minimal harness's suites: toy, and vision for its camera task.
	bySuite := map[string]int{}
	for _, s := range rep.Suites {
		bySuite[s.Suite] += s.Episodes
	}
	if len(rep.Suites) != 2 || bySuite["vision"] != len(ids) || bySuite["toy"]+bySuite["vision"] != cells {
		t.Errorf("suites %+v", rep.Suites)
	}
	files, _ := runs.FindWeights(w0, h.Model.WeightsFile)
	desc, _ := weights.Describe(files)
	if d := schemas.WeightsDigest(desc); rep.WeightsDigest != d || rep.WeightsID != "ext-"+d[:12] {
		t.Errorf("weights %s digest %s, want ext-%.12s and %s", rep.WeightsID, rep.WeightsDigest, d, d)
	}
	if rep.Digest != h.Digest || rep.StartedAtMS <= 0 || rep.FinishedAtMS < rep.StartedAtMS {
		t.Errorf("config digest %s (want %s), times %d–%d", rep.Digest, h.Digest, rep.StartedAtMS, rep.FinishedAtMS)
	}
	// Seven tasks print every row; beside report.json every task's row as
	// CSV; `report show` prints what the merge printed, and a shard's own.
	if strings.Contains(merged.String(), "tasks shown") {
		t.Errorf("a 7-task report printed a short form:\n%s", merged.String())
	}
	if b, err := stack.Store.Get(ctx, l.ReportTasks(tag)); err != nil || strings.Count(string(b), "\n") != 1+len(h.Tasks) {
		t.Errorf("tasks.csv (%v):\n%s", err, b)
	}
	var shown bytes.Buffer
	if err := showStoredReport(ctx, &shown, stack.Store, run, tag, runs.Shard{I: 0, N: 1}, false); err != nil || !strings.HasSuffix(merged.String(), "\n\n"+shown.String()) {
		t.Errorf("report show (%v):\n%s\nmerge printed:\n%s", err, shown.String(), merged.String())
	}
	shown.Reset()
	if err := showStoredReport(ctx, &shown, stack.Store, run, tag, runs.Shard{I: 1, N: 2}, true); err != nil || !strings.Contains(shown.String(), "SHARD 1/2 of tag "+tag) {
		t.Errorf("report show --shard 1/2 (%v):\n%s", err, shown.String())
	}
	if err := showStoredReport(ctx, &shown, stack.Store, run, "nope", runs.Shard{I: 0, N: 1}, false); err == nil || !strings.Contains(err.Error(), "no report s3://") {
		t.Errorf("report show of an unknown tag: %v", err)
	}

	// The tag exists now: every way of writing it again is refused, or a
	// no-op for the same merge, and the run's objects stay as they were.
	before := snapshot(ctx, t, stack.Store, l.Prefix())
	for _, c := range []struct {
		name  string
		shard string
		final bool
		want  string
	}{
		{"same shard again", "0/2", false, "--replace-tag"},
		{"whole split under the tag", "", false, "--replace-tag"},
		{"other shard count", "1/3", false, "full report"},
	} {
		f := flags(c.shard)
		err := runEval(ctx, &bytes.Buffer{}, &stack.Endpoints, f)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want a one-line refusal mentioning %q", c.name, err, c.want)
		}
	}
	f := flags("")
	f.run = "no-such-run"
	f.weights = "w0"
	if err := runEval(ctx, &bytes.Buffer{}, &stack.Endpoints, f); err == nil || !strings.Contains(err.Error(), "unknown run no-such-run") {
		t.Errorf("unknown run: %v", err)
	}
	f = flags("")
	f.weights = "r7"
	if err := runEval(ctx, &bytes.Buffer{}, &stack.Endpoints, f); err == nil || !strings.Contains(err.Error(), "weights r7 not found in run "+run+" (it has "+rep.WeightsID+")") {
		t.Errorf("unknown weights id: %v", err)
	}
	var again bytes.Buffer
	if err := mergeReports(ctx, &again, stack.Store, run, tag, false); err != nil || !strings.Contains(again.String(), "merged already") {
		t.Errorf("merging again: %v\n%s", err, again.String())
	}
	if err := mergeReports(ctx, &again, stack.Store, run, "nope", false); err == nil || !strings.Contains(err.Error(), "no shard reports") {
		t.Errorf("merging a tag without shards: %v", err)
	}
	if after := snapshot(ctx, t, stack.Store, l.Prefix()); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("refused commands changed the run's objects:\nbefore %v\nafter  %v", before, after)
	}

	// An explicit replace of one shard removes the merged report, which
	// no longer describes the tag, and keeps the other shard.
	f = flags("1/2")
	f.weights = rep.WeightsID // the published id this time
	f.replaceTag = true
	var out bytes.Buffer
	if err := runEval(ctx, &out, &stack.Endpoints, f); err != nil {
		t.Fatalf("replacing shard 1/2: %v\n%s", err, out.String())
	}
	for _, k := range []string{l.Report(tag), l.ReportText(tag), l.ReportTasks(tag)} {
		if ok, _ := stack.Store.Exists(ctx, k); ok || !strings.Contains(out.String(), "deleted s3://") {
			t.Errorf("replacing a shard kept %s of the merged report:\n%s", k, out.String())
		}
	}
	if ok, _ := stack.Store.Exists(ctx, l.ShardReport(tag, 0, 2)); !ok {
		t.Error("replacing shard 1/2 removed shard 0/2")
	}
	if err := mergeReports(ctx, &again, stack.Store, run, tag, false); err != nil {
		t.Fatalf("merge after the replace: %v", err)
	}
	var rep2 schemas.Report
	if err := store.GetJSON(ctx, stack.Store, l.Report(tag), &rep2); err != nil || rep2.Overall.Episodes != cells {
		t.Errorf("merged again: %+v (%v), want %d episodes", rep2.Overall, err, cells)
	}
}

// snapshot maps every key under prefix to its ETag.
func snapshot(ctx context.Context, t *testing.T, s *store.Store, prefix string) map[string]string {
	t.Helper()
	objs, err := s.List(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range objs {
		if out[o.Key], err = s.ETag(ctx, o.Key); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// A final score under a protocol, on the real stack: a variant of the
// minimal harness (base:) requires suite toy's six tasks over init states
// 1–3; the evaluation runs in two shards over both suites, the merge is
// the final score of the required tasks only, and a variant whose task
// list does not make its protocol's count starts nothing.
func TestProtocolFinalScore(t *testing.T) {
	stack, bins, root, ctx := evalStack(t)

	variant := func(episodes int) string {
		p := filepath.Join(t.TempDir(), "final.yaml")
		body := fmt.Sprintf("base: %s\nname: minimal-final\nprotocol: {name: toy-final, episodes: %d, suites: [toy]}\nsplits: {eval_init_ids: \"1-3\"}\n",
			filepath.Join(root, "harnesses/minimal/harness.yaml"), episodes)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const run, tag = "itest-final", "final"
	w0 := filepath.Join(root, "harnesses/minimal/weights/w0")
	flags := func(config, shard string) evalFlags {
		return evalFlags{config: config, run: run, weights: w0, tag: tag, initKey: finalKey, shard: shard,
			vars: []string{"bin=" + bins}, heartbeat: 10 * time.Second}
	}
	err := runEval(ctx, &bytes.Buffer{}, &stack.Endpoints, flags(variant(20), "0/2"))
	if err == nil || !strings.Contains(err.Error(), "toy-final has 20 episodes, but its 6 required tasks (toy:6) × 3 eval_init_ids make 18") {
		t.Errorf("a protocol its tasks do not make: %v", err)
	}
	if objs, _ := stack.Store.List(ctx, schemas.Layout{Run: run}.Prefix()); len(objs) != 0 {
		t.Errorf("the refused evaluation wrote %d objects", len(objs))
	}

	config := variant(18)
	for i := range 2 {
		var out bytes.Buffer
		if err := runEval(ctx, &out, &stack.Endpoints, flags(config, fmt.Sprintf("%d/2", i))); err != nil {
			t.Fatalf("shard %d/2: %v\n%s", i, err, out.String())
		}
	}
	var merged bytes.Buffer
	if err := mergeReports(ctx, &merged, stack.Store, run, tag, false); err != nil {
		t.Fatalf("merge: %v\n%s", err, merged.String())
	}
	t.Logf("merge:\n%s", merged.String())
	var rep schemas.Report
	if err := store.GetJSON(ctx, stack.Store, schemas.Layout{Run: run}.Report(tag), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Protocol != "toy-final" || rep.ProtocolEpisodes != 18 || !slices.Equal(rep.RequiredTasks, []int32{0, 1, 2, 3, 4, 5}) || rep.Overall.Attempted() != 21 {
		t.Fatalf("report protocol %q %d required %v, %d attempted; want toy-final, 18, tasks 0-5, 21 (vision too)",
			rep.Protocol, rep.ProtocolEpisodes, rep.RequiredTasks, rep.Overall.Attempted())
	}
	p := report.ProtocolResult(rep)
	want := fmt.Sprintf("final score (eval_init_ids, toy-final: 6 required tasks): %s over %d valid of 18 attempted episodes", stats.Rate(p.Successes, p.Valid), p.Valid)
	if p.Attempted() != 18 || !strings.Contains(merged.String(), want) {
		t.Errorf("merge output lacks %q (required tasks attempted %d)", want, p.Attempted())
	}
	for _, s := range []string{"suite", "toy", "vision"} {
		if !strings.Contains(merged.String(), s) {
			t.Errorf("merged table lacks the per-suite row %q", s)
		}
	}
}
