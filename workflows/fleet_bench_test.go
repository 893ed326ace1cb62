package workflows_test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"
	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/itest"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// BenchmarkSharedFleet is issue 15's scenario: on one rollout host with 4
// slots (one model-server slot), a 2-round training run of the minimal
// harness (--groups 8: weights w0, r1, r2) and a sweep over 7 other weights
// ids under an s3 prefix (copies of w0: the host keys its model server by
// weights id, so each is a load) share the fleet. `together` starts both at
// the same moment; `sequential` runs the training, then the sweep — the
// baseline, where the host loads each of the 10 weights once.
//
// It reports model-server starts (starts; the minimum is the distinct
// weights served, distinct), the time the host spent starting them
// (load-s), the training's and the sweep's workflow wall times (train-s,
// sweep-s) and start to last close (wall-s). The stand-in model server is
// ready at once unless MINIMAL_MODEL_START_DELAY (seconds) is set in the
// environment of `go test`, which the rollout workers pass on:
//
//	go test -run '^$' -bench SharedFleet -benchtime 1x ./workflows/
//	MINIMAL_MODEL_START_DELAY=2 go test -run '^$' -bench SharedFleet -benchtime 1x -timeout 60m ./workflows/
func BenchmarkSharedFleet(b *testing.B) {
	for _, mode := range []string{"together", "sequential", "together-shared"} {
		b.Run(mode, func(b *testing.B) {
			itest.Slow(b)
			cfg := fleetConfig{Hosts: 1, Slots: 4, Rounds: 2, Groups: 8, Sweep: 7, Parallel: 1, Together: mode != "sequential"}
			if mode == "together-shared" {
				// Two model servers per host, weights swapped in place.
				cfg.Harness = "harnesses/minimal/shared.yaml"
			}
			var r fleetResult
			for range b.N {
				r = runSharedFleet(b, cfg)
			}
			b.ReportMetric(float64(r.Starts), "starts")
			b.ReportMetric(float64(r.Reloads), "in-place")
			b.ReportMetric(float64(r.Distinct), "distinct")
			b.ReportMetric(r.LoadTime.Seconds(), "load-s")
			b.ReportMetric(r.Train.Seconds(), "train-s")
			b.ReportMetric(r.Sweep.Seconds(), "sweep-s")
			b.ReportMetric(r.Wall.Seconds(), "wall-s")
			delay := os.Getenv("MINIMAL_MODEL_START_DELAY")
			if delay == "" {
				delay = "0"
			}
			b.Logf("%s, %d rollout host(s) × %d slots, model start delay %ss: %d model-server starts (%d in place, %d failed) for %d distinct weights (%v starting them); "+
				"training %v (%d episodes; started at +%v), sweep of %d weights (--parallel %d) %v (%d episodes; started at +%v), all %v",
				mode, cfg.Hosts, cfg.Slots, delay, r.Starts, r.Reloads, r.Failed, r.Distinct, r.LoadTime.Round(100*time.Millisecond),
				r.Train.Round(100*time.Millisecond), r.TrainEpisodes, r.TrainAt.Round(100*time.Millisecond),
				cfg.Sweep, cfg.Parallel, r.Sweep.Round(100*time.Millisecond), r.SweepEpisodes, r.SweepAt.Round(100*time.Millisecond),
				r.Wall.Round(100*time.Millisecond))
		})
	}
}

// fleetConfig is one shared-fleet scenario.
type fleetConfig struct {
	Hosts, Slots   int // rollout worker processes, and slots of each
	Rounds, Groups int // of the training run
	Sweep          int // weights ids the sweep evaluates
	Parallel       int // the sweep's --parallel
	Together       bool
	Harness        string // of both; "" is harnesses/minimal/harness.yaml
}

type fleetResult struct {
	Starts   int           // model-server starts that became ready, all hosts, in-place reloads included
	Reloads  int           // of them, weights swapped into a running server
	Failed   int           // model-server starts that did not
	Distinct int           // distinct weights the hosts served: the fewest starts possible
	LoadTime time.Duration // fetching weights and starting model servers, summed
	// Workflow start → close of the training and of the sweep, and the
	// first start command → the last close.
	Train, Sweep, Wall time.Duration
	// When each workflow started, after the first start command: what
	// `starter train` and `starter sweep trigger` took to start it.
	TrainAt, SweepAt             time.Duration
	TrainEpisodes, SweepEpisodes int
}

