package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"gopkg.in/yaml.v3"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/rig"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

func TestMain(m *testing.M) {
	code := m.Run()
	itest.Cleanup()
	os.Exit(code)
}

// The drill's run: 2 rounds of 4 groups × 4 attempts on two of the minimal
// harness's tasks, validated on 2 init states (4 cells) before each round
// and after the last: 16 + 16 collection and 12 validation episodes.
const (
	rounds, groups, attempts = 2, 4, 4
	heartbeat                = 5 * time.Second // short, so a cut-off host's episodes move on soon
	episodeDelay             = "2s"            // every episode lasts long enough to be hit mid-run
	zombieDelay              = "25s"           // the zombie host's episodes outlast the heartbeat timeout
	runLimit                 = 6 * time.Minute // one run; the trainer's heartbeat timeout (2 min) fits
)

// drill is a rig with the minimal harness's binaries and a run config.
type drill struct {
	t      *testing.T
	r      *rig.Rig
	bins   string
	config string
	root   string
}

func newDrill(t *testing.T) *drill { return newDrillOn(t, false) }

// newDrillOn is newDrill, on the production-shaped Temporal with cluster.
func newDrillOn(t *testing.T, cluster bool) *drill {
	bins := itest.Binaries(t)
	hosts := rig.DefaultHosts()
	for i := range hosts {
		if hosts[i].Roles == "rollout" {
			hosts[i].Slots = 2 // 2 cores here: 6 episodes at once is plenty
			hosts[i].Env = []string{"MINIMAL_EPISODE_DELAY=" + episodeDelay}
		}
	}
	hosts[0].DiskBytes = 256 << 20 // r1's work directory can be filled
	r := rig.New(t, rig.Config{Hosts: hosts, Bins: bins, Cluster: cluster})
	root := itest.Root(t)
	base := filepath.Join(root, "harnesses/minimal/harness.yaml")
	// The toy trains in seconds, too soon to be hit mid-update: the
	// trainer's command is the harness's behind a shell that first holds
	// for $DRILL_TRAIN_DELAY seconds (0 unless the training host's worker
	// has it, see slowTrainer). A command list is replaced whole by base:
	// merging, so it is read from the harness file rather than copied.
	raw, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	var hf struct {
		Trainer struct {
			Command []string `yaml:"command"`
		} `yaml:"trainer"`
	}
	if err := yaml.Unmarshal(raw, &hf); err != nil || len(hf.Trainer.Command) == 0 {
		t.Fatalf("%s: trainer.command: %v", base, err)
	}
	cmd, err := json.Marshal(append([]string{"/bin/sh", "-c",
		`echo "drill: trainer held ${DRILL_TRAIN_DELAY:-0}s"; sleep "${DRILL_TRAIN_DELAY:-0}"; exec "$@"`, "drill-trainer"},
		hf.Trainer.Command...))
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "drill.yaml")
	variant := fmt.Sprintf("base: %s\nname: minimal-drill\ntasks:\n  - {id: 0, name: cube_in_drawer, suite: toy}\n  - {id: 2, name: bowl_on_plate, suite: toy}\nsplits: {val_init_ids: \"45-46\"}\ntrainer:\n  command: %s\n",
		base, cmd)
	if err := os.WriteFile(config, []byte(variant), 0o644); err != nil {
		t.Fatal(err)
	}
	return &drill{t: t, r: r, bins: bins, config: config, root: root}
}

// fault is one drill entry. Once wait finds its moment in the running
// run, apply injects it; after hold, heal undoes it (nil: nothing to
// undo). A fault that needs more (the zombie) sets inject instead, which
// does all of it. Both return when the fault was injected and when it was
// healed; an error means it could not be injected.
type fault struct {
	name   string
	wait   func(ctx context.Context, d *drill, run string) error
	apply  func(ctx context.Context, d *drill, run string) error
	hold   time.Duration
	heal   func(ctx context.Context, d *drill, run string) error
	inject func(ctx context.Context, d *drill, run string) (at, healed time.Time, err error)
	// args are starter train's flags beyond the drill's run (e.g. an
	// overlapped run's --max-staleness).
	args []string
}

func (f fault) run(ctx context.Context, d *drill, run string) (at, healed time.Time, err error) {
	if f.inject != nil {
		return f.inject(ctx, d, run)
	}
	if err := f.wait(ctx, d, run); err != nil {
		return at, at, err
	}
	at = time.Now()
	if err := f.apply(ctx, d, run); err != nil {
		return at, at, err
	}
	if f.heal != nil {
		time.Sleep(f.hold)
		err = f.heal(ctx, d, run)
	}
	return at, time.Now(), err
}

