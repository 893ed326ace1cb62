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
	"sync"
	"testing"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"
	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/rig"
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
			cfg := fleetConfig{Hosts: 1, Slots: 4, Rounds: 2, Groups: 8, Sweeps: []int{7}, Parallel: 1, Together: mode != "sequential"}
			if mode == "together-shared" {
				// Two model servers per host, weights swapped in place.
				cfg.Harness = "harnesses/minimal/shared.yaml"
			}
			benchSharedFleet(b, mode, cfg)
		})
	}
}

// BenchmarkSharedFleetHosts is issue 15's 3-host measurement: a 2-round
// training run (--groups 8: weights w0, r1, r2) and two sweeps, over 7
// weights ids each under two s3 prefixes (fleet-ckpts/c1…c7 and
// fleet-ckpts2/d1…d7, copies of w0), on a rig (internal/testkit/rig, root) of
// three rollout hosts × 4 slots, each its own network namespace and
// worker, plus a training and control host. `together` starts all three at
// the same moment; `sequential` runs the training, then sweep 1, then
// sweep 2, each after the last has closed.
//
// Besides BenchmarkSharedFleet's figures it reports pairs: the distinct
// (host, weights) a model server was started for. distinct (17 here) is
// the fewest starts that can serve every weights; pairs is the fewest for
// where the weights were actually served, since a host that serves
// weights another host serves too loads them once more. Run it with the
// stand-in's start delay, as docs/performance.md's table of a shared fleet was:
//
//	MINIMAL_MODEL_START_DELAY=20 go test -run '^$' -bench SharedFleetHosts -benchtime 1x -timeout 120m -v ./workflows/
func BenchmarkSharedFleetHosts(b *testing.B) {
	for _, mode := range []string{"together", "sequential"} {
		b.Run(mode, func(b *testing.B) {
			itest.Slow(b)
			benchSharedFleet(b, mode, fleetConfig{Hosts: 3, Slots: 4, Rounds: 2, Groups: 8, Sweeps: []int{7, 7}, Parallel: 1,
				Together: mode == "together", Rig: true})
		})
	}
}

// benchSharedFleet runs cfg b.N times and reports the last run.
func benchSharedFleet(b *testing.B, mode string, cfg fleetConfig) {
	var r fleetResult
	for range b.N {
		r = runSharedFleet(b, cfg)
	}
	b.ReportMetric(float64(r.Starts), "starts")
	b.ReportMetric(float64(r.Reloads), "in-place")
	b.ReportMetric(float64(r.Distinct), "distinct")
	b.ReportMetric(float64(r.Pairs), "pairs")
	b.ReportMetric(r.LoadTime.Seconds(), "load-s")
	b.ReportMetric(r.Train.Seconds(), "train-s")
	for k, s := range r.Sweeps {
		name := "sweep-s"
		if len(r.Sweeps) > 1 {
			name = fmt.Sprintf("sweep%d-s", k+1)
		}
		b.ReportMetric(s.Wall.Seconds(), name)
	}
	b.ReportMetric(r.Wall.Seconds(), "wall-s")
	delay := os.Getenv("MINIMAL_MODEL_START_DELAY")
	if delay == "" {
		delay = "0"
	}
	var sweeps, hosts []string
	for k, s := range r.Sweeps {
		sweeps = append(sweeps, fmt.Sprintf("sweep %d of %d weights (--parallel %d) %v (%d episodes; started at +%v)",
			k+1, cfg.Sweeps[k], cfg.Parallel, s.Wall.Round(100*time.Millisecond), s.Episodes, s.At.Round(100*time.Millisecond)))
	}
	for _, h := range r.Hosts {
		hosts = append(hosts, fmt.Sprintf("%s %d starts of %d weights (%v)", h.Name, h.Starts, h.Pairs, h.LoadTime.Round(100*time.Millisecond)))
	}
	where := "worker processes"
	if cfg.Rig {
		where = "rig hosts"
	}
	b.Logf("%s, %d rollout host(s) × %d slots (%s), model start delay %ss: %d model-server starts (%d in place, %d failed) for %d distinct weights, %d distinct (host, weights) (%v starting them: %s); "+
		"training %v (%d episodes; started at +%v), %s, all %v",
		mode, cfg.Hosts, cfg.Slots, where, delay, r.Starts, r.Reloads, r.Failed, r.Distinct, r.Pairs, r.LoadTime.Round(100*time.Millisecond), strings.Join(hosts, ", "),
		r.Train.Round(100*time.Millisecond), r.TrainEpisodes, r.TrainAt.Round(100*time.Millisecond),
		strings.Join(sweeps, ", "), r.Wall.Round(100*time.Millisecond))
}