// runSharedFleet starts a stack, a control+train worker and cfg.Hosts
// rollout workers, publishes cfg.Sweep weights ids under a prefix, creates
// a sweep over it, then runs the training and the sweep and measures.
func runSharedFleet(b *testing.B, cfg fleetConfig) fleetResult {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	stack := itest.Start(b)
	bins := itest.Binaries(b)
	root := itest.Root(b)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()

	env := []string{}
	for _, v := range []string{"MINIMAL_MODEL_START_DELAY", "MINIMAL_MODEL_RELOAD_DELAY"} {
		if d := os.Getenv(v); d != "" {
			env = append(env, v+"="+d)
		}
	}
	stack.StartWorker(b, bins, "control", "--roles", "control,train", "--workdir", filepath.Join(stack.Dir, "work-control"))
	logs := []string{filepath.Join(stack.Dir, "worker-control.log")}
	var metrics, workdirs []string
	for i := 1; i <= cfg.Hosts; i++ {
		name := fmt.Sprintf("rollout%d", i)
		// Each host's own counters, from its Prometheus exporter.
		port := itest.Port(b)
		metrics = append(metrics, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics")
		workdirs = append(workdirs, filepath.Join(stack.Dir, "work-"+name))
		stack.StartWorkerEnv(b, bins, name, append([]string{"OTEL_METRICS_EXPORTER=prometheus",
			"OTEL_EXPORTER_PROMETHEUS_HOST=127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT=" + strconv.Itoa(port)}, env...),
			"--roles", "rollout", "--slots", strconv.Itoa(cfg.Slots), "--workdir", workdirs[i-1])
		logs = append(logs, filepath.Join(stack.Dir, "worker-"+name+".log"))
	}
	for _, l := range logs {
		waitForLine(ctx, b, l, "worker running", 2*time.Minute)
	}

	// The sweep's weights: distinct ids of the same files.
	files, err := weights.Dir(filepath.Join(root, "harnesses/minimal/weights/w0"))
	if err != nil {
		b.Fatal(err)
	}
	const prefix = "fleet-ckpts/"
	for k := 1; k <= cfg.Sweep; k++ {
		id := fmt.Sprintf("c%d", k)
		if _, _, err := weights.Publish(ctx, stack.Store, prefix+id+"/", files, schemas.WeightsManifest{WeightsID: id}); err != nil {
			b.Fatal(err)
		}
	}
	config := filepath.Join(root, cmp.Or(cfg.Harness, "harnesses/minimal/harness.yaml"))
	// A schedule that is not due during the benchmark (1 January, 03:00):
	// the trigger below starts the sweep.
	run(b, stack.Starter(ctx, b, bins, "sweep", "create", "--name", "fleet", "--cron", "0 3 1 1 *",
		"--config", config, "--var", "bin="+bins, "--weights-prefix", "s3://"+stack.Store.Bucket+"/"+prefix,
		"--parallel", strconv.Itoa(cfg.Parallel)))

	c, err := connect.Temporal(ctx, stack.Endpoints, tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()

	const trainRun = "fleet-train"
	train := func() {
		run(b, stack.Starter(ctx, b, bins, "train", "--config", config, "--run", trainRun,
			"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"),
			"--rounds", strconv.Itoa(cfg.Rounds), "--groups", strconv.Itoa(cfg.Groups),
			"--var", "bin="+bins, "--detach"))
	}
	var sweepID string
	sweep := func() {
		out := run(b, stack.Starter(ctx, b, bins, "sweep", "trigger", "--name", "fleet"))
		m := regexp.MustCompile(`started: workflow (\S+)`).FindStringSubmatch(out)
		if m == nil {
			b.Fatalf("sweep trigger started no workflow:\n%s", out)
		}
		sweepID = m[1]
	}
	var tres api.TrainResult
	waitTrain := func() {
		if err := c.GetWorkflow(ctx, api.WorkflowID(trainRun), "").Get(ctx, &tres); err != nil {
			b.Fatalf("training: %v", err)
		}
	}
	b.StartTimer()
	begin := time.Now()
	if cfg.Together {
		done := make(chan struct{})
		go func() { defer close(done); train() }() // run reports with Errorf: safe here
		sweep()
		<-done
		if b.Failed() {
			b.FailNow()
		}
		waitTrain()
	} else {
		train()
		waitTrain()
		sweep()
	}
	var sres api.SweepResult
	if err := c.GetWorkflow(ctx, sweepID, "").Get(ctx, &sres); err != nil {
		b.Fatalf("sweep: %v", err)
	}
	b.StopTimer()
	if len(tres.Summaries) != cfg.Rounds || len(sres.Evaluated) != cfg.Sweep || len(sres.Failed) > 0 {
		b.Fatalf("training %d rounds (want %d), sweep evaluated %v, failed %v", len(tres.Summaries), cfg.Rounds, sres.Evaluated, sres.Failed)
	}

	var r fleetResult
	var last time.Time
	// A workflow's span runs from its first run's start (Train continues as
	// new after each round) to its last run's close.
	span := func(id string, at *time.Duration) time.Duration {
		describe := func(runID string) *workflowpb.WorkflowExecutionInfo {
			d, err := c.DescribeWorkflowExecution(ctx, id, runID)
			if err != nil {
				b.Fatal(err)
			}
			return d.GetWorkflowExecutionInfo()
		}
		info := describe("")
		if info.GetCloseTime() == nil {
			b.Fatalf("%s has not closed", id)
		}
		closed := info.GetCloseTime().AsTime()
		if closed.After(last) {
			last = closed
		}
		first := info
		if f := info.GetFirstRunId(); f != "" && f != info.GetExecution().GetRunId() {
			first = describe(f)
		}
		started := first.GetStartTime().AsTime()
		*at = started.Sub(begin)
		return closed.Sub(started)
	}
	r.Train, r.Sweep = span(api.WorkflowID(trainRun), &r.TrainAt), span(sweepID, &r.SweepAt)
	r.Wall = last.Sub(begin)
	for _, s := range tres.Summaries {
		r.TrainEpisodes += s.Episodes
		if s.Val != nil {
			r.TrainEpisodes += s.Val.Episodes
		}
	}
	if tres.FinalVal != nil {
		r.TrainEpisodes += tres.FinalVal.Episodes
	}
	r.SweepEpisodes = sweepEpisodes(ctx, b, stack.Store, sres)

	// Starts: the hosts' "service ready" lines for the model server (one
	// per start that became ready; a failed start logs none), checked
	// against each host's roundhouse.model.loads counter.
	for i, l := range logs[1:] {
		reloads := countLines(b, l, "model server reloaded in place")
		n := countLines(b, l, "service ready", "service=model") + reloads
		r.Starts += n
		r.Reloads += reloads
		m := scrape(ctx, b, metrics[i])
		loads, ok := m[`roundhouse_model_loads_total{ok="true"}`]
		if !ok || int(loads) != n {
			b.Errorf("%s: %d 'service ready' lines for the model server, but its counter says %v loads (%s)", filepath.Base(l), n, loads, metrics[i])
		}
		r.Failed += int(m[`roundhouse_model_loads_total{ok="false"}`])
		secs := m[`roundhouse_model_load_time_seconds_sum{ok="true"}`] + m[`roundhouse_model_load_time_seconds_sum{ok="false"}`]
		r.LoadTime += time.Duration(secs * float64(time.Second))
		// A model server's log is named by its key (harness, run, weights,
		// ETag) and replaced when the same key starts again: one per weights.
		served, _ := filepath.Glob(filepath.Join(workdirs[i], "logs", "model-*.log"))
		r.Distinct += len(served)
		if testing.Verbose() {
			timeline(b, l)
		}
	}
	return r
}

// timeline logs, under -v, when a host opened and shut weights queues
// and when its model server became ready: where the starts went.
func timeline(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		t := sc.Text()
		if strings.Contains(t, "serving weights") || strings.Contains(t, "weights queue") || strings.Contains(t, "reloaded in place") || (strings.Contains(t, "service ready") && strings.Contains(t, "service=model")) {
			lines = append(lines, t)
		}
	}
	b.Logf("%s:\n%s", filepath.Base(path), strings.Join(lines, "\n"))
}