// staged waits for n staged tries of the run's collection.
func staged(n int) func(ctx context.Context, d *drill, run string) error {
	return func(ctx context.Context, d *drill, run string) error {
		return waitStaged(ctx, d, run, schemas.PhaseTrain, n)
	}
}

// on applies op to the rig's host name, as an apply or a heal.
func on(name string, op func(*rig.Host, context.Context) error) func(ctx context.Context, d *drill, run string) error {
	return func(ctx context.Context, d *drill, _ string) error { return op(d.r.Host(name), ctx) }
}

// row is one line of the drill's table.
type row struct {
	fault     string
	completed string // "yes", or how the run ended
	res       Result
	checkErr  error
	progress  time.Duration // fault to the first episode try started after it and stored; <0: none seen
	held      time.Duration // fault to its heal
	notRun    string
}

func (w row) cells() []string {
	if w.notRun != "" {
		return []string{w.fault, "not run: " + w.notRun, "", "", "", "", "", "", ""}
	}
	counts, lost, late := "", "", ""
	if w.checkErr != nil {
		counts = "check failed: " + firstLine(w.checkErr.Error())
	} else {
		counts = fmt.Sprintf("%d/%d/%d/%d", w.res.Planned, w.res.Stored, w.res.Lost, w.res.Duplicated)
		lost = strconv.Itoa(w.res.CallsLost)
		late = fmt.Sprintf("%d / %d", w.res.LateWrites, w.res.Corrupt)
		if w.res.Staged > 0 {
			late += fmt.Sprintf(" (%d left staged)", w.res.Staged)
		}
	}
	prog := "none seen"
	if w.progress >= 0 {
		prog = w.progress.Round(100 * time.Millisecond).String()
	}
	problems := ""
	if w.checkErr == nil && len(w.res.Problems) > 0 {
		problems = fmt.Sprintf("%d: %s", len(w.res.Problems), w.res.Problems[0])
	}
	held := "—" // a one-off fault: nothing to hold or heal
	if w.held >= 100*time.Millisecond {
		held = w.held.Round(100 * time.Millisecond).String()
	}
	stale := "—"
	if w.checkErr == nil {
		stale = fmt.Sprintf("%d / %d", w.res.Stale, w.res.BeyondBound)
	}
	return []string{w.fault, w.completed, counts, lost, late, held, prog, stale, problems}
}

// cause is a workflow's error without the SDK's wrappers' ids, which say
// nothing to a reader of the table: "round 1 batch: …: <the cause>".
func cause(err error) string {
	if err == nil {
		return "no error"
	}
	s := sdkWrapper.ReplaceAllString(err.Error(), "")
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return firstLine(s)
}

var sdkWrapper = regexp.MustCompile(`(workflow execution|activity) error \([^)]*\): `)

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

func table(rows []row) string {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "fault\trun completed\tepisodes planned/stored/lost/duplicated\trecords lost\twrites refused: late / corrupt\tfault held\ttime to progress\tstale samples / beyond bound\tproblems")
	for _, w := range rows {
		fmt.Fprintln(tw, strings.Join(w.cells(), "\t"))
	}
	tw.Flush()
	return b.String()
}

// runFault starts a run, injects f while it runs, waits for the run to end
// (runLimit at most; a run still going then is terminated), and checks it.
func (d *drill) runFault(f fault) row {
	t := d.t
	w := row{fault: f.name, progress: -1}
	run := "drill-" + f.name
	ctx, cancel := context.WithTimeout(context.Background(), runLimit+2*time.Minute)
	defer cancel()
	args := append([]string{"train", "--config", d.config, "--run", run,
		"--weights", filepath.Join(d.root, "harnesses/minimal/weights/w0"), "--rounds", strconv.Itoa(rounds),
		"--groups", strconv.Itoa(groups), "--attempts", strconv.Itoa(attempts), "--heartbeat-timeout", heartbeat.String(),
		"--var", "bin=" + d.bins, "--replace", "--detach"}, f.args...)
	out, err := d.r.Stack().Starter(ctx, t, d.bins, args...).CombinedOutput()
	if err != nil {
		w.notRun = fmt.Sprintf("starter train: %v: %s", err, firstLine(string(out)))
		return w
	}
	prog := watchProgress(ctx, d, run)
	at, healed, ferr := f.run(ctx, d, run)
	if ferr != nil {
		t.Logf("%s: inject: %v", f.name, ferr)
	}
	w.completed = d.waitRun(ctx, run)
	prog.stop()
	if ferr != nil && at.IsZero() {
		w.notRun = "injecting failed: " + firstLine(ferr.Error()) + "; run " + w.completed
		return w
	}
	if ferr != nil {
		w.completed += " (fault: " + firstLine(ferr.Error()) + ")"
	}
	w.progress = prog.after(at)
	w.held = healed.Sub(at)
	cctx, ccancel := context.WithTimeout(context.Background(), checkTimeout)
	defer ccancel()
	w.res, w.checkErr = Check(cctx, d.r.Client, d.r.Store, run)
	for _, p := range w.res.Problems {
		t.Logf("%s: %s", f.name, p)
	}
	return w
}