// fleetConfig is one shared-fleet scenario.
type fleetConfig struct {
	Hosts, Slots   int   // rollout hosts, and slots of each
	Rounds, Groups int   // of the training run
	Sweeps         []int // per sweep, the weights ids it evaluates
	Parallel       int   // each sweep's --parallel
	// Together starts the training and the sweeps at once; otherwise each
	// starts when the one before has closed.
	Together bool
	// Rig runs every worker on a host of its own (internal/testkit/rig), rather
	// than as processes of this namespace.
	Rig     bool
	Harness string // of all runs; "" is harnesses/minimal/harness.yaml
}

type fleetResult struct {
	Starts   int           // model-server starts that became ready, all hosts, in-place reloads included
	Reloads  int           // of them, weights swapped into a running server
	Failed   int           // model-server starts that did not
	Distinct int           // distinct weights the hosts served: the fewest starts possible
	Pairs    int           // distinct (host, weights) served: the fewest starts for where they were served
	LoadTime time.Duration // fetching weights and starting model servers, summed
	// Workflow start → close of the training, and the first start command
	// → the last close.
	Train, Wall time.Duration
	// When the training started, after the first start command: what
	// `starter train` took to start it.
	TrainAt       time.Duration
	TrainEpisodes int
	Sweeps        []sweepResult
	Hosts         []hostResult
}

// sweepResult is one sweep's workflow: start → close, when it started
// after the first start command, and the episodes of its evaluations.
type sweepResult struct {
	Wall, At time.Duration
	Episodes int
}

// hostResult is one rollout host's model-server starts.
type hostResult struct {
	Name     string
	Starts   int           // that became ready
	Pairs    int           // distinct weights started
	LoadTime time.Duration // fetching and starting, failed starts included
}

// fleetHost is a rollout host of a scenario: its worker's log, its work
// directory, and its Prometheus endpoint with a client that reaches it.
type fleetHost struct {
	Name, Log, WorkDir, Metrics string
	Client                      *http.Client
}

// fleetProcesses starts a stack, a control+train worker and cfg.Hosts
// rollout workers, all processes of this machine's namespace.
func fleetProcesses(ctx context.Context, b *testing.B, cfg fleetConfig, bins string, env []string) (itest.Stack, []fleetHost) {
	b.Helper()
	stack := itest.Start(b)
	stack.StartWorker(b, bins, "control", "--roles", "control,train", "--workdir", filepath.Join(stack.Dir, "work-control"))
	logs := []string{filepath.Join(stack.Dir, "worker-control.log")}
	var hosts []fleetHost
	for i := 1; i <= cfg.Hosts; i++ {
		name := fmt.Sprintf("rollout%d", i)
		// Each host's own counters, from its Prometheus exporter.
		port := itest.Port(b)
		h := fleetHost{Name: name, Log: filepath.Join(stack.Dir, "worker-"+name+".log"), WorkDir: filepath.Join(stack.Dir, "work-"+name),
			Metrics: "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics", Client: http.DefaultClient}
		stack.StartWorkerEnv(b, bins, name, append([]string{"OTEL_METRICS_EXPORTER=prometheus",
			"OTEL_EXPORTER_PROMETHEUS_HOST=127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT=" + strconv.Itoa(port)}, env...),
			"--roles", "rollout", "--slots", strconv.Itoa(cfg.Slots), "--workdir", h.WorkDir)
		hosts = append(hosts, h)
		logs = append(logs, h.Log)
	}
	for _, l := range logs {
		waitForLine(ctx, b, l, "worker running", 2*time.Minute)
	}
	return stack, hosts
}

// fleetRig builds a rig of a training and control host, t1, and cfg.Hosts
// rollout hosts, r1…; rig.New returns once every worker is live.
func fleetRig(b *testing.B, cfg fleetConfig, bins string, env []string) (itest.Stack, []fleetHost) {
	b.Helper()
	// Every host has its own loopback, so one port does for all.
	const port = "9464"
	specs := []rig.HostSpec{{Name: "t1", Roles: "train,control"}}
	for i := 1; i <= cfg.Hosts; i++ {
		specs = append(specs, rig.HostSpec{Name: fmt.Sprintf("r%d", i), Roles: "rollout", Slots: cfg.Slots,
			Env: append([]string{"OTEL_METRICS_EXPORTER=prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST=127.0.0.1",
				"OTEL_EXPORTER_PROMETHEUS_PORT=" + port}, env...)})
	}
	rg := rig.New(b, rig.Config{Hosts: specs, Bins: bins})
	var hosts []fleetHost
	for _, h := range rg.Hosts[1:] {
		hosts = append(hosts, fleetHost{Name: h.Name, Log: h.Log, WorkDir: h.WorkDir,
			Metrics: "http://127.0.0.1:" + port + "/metrics", Client: h.HTTPClient()})
	}
	return rg.Stack(), hosts
}

