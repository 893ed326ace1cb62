package standin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/outcome"
	"github.com/roundhouse-rl/roundhouse/internal/rl"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// TestStandinRounds runs full rounds of standin.yaml (harness.yaml's wiring
// with the stand-ins) on a real Temporal dev server and real S3, through the
// worker and starter binaries:
//
//   - "hang": task 1's episodes hang after their first model call and are
//     killed with their process group at the episode timeout (invalid,
//     failure class timeout); task 0's episodes run against an external VLA
//     the test started (--var vla_endpoint=…), and their rows, calls and
//     artifacts are checked against the files rpent wrote.
//   - "service": SAM3 fails to start (its checkpoint is missing): every
//     episode is invalid with an infrastructure cause naming the service
//     after collect.infra_retries retries, and the round still completes.
//   - "code": standin_code.yaml, RPent's code mode: the calls are recorded
//     as in tool mode, the rows and code_policy/ artifacts agree with the
//     files, and the round trains on the recorded calls.
func TestStandinRounds(t *testing.T) {
	stack := itest.Start(t)
	bins := itest.Binaries(t)
	sbins := standinBinaries(t)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	config := filepath.Join(root, "harnesses/rpent_libero/standin.yaml")
	work := filepath.Join(stack.Dir, "work")
	startStandinWorker(t, stack, bins, work)

	// Fix round 1's pool to both tasks, so group 0 is task 0 and group 1 is
	// task 1 (groups go round the sorted pool), without a validation pass.
	pool := filepath.Join(stack.Dir, "pool.json")
	rep := schemas.Report{Tag: "fixed", Tasks: []schemas.TaskResult{
		{Task: 0, Episodes: 2, Valid: 2, Successes: 1, SuccessRate: 0.5},
		{Task: 1, Episodes: 2, Valid: 2, Successes: 1, SuccessRate: 0.5}}}
	b, _ := json.Marshal(rep)
	if err := os.WriteFile(pool, b, 0o644); err != nil {
		t.Fatal(err)
	}
	trainWith := func(t *testing.T, config, run string, vars ...string) string {
		args := []string{"train", "--config", config, "--run", run, "--weights", filepath.Join(root, "harnesses/minimal/weights/w0"),
			"--rounds", "1", "--groups", "2", "--attempts", "2", "--pool-report", pool, "--pool-report-any-weights",
			"--var", "bin=" + sbins, "--var", "toy_bin=" + bins}
		for _, v := range vars {
			args = append(args, "--var", v)
		}
		out, err := stack.Starter(ctx, t, bins, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("starter %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	train := func(t *testing.T, run string, vars ...string) string { return trainWith(t, config, run, vars...) }
	episodes := func(t *testing.T, run string) []schemas.Episode {
		l := schemas.Layout{Run: run}
		objs, err := stack.Store.List(ctx, l.EpisodesDir(1, schemas.PhaseTrain))
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != 1 || !strings.HasSuffix(objs[0].Key, store.PartFile) {
			t.Errorf("episodes partition not compacted at round end: %v", objs)
		}
		rows, err := store.ReadTable(ctx, stack.Store, l.EpisodesDir(1, schemas.PhaseTrain), func(e schemas.Episode) string { return e.EpisodeID })
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 4 {
			t.Fatalf("%d episode rows, want 2 groups × 2 attempts", len(rows))
		}
		sort.Slice(rows, func(i, j int) bool { return rows[i].EpisodeID < rows[j].EpisodeID })
		return rows
	}
	summary := func(t *testing.T, run string) schemas.RoundSummary {
		b, err := stack.Store.Get(ctx, schemas.Layout{Run: run}.Summary(1))
		if err != nil {
			t.Fatal(err)
		}
		var s schemas.RoundSummary
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	t.Run("hang", func(t *testing.T) {
		itest.Slow(t) // waits out an episode timeout
		_, lines := startService(t, nil, "--component", "vla", "--embodiment", "libero", "--host", "127.0.0.1", "--port", "0")
		vlaURL, seen := readyURL(t, lines, 10*time.Second)
		if vlaURL == "" {
			t.Fatalf("external VLA not ready: %q", seen)
		}
		const run = "rpent-hang"
		started := time.Now()
		train(t, run, "hang_tasks=1", "vla_endpoint="+vlaURL)
		took := time.Since(started)
		t.Logf("round with hanging episodes took %s", took.Round(time.Second))
		// One 8s try per hung episode plus overheads: far below the
		// activity's StartToClose (timeout + model start + 5m), which a
		// hang not killed at the episode timeout would run into.
		if took > 2*time.Minute {
			t.Errorf("the round took %s: an episode was not ended at its timeout", took)
		}
		l := schemas.Layout{Run: run}
		calls, err := store.ReadTable(ctx, stack.Store, l.CallsDir(1, schemas.PhaseTrain), func(c schemas.Call) string { return c.EpisodeID })
		if err != nil {
			t.Fatal(err)
		}
		callsOf := map[string][]schemas.Call{}
		for _, c := range calls {
			callsOf[c.EpisodeID] = append(callsOf[c.EpisodeID], c)
		}
		vlaCalls := 0
		for _, e := range episodes(t, run) {
			switch e.Task {
			case 1: // hung after its first call, model server and services healthy
				if !e.Valid || e.FailureClass != schemas.FailureTask || e.Retry != 0 || !strings.Contains(e.Termination, "ran out of time") {
					t.Errorf("%s: hung episode stored as %+v, want a task failure on its first try", e.EpisodeID, e)
				}
				if e.NumCalls != 1 || len(callsOf[e.EpisodeID]) != 1 {
					t.Errorf("%s: the call made before the hang: row %d, table %d", e.EpisodeID, e.NumCalls, len(callsOf[e.EpisodeID]))
				}
				for try := 0; try <= 0; try++ {
					dir := filepath.Join(work, "episodes", run, fmt.Sprintf("%s-try%d", e.EpisodeID, try))
					pids := readPIDs(t, dir)
					if len(pids) != 2 { // rpent and the env server it spawned (VLA external, SAM3 shared)
						t.Errorf("%s try %d: pids %v", e.EpisodeID, try, pids)
					}
					if live := waitDead(pids, 2*time.Second); len(live) > 0 {
						t.Errorf("%s try %d: %v outlived the timeout: the process group was not killed", e.EpisodeID, try, live)
					}
				}
			case 0:
				tr, runLog := checkCompleted(t, ctx, stack.Store, e, callsOf[e.EpisodeID], false)
				vlaCalls += tr.Stats.VLACalls
				if !strings.Contains(runLog, "vla: using "+vlaURL) {
					t.Errorf("%s: rpent did not use the external VLA %s:\n%s", e.EpisodeID, vlaURL, runLog)
				}
			default:
				t.Errorf("episode of task %d: the pool was tasks 0 and 1", e.Task)
			}
		}
		// Task 0's steps ran on the external VLA; none was started on the host.
		var stats struct {
			Calls int `json:"calls"`
		}
		vla := &Client{Name: "vla", URL: vlaURL, HTTP: &http.Client{Timeout: 5 * time.Second}}
		if err := vla.Call(ctx, "stats", nil, &stats); err != nil {
			t.Fatal(err)
		}
		if stats.Calls != vlaCalls {
			t.Errorf("the external VLA answered %d calls, the transcripts made %d", stats.Calls, vlaCalls)
		}
		s := summary(t, run)
		if s.Episodes != 4 || s.Invalid != 0 || s.Valid != 4 {
			t.Errorf("summary %+v", s.BatchSummary)
		}
		t.Logf("summary: %d valid, %d successes, %d samples, weights %s → %s", s.Valid, s.Successes, s.Samples, s.WeightsID, s.NewWeightsID)
	})

	t.Run("service", func(t *testing.T) {
		const run = "rpent-svc"
		out := train(t, run, "sam3_checkpoint=/nonexistent/sam3.pt")
		for _, e := range episodes(t, run) {
			if e.Valid || e.FailureClass != schemas.FailureInfra || e.Retry != 1 || e.NumCalls != 0 ||
				!strings.Contains(e.Termination, "service sam3 failed to start") || !strings.Contains(e.Termination, "rpent_libero_standin") {
				t.Errorf("%s: %+v, want invalid with the sam3 start failure after 1 retry", e.EpisodeID, e)
			}
		}
		s := summary(t, run)
		if s.Episodes != 4 || s.Valid != 0 || s.InvalidByCause[schemas.FailureInfra] != 4 || s.Samples != 0 || s.NewWeightsID != "w0" {
			t.Errorf("summary %+v, weights out %s", s.BatchSummary, s.NewWeightsID)
		}
		if !strings.Contains(out, "final weights") {
			t.Errorf("the round did not complete:\n%s", out)
		}
		// The cause is in the service's log, which the termination points to.
		logs, _ := filepath.Glob(filepath.Join(work, "logs", "sam3-*.log"))
		found := false
		for _, p := range logs {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), "/nonexistent/sam3.pt") {
				found = true
			}
		}
		if !found {
			t.Errorf("no sam3 log in %v names the missing checkpoint", logs)
		}
	})

	t.Run("code", func(t *testing.T) {
		codeConfig := filepath.Join(root, "harnesses/rpent_libero/standin_code.yaml")
		h, err := harness.Load(codeConfig, nil)
		if err != nil {
			t.Fatal(err)
		}
		seed, predicted := codeSeed(t, h, []int32{0, 1})
		const run = "rpent-code"
		trainWith(t, codeConfig, run, fmt.Sprintf("model_seed=%d", seed))
		l := schemas.Layout{Run: run}
		calls, err := store.ReadTable(ctx, stack.Store, l.CallsDir(1, schemas.PhaseTrain), func(c schemas.Call) string { return c.EpisodeID })
		if err != nil {
			t.Fatal(err)
		}
		callsOf := map[string][]schemas.Call{}
		for _, c := range calls {
			callsOf[c.EpisodeID] = append(callsOf[c.EpisodeID], c)
		}
		for _, e := range episodes(t, run) {
			tr, _ := checkCompleted(t, ctx, stack.Store, e, callsOf[e.EpisodeID], true)
			if tr.PolicyMode != "code" || tr.Stats.CodeSnippets != tr.Stats.ModelCalls {
				t.Errorf("%s: mode %q, %d snippets for %d model calls", e.EpisodeID, tr.PolicyMode, tr.Stats.CodeSnippets, tr.Stats.ModelCalls)
			}
			if want, ok := predicted[e.EpisodeID+"-try0"]; !ok || e.Success != want {
				t.Errorf("%s: success %v, but the same episode in process (model_seed %d) gave %v", e.EpisodeID, e.Success, seed, want)
			}
		}
		s := summary(t, run)
		if s.Episodes != 4 || s.Valid != 4 || s.GroupsWithSignal == 0 || s.Samples == 0 || s.NewWeightsID != "r1" {
			t.Fatalf("summary %+v, weights out %s: want 4 valid episodes, a group with signal, samples and weights r1", s.BatchSummary, s.NewWeightsID)
		}
		// The batch's samples are recorded calls of the round's episodes.
		samples, err := store.ReadParquet[schemas.Sample](ctx, stack.Store, l.Samples(1))
		if err != nil {
			t.Fatal(err)
		}
		if len(samples) != int(s.Samples) {
			t.Errorf("%d sample rows, the summary says %d", len(samples), s.Samples)
		}
		for _, sm := range samples {
			if int(sm.CallIndex) >= len(callsOf[sm.EpisodeID]) || sm.Advantage == 0 {
				t.Errorf("sample %s call %d (advantage %v) is not a recorded call with signal", sm.EpisodeID, sm.CallIndex, sm.Advantage)
			}
		}
		for _, key := range []string{l.Batch(1), l.Weights("r1") + "manifest.json"} {
			if ok, err := stack.Store.Exists(ctx, key); err != nil || !ok {
				t.Errorf("%s missing (%v): the round did not train", key, err)
			}
		}
		t.Logf("model_seed %d: %d successes, %d groups with signal, %d samples, weights %s → %s", seed, s.Successes, s.GroupsWithSignal, s.Samples, s.WeightsID, s.NewWeightsID)
	})
}

// checkCompleted checks a completed episode's row, calls and artifacts
// against the files rpent wrote, in tool or code mode.
func checkCompleted(t *testing.T, ctx context.Context, s *store.Store, e schemas.Episode, calls []schemas.Call, code bool) (Transcript, string) {
	t.Helper()
	if !e.Valid || e.Retry != 0 || e.Termination == "" {
		t.Errorf("%s: %+v, want a valid first try", e.EpisodeID, e)
	}
	if int(e.NumCalls) != len(calls) || len(calls) == 0 {
		t.Errorf("%s: row says %d calls, table has %d", e.EpisodeID, e.NumCalls, len(calls))
	}
	sort.Slice(calls, func(i, j int) bool { return calls[i].CallIndex < calls[j].CallIndex })
	for i, c := range calls {
		if !c.Trainable || len(c.CompletionTokenIDs) == 0 || len(c.CompletionTokenIDs) != len(c.CompletionLogprobs) || len(c.PromptTokenIDs) == 0 {
			t.Errorf("%s call %d lacks token data", e.EpisodeID, i)
		}
		if !code && (!strings.Contains(c.Request, `"tool_choice":"auto"`) || !strings.Contains(c.Request, `"execute_skill"`)) {
			t.Errorf("%s call %d: request is not rpent's chat with tools: %.200s", e.EpisodeID, i, c.Request)
		}
		if code && (strings.Contains(c.Request, `"tools"`) || !strings.Contains(c.Request, "robo.execute_skill(instruction)")) {
			t.Errorf("%s call %d: request is not rpent's code-mode chat (no tools, the robo API in the prompt): %.200s", e.EpisodeID, i, c.Request)
		}
		if strings.Contains(c.Request, "data:image/") || !strings.Contains(c.Request, "blob://sha256/") {
			t.Errorf("%s call %d: the camera image was not replaced by a blob reference", e.EpisodeID, i)
		}
	}
	prefix := strings.TrimPrefix(e.Artifacts, "s3://"+s.Bucket+"/")
	objs, err := s.List(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	local := t.TempDir() // the artifacts, to score again
	snippets := 0
	for _, o := range objs {
		base := strings.TrimPrefix(o.Key, prefix)
		b, err := s.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(local, base)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(local, base), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(base, "code_policy/snippet_") && strings.HasSuffix(base, ".json") {
			snippets++
		}
		if strings.HasPrefix(base, "transcript_") {
			base = "transcript"
		}
		names[base] = o.Key
	}
	for _, want := range []string{"transcript", "states.json", "run.log", "episode.log"} {
		if names[want] == "" {
			t.Errorf("%s: artifact %s missing (have %v)", e.EpisodeID, want, names)
		}
	}
	if names["pids.txt"] != "" {
		t.Errorf("%s: pids.txt uploaded though artifacts do not name it", e.EpisodeID)
	}
	b, err := s.Get(ctx, names["states.json"])
	if err != nil {
		t.Fatal(err)
	}
	var states struct {
		Steps []Step `json:"steps"`
	}
	if err := json.Unmarshal(b, &states); err != nil {
		t.Fatal(err)
	}
	if e.Success != terminated(states.Steps) || (e.Reward == 1) != e.Success {
		t.Errorf("%s: success %v reward %v, but states.json terminated=%v", e.EpisodeID, e.Success, e.Reward, terminated(states.Steps))
	}
	b, err = s.Get(ctx, names["transcript"])
	if err != nil {
		t.Fatal(err)
	}
	var tr Transcript
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	if tr.Suite != e.Suite || e.Suite == "" {
		t.Errorf("%s: rpent ran suite %q, the episode row says %q", e.EpisodeID, tr.Suite, e.Suite)
	}
	if tr.Stats.ModelCalls != len(calls) || tr.Error != nil {
		t.Errorf("%s: transcript says %d model calls (error %v), the proxy recorded %d", e.EpisodeID, tr.Stats.ModelCalls, tr.Error, len(calls))
	}
	if code && (snippets == 0 || snippets != tr.Stats.CodeSnippets || names[fmt.Sprintf("code_policy/snippet_%03d.py", snippets)] == "") {
		t.Errorf("%s: %d code_policy/ records uploaded, the transcript counts %d snippets (have %v)", e.EpisodeID, snippets, tr.Stats.CodeSnippets, names)
	}
	// The row is what the adapter makes of the uploaded files: the reason
	// included.
	if res := outcome.Decide(schemas.OutcomeSpec{Adapter: "rpent_libero"}, local, outcome.Exit{}); res.Valid != e.Valid ||
		res.Success != e.Success || res.Reason != e.Reason || res.FailureClass != e.FailureClass {
		t.Errorf("%s: row valid %v success %v class %q reason %q; the artifacts give %+v", e.EpisodeID, e.Valid, e.Success, e.FailureClass, e.Reason, res)
	}
	runLog, err := s.Get(ctx, names["run.log"])
	if err != nil {
		t.Fatal(err)
	}
	return tr, string(runLog)
}

// codeSeed finds the smallest model_seed under which round 1 of h (its
// groups over pool as the Train workflow plans them, 2 attempts each) has
// a group whose attempts end differently, by playing those episodes in
// process with h's episode flags against the run's starting weights. The
// stand-in is reproducible given the seed, so under it the round must
// train. It returns the seed and each episode's success, keyed by its
// output dir's name (<episode id>-try0).
func codeSeed(t *testing.T, h schemas.Harness, pool []int32) (int64, map[string]bool) {
	t.Helper()
	model, _ := toyModel(t)
	ids, err := harness.IDs(h, "train_init_ids")
	if err != nil {
		t.Fatal(err)
	}
	groups := rl.PlanGroups(pool, ids, 2, h.Collect.Seed, 1)
	server := func(s *Service) string {
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		return srv.URL
	}
	vla, sam3 := server(&Service{Component: "vla"}), server(&Service{Component: "sam3"})
	for seed := int64(1); seed <= 20; seed++ {
		k := knobs
		k.ModelSeed = &seed
		success, signal := map[string]bool{}, false
		for g, grp := range groups {
			var task schemas.Task
			for _, tk := range h.Tasks {
				if tk.ID == grp.Task {
					task = tk
				}
			}
			var got [2]bool
			for a := range got {
				name := schemas.EpisodeID(1, schemas.PhaseTrain, int32(g), int32(a)) + "-try0"
				args, err := harness.FillArgs(h.Episode.Command[1:], map[string]string{"task": fmt.Sprint(task.ID), "task_number": fmt.Sprint(*task.Number),
					"suite": task.Suite, "seed": fmt.Sprint(grp.InitID), "base_url": model.URL + "/v1", "output_dir": filepath.Join(t.TempDir(), name),
					"served_name": h.Model.ServedName, "vla_url": vla, "sam3_url": sam3})
				if err != nil {
					t.Fatal(err)
				}
				cfg, err := ParseArgs(args, io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				cfg.EnvEndpoint = server(&Service{Component: "env", Env: NewEnv(cfg.Suite, cfg.Task, cfg.Seed, cfg.MaxEpisodeSteps)})
				if code := Run(context.Background(), cfg, k, io.Discard); code != ExitOK {
					t.Fatalf("%s in process: exit %d", name, code)
				}
				got[a] = outcome.Decide(schemas.OutcomeSpec{Adapter: "rpent_libero"}, cfg.OutputDir, outcome.Exit{}).Success
				success[name] = got[a]
			}
			signal = signal || got[0] != got[1]
		}
		if signal {
			return seed, success
		}
	}
	t.Fatal("no model_seed in 1..20 gives round 1 a group whose attempts end differently")
	return 0, nil
}

// startStandinWorker runs the worker binary (all roles, one host) and stops
// it with SIGTERM at the end, so it stops the services it started.
func startStandinWorker(t *testing.T, stack itest.Stack, bins, work string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bins, "worker"), "--workdir", work, "--slots", "4")
	cmd.Dir = itest.Root(t)
	cmd.Env = append(os.Environ(), stack.Env()...)
	logf, err := os.Create(filepath.Join(stack.Dir, "worker.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		// STANDIN_KEEP_LOGS=DIR keeps the stack's logs, S3 files and the
		// worker's episode dirs for a post-mortem of a flaky run.
		if d := os.Getenv("STANDIN_KEEP_LOGS"); d != "" {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_ = exec.CommandContext(cctx, "cp", "-r", stack.Dir, d).Run()
			cancel()
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("worker log tail:\n%s", b)
		}
	})
}