// waitRun waits for the run's workflow to close and says how it ended;
// past runLimit it terminates it, so the next fault starts clean.
func (d *drill) waitRun(ctx context.Context, run string) string {
	id := api.WorkflowID(run)
	deadline := time.Now().Add(runLimit)
	for time.Now().Before(deadline) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		desc, err := d.r.Client.DescribeWorkflowExecution(dctx, id, "")
		cancel()
		if err == nil {
			switch st := desc.GetWorkflowExecutionInfo().GetStatus(); st {
			case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
				return "yes"
			default:
				gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := d.r.Client.GetWorkflow(gctx, id, "").Get(gctx, nil)
				cancel()
				return fmt.Sprintf("no: %s: %s", strings.ToLower(strings.TrimPrefix(st.String(), "WORKFLOW_EXECUTION_STATUS_")), cause(err))
			}
		}
		select {
		case <-ctx.Done():
			return "no: " + ctx.Err().Error()
		case <-time.After(time.Second):
		}
	}
	tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = d.r.Client.TerminateWorkflow(tctx, id, "", "drill: still running after "+runLimit.String())
	return "no: still running after " + runLimit.String() + " (terminated)"
}

// progress watches, every 500 ms, the episode rows the run stages: each
// new one is read once for when its try started. Progress after a fault is
// an episode try that started after it and finished: the run scheduled
// and completed new work, not just finished what was in flight.
type progress struct {
	mu     sync.Mutex
	seen   map[string]bool
	done   []finished
	cancel context.CancelFunc
	exited chan struct{}
}

type finished struct {
	started, seen time.Time
}