// run runs a starter command and returns its output; a failure fails b.
func run(b *testing.B, cmd interface {
	CombinedOutput() ([]byte, error)
	String() string
}) string {
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Errorf("%s: %v\n%s", cmd, err, out)
	}
	return string(out)
}

// sweepEpisodes adds up the episodes of the sweep's evaluations from its
// leaderboard.
func sweepEpisodes(ctx context.Context, b *testing.B, st *store.Store, res api.SweepResult) int {
	b.Helper()
	var lb schemas.Leaderboard
	if err := store.GetJSON(ctx, st, res.Leaderboard, &lb); err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, e := range lb.Entries {
		n += e.Episodes
	}
	return n
}

// waitForLine waits up to d for a line holding want in the file at path.
func waitForLine(ctx context.Context, b *testing.B, path, want string, d time.Duration) {
	b.Helper()
	deadline := time.Now().Add(d)
	for {
		if body, err := os.ReadFile(path); err == nil && strings.Contains(string(body), want) {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			body, _ := os.ReadFile(path)
			b.Fatalf("no %q in %s after %v:\n%s", want, path, d, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// countLines counts the lines of the file at path that hold every one of want.
func countLines(b *testing.B, path string, want ...string) int {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		for _, w := range want {
			if !strings.Contains(sc.Text(), w) {
				continue next
			}
		}
		n++
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}

// scrape reads a Prometheus endpoint's samples, keyed by name and labels
// without the exporter's own (otel_scope_*); samples that differ only in
// those are added up.
func scrape(ctx context.Context, b *testing.B, url string) map[string]float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatalf("metrics %s: %v", url, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[promKey(line[:i])] += v
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// promKey drops the otel_scope_* labels from a sample's name{labels}.
func promKey(s string) string {
	open := strings.IndexByte(s, '{')
	if open < 0 {
		return s
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimSuffix(s[open+1:], "}"), ",") {
		if l != "" && !strings.HasPrefix(l, "otel_scope_") {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return s[:open]
	}
	return s[:open] + "{" + strings.Join(keep, ",") + "}"
}