// runSharedFleet brings up the workers (fleetProcesses or fleetRig),
// publishes each sweep's weights ids under a prefix of its own, creates
// the sweeps, then runs the training and the sweeps and measures.
func runSharedFleet(b *testing.B, cfg fleetConfig) fleetResult {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	bins := itest.Binaries(b)
	root := itest.Root(b)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Minute)
	defer cancel()

	env := []string{}
	for _, v := range []string{"MINIMAL_MODEL_START_DELAY", "MINIMAL_MODEL_RELOAD_DELAY"} {
		if d := os.Getenv(v); d != "" {
			env = append(env, v+"="+d)
		}
	}
	var stack itest.Stack
	var hosts []fleetHost
	if cfg.Rig {
		stack, hosts = fleetRig(b, cfg, bins, env)
	} else {
		stack, hosts = fleetProcesses(ctx, b, cfg, bins, env)
	}

	// The sweeps' weights: distinct ids of the same files, c1… for the
	// first sweep, d1… for the second.
	files, err := weights.Dir(filepath.Join(root, "harnesses/minimal/weights/w0"))
	if err != nil {
		b.Fatal(err)
	}
	config := filepath.Join(root, cmp.Or(cfg.Harness, "harnesses/minimal/harness.yaml"))
	names := make([]string, len(cfg.Sweeps))
	for k, n := range cfg.Sweeps {
		prefix := "fleet-ckpts/"
		names[k] = "fleet"
		if k > 0 {
			names[k], prefix = fmt.Sprintf("fleet%d", k+1), fmt.Sprintf("fleet-ckpts%d/", k+1)
		}
		for j := 1; j <= n; j++ {
			id := fmt.Sprintf("%c%d", 'c'+k, j)
			if _, _, err := weights.Publish(ctx, stack.Store, prefix+id+"/", files, schemas.WeightsManifest{WeightsID: id}); err != nil {
				b.Fatal(err)
			}
		}
		// A schedule that is not due during the benchmark (1 January,
		// 03:00): the trigger below starts the sweep.
		run(b, stack.Starter(ctx, b, bins, "sweep", "create", "--name", names[k], "--cron", "0 3 1 1 *",
			"--config", config, "--var", "bin="+bins, "--weights-prefix", "s3://"+stack.Store.Bucket+"/"+prefix,
			"--parallel", strconv.Itoa(cfg.Parallel)))
	}
	if b.Failed() {
		b.FailNow()
	}

	c, err := connect.Temporal(ctx, stack.Endpoints, tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()

	// train and sweep report with Errorf, so they may run in goroutines.
	const trainRun = "fleet-train"
	train := func() {
		run(b, stack.Starter(ctx, b, bins, "train", "--config", config, "--run", trainRun,
			"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"),
			"--rounds", strconv.Itoa(cfg.Rounds), "--groups", strconv.Itoa(cfg.Groups),
			"--var", "bin="+bins, "--detach"))
	}
	sweepIDs := make([]string, len(cfg.Sweeps))
	sweep := func(k int) {
		out := run(b, stack.Starter(ctx, b, bins, "sweep", "trigger", "--name", names[k]))
		m := regexp.MustCompile(`started: workflow (\S+)`).FindStringSubmatch(out)
		if m == nil {
			b.Errorf("sweep trigger %s started no workflow:\n%s", names[k], out)
			return
		}
		sweepIDs[k] = m[1]
	}
	var tres api.TrainResult
	waitTrain := func() {
		if err := c.GetWorkflow(ctx, api.WorkflowID(trainRun), "").Get(ctx, &tres); err != nil {
			b.Fatalf("training: %v", err)
		}
	}
	sres := make([]api.SweepResult, len(cfg.Sweeps))
	waitSweep := func(k int) {
		if err := c.GetWorkflow(ctx, sweepIDs[k], "").Get(ctx, &sres[k]); err != nil {
			b.Fatalf("sweep %s: %v", names[k], err)
		}
	}
	b.StartTimer()
	begin := time.Now()
	if cfg.Together {
		var wg sync.WaitGroup
		wg.Go(train)
		for k := range cfg.Sweeps {
			wg.Go(func() { sweep(k) })
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		waitTrain()
		for k := range cfg.Sweeps {
			waitSweep(k)
		}
	} else {
		train()
		if b.Failed() {
			b.FailNow()
		}
		waitTrain()
		for k := range cfg.Sweeps {
			sweep(k)
			if b.Failed() {
				b.FailNow()
			}
			waitSweep(k)
		}
	}
	b.StopTimer()
	if len(tres.Summaries) != cfg.Rounds {
		b.Fatalf("training %d rounds, want %d", len(tres.Summaries), cfg.Rounds)
	}
	for k, n := range cfg.Sweeps {
		if len(sres[k].Evaluated) != n || len(sres[k].Failed) > 0 {
			b.Fatalf("sweep %s evaluated %v (want %d), failed %v", names[k], sres[k].Evaluated, n, sres[k].Failed)
		}
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
	r.Train = span(api.WorkflowID(trainRun), &r.TrainAt)
	for k := range cfg.Sweeps {
		var s sweepResult
		s.Wall = span(sweepIDs[k], &s.At)
		s.Episodes = sweepEpisodes(ctx, b, stack.Store, sres[k])
		r.Sweeps = append(r.Sweeps, s)
	}
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

	// Starts: the hosts' "service ready" lines for the model server (one
	// per start that became ready; a failed start logs none), checked
	// against each host's roundhouse.model.loads counter.
	distinct := map[string]bool{}
	for _, h := range hosts {
		reloaded := reloadedWeights(b, h.Log)
		hr := hostResult{Name: h.Name, Starts: len(linesWith(b, h.Log, "service ready", "service=model")) + len(reloaded)}
		r.Reloads += len(reloaded)
		m := scrape(ctx, b, h.Client, h.Metrics)
		// A host that started no model server has no such sample.
		if loads := m[`roundhouse_model_loads_total{ok="true"}`]; int(loads) != hr.Starts {
			b.Errorf("%s: %d 'service ready' or 'reloaded in place' lines for the model server, but its counter says %v loads (%s)", h.Name, hr.Starts, loads, h.Metrics)
		}
		r.Failed += int(m[`roundhouse_model_loads_total{ok="false"}`])
		secs := m[`roundhouse_model_load_time_seconds_sum{ok="true"}`] + m[`roundhouse_model_load_time_seconds_sum{ok="false"}`]
		hr.LoadTime = time.Duration(secs * float64(time.Second))
		// A model server's log is named by its key (harness, run, weights,
		// ETag) and replaced when the same key starts again: one per weights.
		// Weights swapped in place start no log: they are named by the
		// host's reload lines.
		served, _ := filepath.Glob(filepath.Join(h.WorkDir, "logs", "model*.log")) // model-…, model#1-…
		here := map[string]bool{}
		for _, s := range served {
			here[filepath.Base(s)] = true
		}
	swapped:
		for _, w := range reloaded {
			for name := range here {
				if strings.Contains(name, strings.ReplaceAll(w, "/", "-")) {
					continue swapped
				}
			}
			here["reloaded "+w] = true
		}
		hr.Pairs = len(here)
		for name := range here {
			distinct[name] = true
		}
		r.Starts += hr.Starts
		r.Pairs += hr.Pairs
		r.LoadTime += hr.LoadTime
		r.Hosts = append(r.Hosts, hr)
		if testing.Verbose() {
			timeline(b, h.Name, h.Log)
		}
	}
	r.Distinct = len(distinct)
	if testing.Verbose() {
		// What the fleet says of each host (loads, loading and idle time),
		// where the code has it.
		out, err := stack.Starter(ctx, b, bins, "status").CombinedOutput()
		b.Logf("starter status (error: %v):\n%s", err, out)
	}
	return r
}

// timeline logs, under -v, when a host opened and shut weights queues
// and when its model server became ready: where the starts went.
func timeline(b *testing.B, name, path string) {
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
	b.Logf("%s (%s):\n%s", name, path, strings.Join(lines, "\n"))
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

// reloadedWeights returns the weights keys a host's log says it swapped
// into a running model server, one per reload.
func reloadedWeights(b *testing.B, path string) []string {
	b.Helper()
	var out []string
	for _, line := range linesWith(b, path, "model server reloaded in place") {
		for _, f := range strings.Fields(line) {
			if w, ok := strings.CutPrefix(f, "weights="); ok {
				out = append(out, w)
			}
		}
	}
	return out
}

// linesWith returns the lines of the file at path that hold every one of
// want.
func linesWith(b *testing.B, path string, want ...string) []string {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		for _, w := range want {
			if !strings.Contains(sc.Text(), w) {
				continue next
			}
		}
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// scrape reads a Prometheus endpoint's samples, keyed by name and labels
// without the exporter's own (otel_scope_*); samples that differ only in
// those are added up.
func scrape(ctx context.Context, b *testing.B, client *http.Client, url string) map[string]float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := client.Do(req)
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