func watchProgress(ctx context.Context, d *drill, run string) *progress {
	ctx, cancel := context.WithCancel(ctx)
	p := &progress{seen: map[string]bool{}, cancel: cancel, exited: make(chan struct{})}
	prefix := schemas.Layout{Run: run}.Prefix() + "staged/"
	go func() {
		defer close(p.exited)
		for {
			lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
			objs, err := d.r.Store.List(lctx, prefix)
			now := time.Now()
			for _, o := range objs {
				if err != nil || p.seen[o.Key] || !strings.HasSuffix(o.Key, "/episode.parquet") {
					continue
				}
				rows, rerr := store.ReadParquet[schemas.Episode](lctx, d.r.Store, o.Key)
				if rerr != nil || len(rows) == 0 {
					continue // S3 went away meanwhile: read it next time
				}
				p.mu.Lock()
				p.seen[o.Key] = true
				p.done = append(p.done, finished{time.UnixMilli(rows[0].StartedAtMS), now})
				p.mu.Unlock()
			}
			lcancel()
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return p
}

func (p *progress) stop() { p.cancel(); <-p.exited }

// after is the time from the fault (at) until the first episode try that
// started after it was seen stored; -1 when none was.
func (p *progress) after(at time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := time.Duration(-1)
	for _, f := range p.done {
		if f.started.Before(at) {
			continue
		}
		if d := f.seen.Sub(at); best < 0 || d < best {
			best = d
		}
	}
	return best
}

// waitStaged waits until the run has staged at least n episode rows of
// round 1's collection (mid-collection), 3 minutes at most.
func waitStaged(ctx context.Context, d *drill, run string, phase string, n int) error {
	return waitStagedOf(ctx, d, run, 1, phase, n)
}

// waitStagedOf waits for n staged tries of a round's phase.
func waitStagedOf(ctx context.Context, d *drill, run string, round int32, phase string, n int) error {
	prefix := fmt.Sprintf("%sstaged/round=%d/phase=%s/", schemas.Layout{Run: run}.Prefix(), round, phase)
	return poll(ctx, 3*time.Minute, fmt.Sprintf("%d staged %s episodes of round %d", n, phase, round), func() (bool, error) {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		objs, err := d.r.Store.List(lctx, prefix)
		if err != nil {
			return false, nil
		}
		k := 0
		for _, o := range objs {
			if strings.HasSuffix(o.Key, "/episode.parquet") {
				k++
			}
		}
		return k >= n, nil
	})
}

// waitTraining waits until a trainer process (trainer.py in its command
// line) runs on the training host: the update is under way.
func waitTraining(ctx context.Context, d *drill, run string) error {
	h := d.r.Host("t1")
	return poll(ctx, 4*time.Minute, "round 1's trainer to start on t1", func() (bool, error) {
		pids, err := h.Pids(ctx)
		if err != nil {
			return false, nil
		}
		for _, pid := range pids {
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); bytes.Contains(cmd, []byte("trainer.py")) {
				return true, nil
			}
		}
		return false, nil
	})
}

// waitOverlap waits for the middle of an overlapped run: round 1's
// trainer running on t1 while round 2's collection has staged tries.
func waitOverlap(ctx context.Context, d *drill, run string) error {
	if err := waitTraining(ctx, d, run); err != nil {
		return err
	}
	return waitStagedOf(ctx, d, run, 2, schemas.PhaseTrain, 2)
}

// overlapped is a fault hitting an overlapped run (--max-staleness 1)
// while round 1 trains and round 2 collects.
func overlapped(name string, apply func(ctx context.Context, d *drill, run string) error, hold time.Duration, heal func(ctx context.Context, d *drill, run string) error) fault {
	return fault{name: name, wait: waitOverlap, apply: apply, hold: hold, heal: heal, args: []string{"--max-staleness", "1"}}
}

// overlapKillT1 is kill -9 of t1, the host of the trainer and of the
// control worker that runs the overlapped workflow, mid-overlap.
var overlapKillT1 = overlapped("overlap-kill-t1", on("t1", (*rig.Host).Kill), 3*time.Second, on("t1", (*rig.Host).Start))

// poll checks cond every 300 ms until it holds, limit at most.
func poll(ctx context.Context, limit time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// killRollout is kill -9 of rollout host r2 mid-collection, restarted 3 s
// later on the same work directory.
var killRollout = fault{name: "kill-rollout", wait: staged(3),
	apply: on("r2", (*rig.Host).Kill), hold: 3 * time.Second, heal: on("r2", (*rig.Host).Start)}

// zombie: r1 restarted with episodes slower than the heartbeat timeout,
// cut from Temporal (S3 still reachable) once it runs collection episodes,
// kept cut until its tries have finished and written, then healed.
var zombie = fault{name: "zombie-partition", inject: func(ctx context.Context, d *drill, run string) (time.Time, time.Time, error) {
	h := d.r.Host("r1")
	defer func() {
		// Back to the drill's pace for the faults after this one.
		h.SetEnv([]string{"MINIMAL_EPISODE_DELAY=" + episodeDelay})
		_ = h.Kill(ctx)
		if err := h.Start(ctx); err != nil {
			d.t.Logf("zombie: restarting r1: %v", err)
		}
	}()
	dir := filepath.Join(h.WorkDir, "episodes", run)
	if err := poll(ctx, 3*time.Minute, "r1 to run collection episodes", func() (bool, error) {
		m, _ := filepath.Glob(filepath.Join(dir, "*-train-*"))
		return len(m) >= 1, nil
	}); err != nil {
		return time.Time{}, time.Time{}, err
	}
	at := time.Now()
	if err := h.PartitionTemporal(ctx); err != nil {
		return at, at, err
	}
	// The slow tries end 25 s after they began; their writes go to S3
	// while Temporal has long given their episodes to r2 and r3.
	time.Sleep(35 * time.Second)
	err := h.HealTemporal(ctx)
	return at, time.Now(), err
}}

// slowR1 makes r1's episodes outlast the heartbeat timeout before the zombie run.
func slowR1(ctx context.Context, d *drill) error {
	h := d.r.Host("r1")
	h.SetEnv([]string{"MINIMAL_EPISODE_DELAY=" + zombieDelay})
	if err := h.Kill(ctx); err != nil {
		return err
	}
	return h.Start(ctx)
}

// trainDelay holds each trainer try this long (DRILL_TRAIN_DELAY) in the
// runs whose fault hits the training host, so it lands mid-update.
const trainDelay = "20"

// setTrainDelay restarts the training host with DRILL_TRAIN_DELAY=delay
// ("" for none).
func setTrainDelay(ctx context.Context, d *drill, delay string) error {
	h := d.r.Host("t1")
	var env []string
	if delay != "" {
		env = []string{"DRILL_TRAIN_DELAY=" + delay}
	}
	h.SetEnv(env)
	if err := h.Kill(ctx); err != nil {
		return err
	}
	return h.Start(ctx)
}

// prepare sets the hosts up for fault f: a slow r1 for the zombie, a
// held trainer for the faults that hit training.
func (d *drill) prepare(f fault) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch {
	case f.name == zombie.name:
		return slowR1(ctx, d)
	case trainerFault(f.name):
		return setTrainDelay(ctx, d, trainDelay)
	}
	return nil
}

// restore puts the training host back to full speed after a fault that
// held it.
func (d *drill) restore(f fault) {
	if !trainerFault(f.name) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := setTrainDelay(ctx, d, ""); err != nil {
		d.t.Logf("training host back to full speed: %v", err)
	}
}

// trainerFault says which faults need the held trainer.
func trainerFault(name string) bool {
	return strings.HasSuffix(name, "-trainer") || strings.HasPrefix(name, "overlap-")
}

var faults = []fault{
	killRollout,
	zombie,
	overlapKillT1,
	overlapped("overlap-kill-rollout", on("r2", (*rig.Host).Kill), 3*time.Second, on("r2", (*rig.Host).Start)),
	overlapped("overlap-temporal-restart", func(ctx context.Context, d *drill, _ string) error {
		return d.r.RestartTemporal(ctx, 5*time.Second)
	}, 0, nil),
	{name: "kill-trainer", wait: waitTraining,
		apply: on("t1", (*rig.Host).Kill), hold: 3 * time.Second, heal: on("t1", (*rig.Host).Start)},
	{name: "partition-trainer", wait: waitTraining,
		apply: on("t1", (*rig.Host).Partition), hold: 20 * time.Second, heal: on("t1", (*rig.Host).HealPartition)},
	{name: "temporal-restart", wait: staged(3), apply: func(ctx context.Context, d *drill, _ string) error {
		return d.r.RestartTemporal(ctx, 5*time.Second)
	}},
	{name: "s3-down-30s", wait: staged(3),
		apply: func(_ context.Context, d *drill, _ string) error { d.r.StopS3(); return nil },
		hold:  30 * time.Second, heal: func(ctx context.Context, d *drill, _ string) error { return d.r.StartS3(ctx) }},
	{name: "s3-slow", wait: staged(3), apply: func(ctx context.Context, d *drill, _ string) error {
		var errs []error
		for _, n := range []string{"r1", "r2", "r3"} {
			errs = append(errs, d.r.Host(n).SlowS3(ctx, 200_000)) // 200 kbit/s each way
		}
		return errors.Join(errs...)
	}, hold: 20 * time.Second, heal: func(ctx context.Context, d *drill, _ string) error {
		var errs []error
		for _, n := range []string{"r1", "r2", "r3"} {
			errs = append(errs, d.r.Host(n).HealS3(ctx))
		}
		return errors.Join(errs...)
	}},
	{name: "kill-model-server", wait: staged(2), apply: func(ctx context.Context, d *drill, _ string) error {
		pids, err := d.r.Host("r3").Pids(ctx)
		if err != nil {
			return err
		}
		killed := 0
		for _, pid := range pids {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if bytes.Contains(cmd, []byte("minimal-model")) {
				if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
					killed++
				}
			}
		}
		if killed == 0 {
			return fmt.Errorf("no minimal-model process among r3's %v", pids)
		}
		return nil
	}},
	{name: "disk-full", wait: staged(2),
		apply: on("r1", (*rig.Host).FillDisk), hold: 15 * time.Second, heal: on("r1", (*rig.Host).FreeDisk)},
	{name: "corrupt-parquet", wait: staged(2), apply: func(ctx context.Context, d *drill, run string) error {
		// A staged calls file of a finished try, truncated to half before
		// Publish copies it into calls/ and BuildBatch reads it.
		prefix := fmt.Sprintf("%sstaged/round=1/phase=train/", schemas.Layout{Run: run}.Prefix())
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		objs, err := d.r.Store.List(lctx, prefix)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if !strings.HasSuffix(o.Key, "/calls.parquet") {
				continue
			}
			b, err := d.r.Store.Get(lctx, o.Key)
			if err != nil {
				return err
			}
			if err := d.r.Store.Put(lctx, o.Key, b[:len(b)/2]); err != nil {
				return err
			}
			d.t.Logf("corrupt-parquet: truncated %s from %d to %d bytes", o.Key, len(b), len(b)/2)
			return nil
		}
		return fmt.Errorf("no staged calls.parquet under %s", prefix)
	}},
}

