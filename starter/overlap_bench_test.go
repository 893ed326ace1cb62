package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/chart"
	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// BenchmarkOverlappedRounds is issue 26's measurement: `starter train` of
// the paced minimal harness (harnesses/minimal/paced.yaml: 49 validation
// and 35 collection episodes of at least 1 s a round, a trainer of at
// least 20 s) on one worker with 4 rollout slots, for each max staleness
// η, on a fresh stack each. Per run it reports the rounds per hour over
// the run's span (the first episode's start to the end of the last
// training or of the rounds' last episode, whichever is later; the final
// validation comes after it), the idle share of the 4 slots
// (1 − the RunEpisode activities' spans from Temporal's histories, clipped
// to the span, ÷ 4 × span; and the same by the episode programs' recorded
// spans), the round's episode work on the fleet, the idle share of the
// trainer (1 − Σ training spans ÷ span), the samples by staleness, and
// validation success against the samples trained on, round by round.
//
//	go test -run '^$' -bench OverlappedRounds -benchtime 1x -timeout 120m -v ./starter/
//
// Environment: ROUNDHOUSE_OVERLAP_ETAS (default 0,1,2; "none" runs
// nothing and only prints the tables and draws the chart of _OUT),
// ROUNDHOUSE_OVERLAP_SEEDS (collect.seed values, default 1; each run of
// another seed uses a variant of paced.yaml that sets it),
// ROUNDHOUSE_OVERLAP_ROUNDS (default 6), ROUNDHOUSE_OVERLAP_HOSTS (default
// 1: one worker of every role and 4 slots; 2 or 4: a control and training
// worker and that many rollout workers sharing the 4 slots, so the fleet
// can serve a validation's weights and a collection's at once),
// ROUNDHOUSE_OVERLAP_SERVERS (default 1: the model servers a rollout host
// keeps, model_server.per_host, each of memory_share 0.45, so 2 lets one
// host serve those two weights without switching; a variant of
// paced.yaml), ROUNDHOUSE_OVERLAP_OUT, a JSON
// file the results are added to (so seeds run by separate invocations
// make one table), ROUNDHOUSE_OVERLAP_CHART, an .svg or .png file for the
// chart of validation success against samples trained on, per η, the
// runs of the table pooled, ROUNDHOUSE_OVERLAP_EXPECT_FOR, a duration: a
// diagnosis that starts the Fleet workflow with the default policy but
// this fleet.Policy.ExpectFor (its runs are kept apart in the table and
// left out of the curves), and ROUNDHOUSE_OVERLAP_LOGS, a folder for each
// run's worker log and starter output. Run it with -v: go test cuts a
// benchmark's log short otherwise, and the per-run timelines are long.
func BenchmarkOverlappedRounds(b *testing.B) {
	itest.Slow(b)
	etas := envInts(b, "ROUNDHOUSE_OVERLAP_ETAS", "0,1,2")
	seeds := envInts(b, "ROUNDHOUSE_OVERLAP_SEEDS", "1")
	rounds := 6
	if rs := envInts(b, "ROUNDHOUSE_OVERLAP_ROUNDS", "6"); len(rs) > 0 {
		rounds = rs[0]
	}
	hosts := 1
	if hs := envInts(b, "ROUNDHOUSE_OVERLAP_HOSTS", "1"); len(hs) > 0 {
		hosts = hs[0]
	}
	if hosts < 1 || 4%hosts != 0 {
		b.Fatalf("ROUNDHOUSE_OVERLAP_HOSTS=%d: want 1, 2 or 4 (the hosts share 4 slots)", hosts)
	}
	servers := 1
	if ss := envInts(b, "ROUNDHOUSE_OVERLAP_SERVERS", "1"); len(ss) > 0 {
		servers = ss[0]
	}
	if servers < 1 || servers > 2 {
		b.Fatalf("ROUNDHOUSE_OVERLAP_SERVERS=%d: want 1 or 2 (two servers of memory_share 0.45 fit a host)", servers)
	}
	var all []overlapResult
	for _, seed := range seeds {
		for _, eta := range etas {
			b.Run(fmt.Sprintf("hosts=%d/servers=%d/seed=%d/eta=%d", hosts, servers, seed, eta), func(b *testing.B) {
				var r overlapResult
				for range b.N {
					r = runOverlapped(b, eta, seed, rounds, hosts, servers)
				}
				b.ReportMetric(r.RoundsPerHour, "rounds/h")
				b.ReportMetric(r.Wall, "wall-s")
				b.ReportMetric(100*r.SlotIdle, "slot-idle-%")
				b.ReportMetric(100*r.ProgramIdle, "program-idle-%")
				b.ReportMetric(100*r.TrainerIdle, "trainer-idle-%")
				b.ReportMetric(100*r.FinalRate(), "final-val-%")
				b.ReportMetric(float64(r.Samples), "samples")
				b.Logf("η=%d seed %d, %d rounds:\n%s", eta, seed, rounds, r.timeline)
				all = append(all, r)
			})
		}
	}
	if out := os.Getenv("ROUNDHOUSE_OVERLAP_OUT"); out != "" {
		all = mergeResults(b, out, all)
	}
	if len(all) == 0 {
		return
	}
	b.Logf("overlapped rounds, 4 slots, paced minimal harness (49 + 35 episodes of ≥ 1 s a round, trainer ≥ 20 s):\n%s\n%s", overlapTable(all), learningTable(all))
	if file := os.Getenv("ROUNDHOUSE_OVERLAP_CHART"); file != "" {
		var ss []chart.LearningSeries
		for _, c := range pool(all) {
			s := chart.LearningSeries{Name: fmt.Sprintf("η = %d, %s", c.eta, plural(c.runs, "run"))}
			for _, p := range c.points {
				s.Points = append(s.Points, chart.LearningPoint{Samples: p.samples, Successes: p.successes, Valid: p.valid})
			}
			ss = append(ss, s)
		}
		body, err := chart.Learning(file, fmt.Sprintf("validation success by samples trained (%d rounds)", all[0].Rounds), ss)
		if err == nil {
			err = os.WriteFile(file, body, 0o644)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// mergeResults adds rs to the results kept in the JSON file at path (a
// run of the same η, seed and rounds replaces the kept one), writes them
// back and returns them all: seeds measured by separate invocations make
// one table.
func mergeResults(b *testing.B, path string, rs []overlapResult) []overlapResult {
	b.Helper()
	var kept []overlapResult
	if body, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(body, &kept); err != nil {
			b.Fatalf("%s: %v", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		b.Fatal(err)
	}
	same := func(x, y overlapResult) bool {
		return x.Eta == y.Eta && x.Seed == y.Seed && x.Rounds == y.Rounds && x.Fleet == y.Fleet && x.hosts() == y.hosts() && x.servers() == y.servers()
	}
	for _, r := range rs {
		kept = slices.DeleteFunc(kept, func(k overlapResult) bool { return same(k, r) })
	}
	all := append(kept, rs...)
	slices.SortStableFunc(all, func(x, y overlapResult) int {
		return cmp.Or(x.Rounds-y.Rounds, x.hosts()-y.hosts(), x.servers()-y.servers(), x.Seed-y.Seed, x.Eta-y.Eta, strings.Compare(x.Fleet, y.Fleet))
	})
	body, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		b.Fatal(err)
	}
	return all
}

// overlapResult is one run of BenchmarkOverlappedRounds.
type overlapResult struct {
	Eta, Seed, Rounds int
	// Hosts is how many rollout hosts share the 4 slots (0 in results
	// from before it was a knob: 1).
	Hosts int `json:",omitempty"`
	// Servers is how many model servers a rollout host keeps (0 in
	// results from before it was a knob: 1).
	Servers int `json:",omitempty"`
	// Fleet is "" under the fleet's default policy, else what was changed
	// for a diagnosis (ROUNDHOUSE_OVERLAP_EXPECT_FOR).
	Fleet string `json:",omitempty"`
	// Wall is the run's span in seconds: the first episode's start to the
	// end of its rounds' work, the last training or the last of the
	// rounds' opening validations (which overlapped, may end after it).
	Wall          float64
	RoundsPerHour float64
	// Idle shares of the 4 rollout slots over Wall: SlotIdle counts a slot
	// busy while a RunEpisode activity holds it (Temporal's started event
	// to its closing one), ProgramIdle only while the episode program's
	// recorded span runs.
	SlotIdle, ProgramIdle float64
	// TrainerIdle is the trainer's idle share over Wall.
	TrainerIdle float64
	// FleetSeconds is a round's episode work on the fleet: the RunEpisode
	// spans of the run's rounds (final validation aside) ÷ 4 slots ÷ rounds.
	FleetSeconds float64
	// SlotIdleQueued is the share of SlotIdle during which an episode
	// waited in a queue (dispatch's and the fleet's), the rest had
	// nothing to run.
	SlotIdleQueued float64
	// Retried counts RunEpisode activities that took more than one attempt.
	Retried int
	// TrainSeconds is the mean training span (train_start → train_end).
	TrainSeconds float64
	Staleness    schemas.Staleness
	Samples      int // trained on, all rounds
	// Points are validation success against the samples trained on before
	// it: round k's opening validation (of the weights k-1 rounds left),
	// then the final validation.
	Points   []learnPoint
	timeline string
}

type learnPoint struct {
	Weights          string
	Samples          int // trained on before these weights
	Successes, Valid int
}

// hosts is Hosts, 1 for results from before it was kept.
func (r overlapResult) hosts() int { return max(r.Hosts, 1) }

// servers is Servers, 1 for results from before it was kept.
func (r overlapResult) servers() int { return max(r.Servers, 1) }

// FinalRate is the final validation's success rate (-1 without one).
func (r overlapResult) FinalRate() float64 {
	if len(r.Points) == 0 || r.Points[len(r.Points)-1].Valid == 0 {
		return -1
	}
	p := r.Points[len(r.Points)-1]
	return float64(p.Successes) / float64(p.Valid)
}

// runOverlapped trains rounds rounds of the paced harness with max
// staleness eta and collect.seed seed on a fresh stack and measures the
// run from its records.
func runOverlapped(b *testing.B, eta, seed, rounds, hosts, servers int) overlapResult {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	stack := itest.Start(b)
	bins := itest.Binaries(b)
	root := itest.Root(b)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	if d := os.Getenv("ROUNDHOUSE_OVERLAP_EXPECT_FOR"); d != "" {
		startFleet(ctx, b, stack, d)
	}
	workers := []string{"main"}
	if hosts == 1 {
		stack.StartWorker(b, bins, "main") // 4 slots; rollout, train and control roles
	} else {
		// A control and training host, and hosts rollout hosts sharing the
		// 4 slots: the fleet can serve two weights at once.
		workers = []string{"control"}
		stack.StartWorker(b, bins, "control", "--roles", "control,train", "--workdir", filepath.Join(stack.Dir, "work-control"))
		for i := 1; i <= hosts; i++ {
			name := fmt.Sprintf("rollout%d", i)
			stack.StartWorker(b, bins, name, "--roles", "rollout", "--slots", strconv.Itoa(4/hosts), "--workdir", filepath.Join(stack.Dir, "work-"+name))
			workers = append(workers, name)
		}
	}
	run := fmt.Sprintf("overlap-eta%d-seed%d", eta, seed)
	if out := os.Getenv("ROUNDHOUSE_OVERLAP_OUT"); out != "" {
		// The run's records, for the staleness audit of docs/operating.md
		// (versitygw keeps objects as files: <data>/<bucket>/<key>).
		// Registered after the stack's, so it runs before its folder goes.
		b.Cleanup(func() {
			src := filepath.Join(stack.Dir, "s3", stack.Endpoints.S3.Bucket, schemas.Layout{Run: run}.Prefix())
			dst := filepath.Join(filepath.Dir(out), "records", fmt.Sprintf("h%d", hosts), schemas.Layout{Run: run}.Prefix())
			os.RemoveAll(dst)
			if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
				b.Logf("keeping run %s's records: %v", run, err)
			}
		})
	}
	if dir := os.Getenv("ROUNDHOUSE_OVERLAP_LOGS"); dir != "" {
		// Registered after the stack's, so it runs before its folder goes.
		b.Cleanup(func() {
			for _, w := range workers {
				if body, err := os.ReadFile(filepath.Join(stack.Dir, "worker-"+w+".log")); err == nil {
					os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-h%d-%s.log", run, hosts, w)), body, 0o644)
				}
			}
		})
	}

	cfg := filepath.Join(root, "harnesses/minimal/paced.yaml")
	if seed != 1 || servers != 1 {
		// paced.yaml's collect.seed is its base's, 1: another seed is a
		// variant of it (collect.seed is no var), as are more servers.
		cfg = filepath.Join(b.TempDir(), fmt.Sprintf("paced-seed%d-servers%d.yaml", seed, servers))
		body := fmt.Sprintf("base: %s\nname: minimal-paced\ncollect:\n  seed: %d\n", filepath.Join(root, "harnesses/minimal/paced.yaml"), seed)
		if servers != 1 {
			body += fmt.Sprintf("model_server:\n  per_host: %d\n  memory_share: 0.45\n", servers)
		}
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.StartTimer()
	began := time.Now()
	out, err := stack.Starter(ctx, b, bins, "train", "--config", cfg, "--run", run, "--max-staleness", strconv.Itoa(eta),
		"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"), "--rounds", strconv.Itoa(rounds),
		"--var", "bin="+bins).CombinedOutput()
	ended := time.Now()
	b.StopTimer()
	if dir := os.Getenv("ROUNDHOUSE_OVERLAP_LOGS"); dir != "" {
		os.WriteFile(filepath.Join(dir, run+"-starter.log"), out, 0o644)
	}
	if err != nil {
		b.Fatalf("starter train: %v\n%s", err, out)
	}

	l := schemas.Layout{Run: run}
	var st schemas.State
	if err := store.GetJSON(ctx, stack.Store, l.State(), &st); err != nil || len(st.Summaries) != rounds {
		b.Fatalf("state: %d summaries, %v\n%s", len(st.Summaries), err, out)
	}
	r := overlapResult{Eta: eta, Seed: seed, Rounds: rounds, Hosts: hosts, Servers: servers, Staleness: schemas.Staleness{}}
	if d := os.Getenv("ROUNDHOUSE_OVERLAP_EXPECT_FOR"); d != "" {
		r.Fleet = "ExpectFor " + d
	}
	// Every episode of the rounds: each round's opening validation and its
	// collection (the final validation, round rounds+1, is outside the span).
	type span struct{ start, end int64 }
	var eps []span
	var tl strings.Builder
	phases := map[string]span{}
	for k := int32(1); k <= int32(rounds); k++ {
		for _, phase := range []string{schemas.PhaseVal, schemas.PhaseTrain} {
			rows, err := store.ReadTable(ctx, stack.Store, l.EpisodesDir(k, phase), func(e schemas.Episode) string { return e.EpisodeID })
			if err != nil {
				b.Fatalf("round %d %s episodes: %v", k, phase, err)
			}
			ph := span{math.MaxInt64, 0}
			for _, e := range rows {
				s := span{e.StartedAtMS, e.StartedAtMS + e.DurationMS}
				eps = append(eps, s)
				ph.start, ph.end = min(ph.start, s.start), max(ph.end, s.end)
			}
			if len(rows) > 0 {
				phases[fmt.Sprintf("%d/%s/%d", k, phase, len(rows))] = ph
			}
		}
	}
	if len(eps) == 0 {
		b.Fatal("no episodes stored")
	}
	c, err := connect.Temporal(ctx, stack.Endpoints, tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	acts, err := episodeSlotSpans(ctx, c, run)
	if err != nil {
		b.Fatal(err)
	}
	first := slices.MinFunc(eps, func(x, y span) int { return int(x.start - y.start) }).start
	for _, a := range acts {
		first = min(first, a.start)
	}
	var last, trained int64
	for _, e := range eps {
		last = max(last, e.end) // the rounds' validations and collections
	}
	samples := 0
	for _, s := range st.Summaries {
		if s.TrainEndMS == 0 || s.TrainStartMS == 0 {
			b.Fatalf("round %d has no training span (train_start_ms %d, train_end_ms %d)", s.Round, s.TrainStartMS, s.TrainEndMS)
		}
		last = max(last, s.TrainEndMS)
		trained += s.TrainEndMS - s.TrainStartMS
		for st, n := range s.Staleness {
			r.Staleness[st] += n
		}
		if s.Val == nil {
			b.Fatalf("round %d has no opening validation", s.Round)
		}
		r.Points = append(r.Points, learnPoint{Weights: s.WeightsID, Samples: samples, Successes: s.Val.Successes, Valid: s.Val.Valid})
		samples += s.Samples
		phases[fmt.Sprintf("%d/training", s.Round)] = span{s.TrainStartMS, s.TrainEndMS}
	}
	r.Samples = samples
	var final schemas.Report
	if err := store.GetJSON(ctx, stack.Store, l.Report(schemas.ValTag(int32(rounds)+1)), &final); err != nil {
		b.Fatalf("final validation report: %v", err)
	}
	r.Points = append(r.Points, learnPoint{Weights: st.WeightsID, Samples: samples, Successes: final.Overall.Successes, Valid: final.Overall.Valid})

	wall := last - first
	clip := func(s, e int64) int64 { return max(0, min(e, last)-max(s, first)) }
	var busy, held int64
	for _, e := range eps {
		busy += clip(e.start, e.end)
	}
	for _, a := range acts {
		held += clip(a.start, a.end)
		if a.attempt > 1 {
			r.Retried++
		}
	}
	const slots = 4
	r.Wall = float64(wall) / 1000
	r.RoundsPerHour = float64(rounds) * 3600 / r.Wall
	r.SlotIdle = 1 - float64(held)/float64(slots*wall)
	r.ProgramIdle = 1 - float64(busy)/float64(slots*wall)
	r.FleetSeconds = float64(held) / 1000 / slots / float64(rounds)
	waiting, _ := idleSplit(acts, slots, first, last)
	r.SlotIdleQueued = float64(waiting) / float64(slots*wall)
	r.TrainerIdle = 1 - float64(trained)/float64(wall)
	r.TrainSeconds = float64(trained) / 1000 / float64(rounds)

	// When each phase ran, from the first episode's start: where the idle
	// time is.
	keys := make([]string, 0, len(phases))
	for k := range phases {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int { return int(phases[x].start - phases[y].start) })
	for _, k := range keys {
		p := phases[k]
		fmt.Fprintf(&tl, "  %-18s %6.1f → %6.1f s\n", k, float64(p.start-first)/1000, float64(p.end-first)/1000)
	}
	// Per Episodes workflow: when its episodes were queued, first started
	// and last ended (a wait between the first two is the fleet's).
	byWF := map[string][3]int64{}
	for _, a := range acts {
		w, ok := byWF[a.workflow]
		if !ok {
			w = [3]int64{a.scheduled, a.start, a.end}
		}
		byWF[a.workflow] = [3]int64{min(w[0], a.scheduled), min(w[1], a.start), max(w[2], a.end)}
	}
	wfs := slices.Collect(maps.Keys(byWF))
	slices.SortFunc(wfs, func(x, y string) int { return cmp.Compare(byWF[x][0], byWF[y][0]) })
	for _, id := range wfs {
		w := byWF[id]
		fmt.Fprintf(&tl, "  %-36s queued %6.1f, started %6.1f, ended %6.1f s\n", strings.TrimPrefix(id, "train-"+run+"-"),
			float64(w[0]-first)/1000, float64(w[1]-first)/1000, float64(w[2]-first)/1000)
	}
	for _, s := range st.Summaries {
		fmt.Fprintf(&tl, "  round %d: collection %.1f → %.1f s, ", s.Round, float64(s.CollectStartMS-first)/1000, float64(s.CollectEndMS-first)/1000)
		fmt.Fprintf(&tl, "collected on %s, trained from %s, %d samples, staleness %v, pool from %s\n",
			s.CollectedOn, s.WeightsID, s.Samples, s.Staleness, s.PoolFrom)
	}
	fmt.Fprintf(&tl, "  %d RunEpisode activities, %d of them retried; slots idle %.1f %%, %.1f %% of the span with an episode waiting in a queue\n",
		len(acts), r.Retried, 100*r.SlotIdle, 100*r.SlotIdleQueued)
	fmt.Fprintf(&tl, "  starter train: %.1f s to the first episode, %.1f s from the last training's end to its exit (the final validation)\n",
		float64(first-began.UnixMilli())/1000, float64(ended.UnixMilli()-last)/1000)
	r.timeline = tl.String()
	return r
}

// startFleet starts the Fleet workflow before any worker does, with the
// default policy but ExpectFor d: a diagnosis of how long the fleet
// holds a server for weights announced to come again costs (the workers
// then only signal it). Nothing of the code under measurement changes.
func startFleet(ctx context.Context, b *testing.B, stack itest.Stack, d string) {
	b.Helper()
	expect, err := time.ParseDuration(d)
	if err != nil || expect <= 0 {
		b.Fatalf("ROUNDHOUSE_OVERLAP_EXPECT_FOR=%q: want a duration > 0, like 1ms", d)
	}
	c, err := connect.Temporal(ctx, stack.Endpoints, tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p := fleet.DefaultPolicy
	p.ExpectFor = expect
	if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: api.FleetID, TaskQueue: api.ControlQueue}, api.FleetWorkflow, api.FleetInput{Policy: p}); err != nil {
		b.Fatalf("start the fleet with ExpectFor %v: %v", expect, err)
	}
}

// overlapTable is the runs' table, one row each.
func overlapTable(rs []overlapResult) string {
	var b strings.Builder
	fmt.Fprintln(&b, "| η | seed | rollout hosts | model servers a host | fleet policy | rounds | span | rounds/h | slots idle (activities; of it, episodes queued) | slots idle (programs) | trainer idle | episode work a round | training (mean) | staleness | samples | final validation |")
	fmt.Fprintln(&b, "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")
	for _, r := range rs {
		p := r.Points[len(r.Points)-1]
		policy := cmp.Or(r.Fleet, "default")
		fmt.Fprintf(&b, "| %d | %d | %d × %d slots | %d | %s | %d | %.1f s | %.0f | %.1f %% (%.1f %%) | %.1f %% | %.1f %% | %.1f s | %.1f s | %v | %d | %d/%d %s |\n",
			r.Eta, r.Seed, r.hosts(), 4/r.hosts(), r.servers(), policy, r.Rounds, r.Wall, r.RoundsPerHour, 100*r.SlotIdle, 100*r.SlotIdleQueued, 100*r.ProgramIdle, 100*r.TrainerIdle, r.FleetSeconds, r.TrainSeconds,
			r.Staleness, r.Samples, p.Successes, p.Valid, stats.Rate(p.Successes, p.Valid))
	}
	return b.String()
}

// curve is one η's validations, its runs pooled: successes and valid
// episodes added up, samples trained on averaged.
type curve struct {
	eta, runs int
	points    []pooledPoint
}

type pooledPoint struct {
	samples          float64
	successes, valid int
}

// pool pools the runs by η, in η order; runs of another length than the
// first, and diagnoses under another fleet policy, are left out.
func pool(rs []overlapResult) []curve {
	byEta := map[int]*curve{}
	for _, r := range rs {
		if r.Rounds != rs[0].Rounds || r.Fleet != "" {
			continue
		}
		c := byEta[r.Eta]
		if c == nil {
			c = &curve{eta: r.Eta, points: make([]pooledPoint, len(r.Points))}
			byEta[r.Eta] = c
		}
		c.runs++
		for i, p := range r.Points {
			c.points[i].samples += float64(p.Samples)
			c.points[i].successes += p.Successes
			c.points[i].valid += p.Valid
		}
	}
	var out []curve
	for _, c := range byEta {
		for i := range c.points {
			c.points[i].samples /= float64(c.runs)
		}
		out = append(out, *c)
	}
	slices.SortFunc(out, func(x, y curve) int { return x.eta - y.eta })
	return out
}

// learningTable is validation success against samples trained on, per η
// and validation, the seeds pooled.
func learningTable(rs []overlapResult) string {
	var b strings.Builder
	fmt.Fprintln(&b, "| η | validation | runs | samples trained on (mean) | success [95 %] |")
	fmt.Fprintln(&b, "|---:|---|---:|---:|---|")
	for _, c := range pool(rs) {
		for i, p := range c.points {
			name := fmt.Sprintf("before round %d", i+1)
			if i == len(c.points)-1 {
				name = "final"
			}
			fmt.Fprintf(&b, "| %d | %s | %d | %.0f | %d/%d %s |\n", c.eta, name, c.runs, p.samples, p.successes, p.valid, stats.Rate(p.successes, p.valid))
		}
	}
	return b.String()
}

// envInts reads a comma-separated list of integers from the environment
// variable name, def when it is unset.
func envInts(b *testing.B, name, def string) []int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	var out []int
	if v == "none" { // ROUNDHOUSE_OVERLAP_ETAS=none: only the tables and chart of _OUT
		return out
	}
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			b.Fatalf("%s=%q: want integers ≥ 0, comma-separated", name, v)
		}
		out = append(out, n)
	}
	return out
}

// plural is "1 run", "3 runs".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