// clusterFaults are the production-shaped Temporal's own faults
// (ROUNDHOUSE_DRILL_TEMPORAL=cluster): kill -9 of each service
// mid-collection, restarted 5 s later; PostgreSQL killed and restarted
// mid-round; visibility's writes held for 30 s, so the run is listed late.
var clusterFaults = []fault{
	restartService("kill-history", "history"),
	restartService("kill-matching", "matching"),
	restartService("kill-frontend", "frontend"),
	restartService("kill-postgres", "postgres"),
	{name: "visibility-behind", wait: staged(3), apply: func(ctx context.Context, d *drill, _ string) error {
		return d.r.Cluster.HoldVisibility(ctx, 30*time.Second)
	}},
}

func restartService(name, service string) fault {
	return fault{name: name, wait: staged(3), apply: func(ctx context.Context, d *drill, _ string) error {
		return d.r.RestartService(ctx, service, 5*time.Second)
	}}
}

// TestDrill is the fault drill (`go tool task drill`): one rig, one short
// training run per fault, each checked; it prints the table and fails on
// nothing but a broken rig, since how each fault ends is what it measures.
// Set ROUNDHOUSE_DRILL=1 to run it (it takes about 10 minutes), and
// ROUNDHOUSE_DRILL_FAULTS=a,b to run only those faults.
func TestDrill(t *testing.T) {
	if os.Getenv("ROUNDHOUSE_DRILL") == "" {
		t.Skip("the fault drill: set ROUNDHOUSE_DRILL=1 (go tool task drill)")
	}
	only := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("ROUNDHOUSE_DRILL_FAULTS"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			only[n] = true
		}
	}
	onCluster := os.Getenv("ROUNDHOUSE_DRILL_TEMPORAL") == "cluster"
	d := newDrillOn(t, onCluster)
	all := faults
	if onCluster {
		all = append(slices.Clone(faults), clusterFaults...)
	}
	var rows []row
	for _, f := range all {
		if len(only) > 0 && !only[f.name] {
			continue
		}
		if err := d.prepare(f); err != nil {
			rows = append(rows, row{fault: f.name, notRun: "preparing the hosts: " + firstLine(err.Error())})
			continue
		}
		start := time.Now()
		w := d.runFault(f)
		d.restore(f)
		rows = append(rows, w)
		t.Logf("%s done in %s:\n%s", f.name, time.Since(start).Round(time.Second), table(rows[len(rows)-1:]))
		d.heal()
	}
	server := "the Temporal dev server"
	if onCluster {
		server = "the production-shaped Temporal (PostgreSQL, four services, mTLS)"
	}
	fmt.Printf("\nFault drill: %d rounds × %d groups × %d attempts, heartbeat %s, 3 rollout hosts + 1 training host, on %s\n\n%s\n",
		rounds, groups, attempts, heartbeat, server, table(rows))
}

// heal undoes whatever a fault left, so the next starts on a whole rig.
func (d *drill) heal() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, h := range d.r.Hosts {
		if err := h.HealNetwork(ctx); err != nil {
			d.t.Logf("heal %s: %v", h.Name, err)
		}
		if h.PID() == 0 {
			if err := h.Start(ctx); err != nil {
				d.t.Logf("restart %s: %v", h.Name, err)
			}
		}
	}
	if err := d.r.Host("r1").FreeDisk(ctx); err != nil {
		d.t.Logf("free r1's disk: %v", err)
	}
}

// TestFaultsLoseNothing is the drill's CI subset: a rollout host killed
// mid-collection, a rollout host cut from Temporal while its slow
// episodes run (the zombie case), and the host of the trainer and the
// control worker killed while an overlapped run's round 1 trains and
// round 2 collects; each run must complete with every planned episode
// stored exactly once, as its accepted try, and no sample past the bound.
func TestFaultsLoseNothing(t *testing.T) {
	itest.Slow(t)
	d := newDrill(t)
	for _, f := range []fault{killRollout, zombie, overlapKillT1} {
		if err := d.prepare(f); err != nil {
			t.Fatal(err)
		}
		w := d.runFault(f)
		d.restore(f)
		t.Logf("\n%s", table([]row{w}))
		switch {
		case w.notRun != "":
			t.Fatalf("%s: %s", f.name, w.notRun)
		case w.completed != "yes":
			t.Errorf("%s: run completed: %s", f.name, w.completed)
		case w.checkErr != nil:
			t.Errorf("%s: check: %v", f.name, w.checkErr)
		case !w.res.OK() || w.res.Stored != w.res.Planned:
			t.Errorf("%s: %d planned, %d stored, %d lost, %d duplicated, %d calls lost; problems: %v",
				f.name, w.res.Planned, w.res.Stored, w.res.Lost, w.res.Duplicated, w.res.CallsLost, w.res.Problems)
		}
		if f.name == zombie.name && w.checkErr == nil && w.res.LateWrites == 0 {
			t.Errorf("zombie: no late write was refused: the partition did not take r1's episodes away")
		}
		if w.res.Planned != 2*(groups*attempts)+3*4 {
			t.Errorf("%s: %d planned episodes, want %d", f.name, w.res.Planned, 2*(groups*attempts)+3*4)
		}
		// Round 2 collected on w0 while round 1 trained: its samples are
		// stale, within the bound.
		if f.name == overlapKillT1.name && w.checkErr == nil && (w.res.Stale == 0 || w.res.BeyondBound != 0) {
			t.Errorf("%s: %d stale samples, %d beyond the bound; want round 2's stale, none beyond", f.name, w.res.Stale, w.res.BeyondBound)
		}
		if f.name == killRollout.name {
			checkCatchesAStrayRow(t, d, "drill-"+f.name)
			checkCatchesAShortBatch(t, d, "drill-"+f.name)
		}
		d.heal()
	}
}

// checkCatchesAStrayRow: the checker must see what a late writer that got
// past the fence would leave, a second row of an episode from another try
// beside the published one.
func checkCatchesAStrayRow(t *testing.T, d *drill, run string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	l := schemas.Layout{Run: run}
	rows, err := ReadAll[schemas.Episode](ctx, d.r.Store, l.EpisodesDir(2, schemas.PhaseTrain), &Result{})
	if err != nil || len(rows) == 0 {
		t.Fatalf("round 2's rows: %d, %v", len(rows), err)
	}
	stray := rows[0]
	stray.Retry, stray.Try = stray.Retry+1, "try9-zombie"
	if _, err := store.WriteParquet(ctx, d.r.Store, l.EpisodesDir(2, schemas.PhaseTrain)+"stray.parquet", []schemas.Episode{stray}); err != nil {
		t.Fatal(err)
	}
	res, err := Check(ctx, d.r.Client, d.r.Store, run)
	if err != nil {
		t.Fatal(err)
	}
	if res.Duplicated != 1 || res.OK() || !strings.Contains(strings.Join(res.Problems, "\n"), "try9-zombie") {
		t.Errorf("with a stray row of %s: duplicated %d, problems %v; want it found", stray.EpisodeID, res.Duplicated, res.Problems)
	}
}

// checkCatchesAShortBatch: a batch that lacks one sample the stored tables
// select is still a subset of accepted calls; only redoing the selection
// finds it.
func checkCatchesAShortBatch(t *testing.T, d *drill, run string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	key := schemas.Layout{Run: run}.Samples(1)
	samples, err := store.ReadParquet[schemas.Sample](ctx, d.r.Store, key)
	if err != nil || len(samples) < 2 {
		t.Fatalf("round 1's samples: %d, %v", len(samples), err)
	}
	if _, err := store.WriteParquet(ctx, d.r.Store, key, samples[:len(samples)-1]); err != nil {
		t.Fatal(err)
	}
	res, err := Check(ctx, d.r.Client, d.r.Store, run)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d samples, want %d", len(samples)-1, len(samples))
	if !strings.Contains(strings.Join(res.Problems, "\n"), want) {
		t.Errorf("with round 1's last sample removed: problems %v; want one saying %q", res.Problems, want)
	}
}
