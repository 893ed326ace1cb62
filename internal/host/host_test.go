package host

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/spool"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestPruneWeights(t *testing.T) {
	root := t.TempDir()
	keep := "d1/run/r2/etag2"
	for _, p := range []string{"d1/run/r1/etag1/policy.json", "d1/run/r1/etag1.manifest.json", keep + "/policy.json", keep + ".manifest.json", "d2/other/w0/e/config.json"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte("x"), 0o644)
	}
	// Weights another model server of the host serves are kept too.
	pruneWeights(root, map[string]bool{keep: true, "d2/other/w0/e": true})
	for p, want := range map[string]bool{keep + "/policy.json": true, keep + ".manifest.json": true, "d1/run/r1/etag1": false, "d1/run/r1/etag1.manifest.json": false, "d2/other/w0/e": true} {
		if _, err := os.Stat(filepath.Join(root, p)); (err == nil) != want {
			t.Errorf("%s: exists = %v, want %v", p, err == nil, want)
		}
	}
}

// Start serves the recording proxy on the address it reports; Close stops
// it.
func TestStartServesProxyUntilClose(t *testing.T) {
	h, err := Start(context.Background(), Config{WorkDir: t.TempDir(), ProxyListen: "127.0.0.1:0", Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", h.ProxyAddr)
	if err != nil {
		h.Close()
		t.Fatalf("proxy not listening on %s: %v", h.ProxyAddr, err)
	}
	c.Close()
	h.Close()
	if c, err := net.Dial("tcp", h.ProxyAddr); err == nil {
		c.Close()
		t.Errorf("proxy still listening on %s after Close", h.ProxyAddr)
	}
}

// A spooled try whose episode row is stored completed before its worker
// died: recovery clears it without storing an orphan; a try without a
// row is stored under orphans/.
func TestRecoverOrphansSkipsCompletedTries(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	dir := t.TempDir()
	first, err := spool.New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := schemas.Layout{Run: "orph"}
	done := schemas.EpisodeKey{Run: "orph", Round: 1, Phase: schemas.PhaseTrain}
	lost := schemas.EpisodeKey{Run: "orph", Round: 1, Phase: schemas.PhaseTrain, Attempt: 1}
	for _, ep := range []schemas.EpisodeKey{done, lost} {
		first.Call(ep, schemas.Call{Run: ep.Run, EpisodeID: ep.ID(), CallIndex: 0, Trainable: true})
	}
	if _, err := store.WriteParquet(ctx, stack.Store, l.Episodes(1, schemas.PhaseTrain, done.ID()), []schemas.Episode{{Run: "orph", EpisodeID: done.ID(), Valid: true}}); err != nil {
		t.Fatal(err)
	}
	// The next worker process on the host (the first wrote what it had).
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	next, err := spool.New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{Store: stack.Store, Spool: next}
	if _, err := h.RecoverOrphans(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _ := stack.Store.Exists(ctx, l.Orphan(1, schemas.PhaseTrain, done.ID(), 0)); ok {
		t.Error("a completed try was stored as an orphan")
	}
	if ok, _ := stack.Store.Exists(ctx, l.Orphan(1, schemas.PhaseTrain, lost.ID(), 0)); !ok {
		t.Error("the try without an episode row was not stored as an orphan")
	}
	if left, _ := next.Orphans(); len(left) != 0 {
		t.Errorf("spool still holds %d tries", len(left))
	}
}

// A vision-language harness's weights without preprocessor_config.json are
// refused before the model server starts: its command never runs.
func TestAcquireRefusesVLMWithoutProcessor(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	dir := t.TempDir()
	w := filepath.Join(dir, "w0")
	os.Mkdir(w, 0o755)
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
		os.WriteFile(filepath.Join(w, f), []byte("{}"), 0o644)
	}
	files, err := weights.Dir(w)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := weights.Publish(ctx, stack.Store, schemas.Layout{Run: "vlm"}.Weights("w0"), files, schemas.WeightsManifest{WeightsID: "w0"}); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "started")
	hr := schemas.Harness{Name: "vlm", Dir: dir, Digest: "d"}
	hr.Model.Vision = true
	hr.Model.Command = []string{"sh", "-c", "touch " + marker + "; sleep 30"}
	h := &Host{Store: stack.Store, WorkDir: dir}
	_, release, err := h.Acquire(ctx, hr, "vlm", "w0")
	if release != nil {
		release()
	}
	if err == nil || !strings.Contains(err.Error(), weights.ProcessorFile) || !strings.Contains(err.Error(), "runs/vlm/weights/w0") {
		t.Fatalf("want the missing processor named, got %v", err)
	}
	if _, serr := os.Stat(marker); serr == nil {
		t.Error("the model server started on weights without a processor")
	}
}

// TestSlotStats follows the model slot through loads, a wait for other
// weights, a switch, idle stretches and a start that fails, per run.
func TestSlotStats(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	dir := t.TempDir()
	for _, rw := range [][2]string{{"a", "w0"}, {"b", "w1"}, {"c", "w0"}} {
		publishPolicy(t, stack.Store, dir, rw[0], rw[1], []byte(`{"run":"`+rw[0]+`"}`))
	}
	hr := schemas.Harness{Name: "toy", Dir: dir, Digest: "d"}
	hr.Model.Command = []string{"sh", "-c", "echo ready; exec sleep 60"}
	hr.Model.Ready = schemas.Ready{Log: "ready"}
	broken := hr
	broken.Digest = "d2"
	broken.Model.Command = []string{"sh", "-c", "exit 3"}
	h, err := Start(ctx, Config{Store: stack.Store, WorkDir: filepath.Join(dir, "host"), ProxyListen: "127.0.0.1:0", Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	acquire := func(hr schemas.Harness, run, w string) func() {
		t.Helper()
		_, release, err := h.Acquire(ctx, hr, run, w)
		if err != nil {
			t.Fatalf("acquire %s %s: %v", run, w, err)
		}
		return release
	}
	stats := func() map[string]SlotStats {
		m := map[string]SlotStats{}
		for _, s := range h.SlotStats() {
			m[s.Run] = s
		}
		return m
	}
	a1, a2 := acquire(hr, "a", "w0"), acquire(hr, "a", "w0") // one load serves both
	got := make(chan func(), 1)
	go func() {
		_, release, err := h.Acquire(ctx, hr, "b", "w1")
		if err != nil {
			t.Error(err)
		}
		got <- release
	}()
	// b waits while a's episodes use the slot.
	for i := 0; stats()["b"].Waiting != 1; i++ {
		if i == 100 {
			t.Fatalf("b never waited: %+v", stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	a1()
	a2() // a idle: b switches the slot
	release := <-got
	release()
	acquire(hr, "a", "w0")() // back to a: a second load
	if _, _, err := h.Acquire(ctx, broken, "c", "w0"); err == nil {
		t.Fatal("a model server that exits at once must fail to start")
	}
	s := stats()
	a, b, c := s["a"], s["b"], s["c"]
	if a.Loads != 2 || b.Loads != 1 || c.Loads != 0 || c.Failed != 1 {
		t.Errorf("loads a %d, b %d, c %d (failed %d); want 2, 1, 0 (1)", a.Loads, b.Loads, c.Loads, c.Failed)
	}
	if b.Waits != 1 || b.Waiting != 0 || b.WaitTime <= 0 || a.Waits != 0 {
		t.Errorf("waits: a %+v, b %+v; want b to have waited once, and no longer", a, b)
	}
	if a.LoadTime <= 0 || b.LoadTime <= 0 || a.Idle <= 0 || b.Idle <= 0 {
		t.Errorf("a %+v, b %+v: want load and idle time for both", a, b)
	}
	// Each load is a transfer, then a serving pause.
	for name, x := range map[string]SlotStats{"a": a, "b": b} {
		if x.FetchTime <= 0 || x.FetchTime > x.LoadTime || x.Paused() <= 0 {
			t.Errorf("%s: fetch %s of load %s (paused %s): want both parts", name, x.FetchTime, x.LoadTime, x.Paused())
		}
	}

	// What the host reports to the fleet: the failed load, by weights key.
	loaded, failed := h.Models()
	if f, ok := failed["c/w0"]; !ok || f.Cause == "" || len(loaded) != 0 {
		t.Errorf("models: loaded %+v, failed %+v; want c/w0 failed and nothing loaded", loaded, failed)
	}

	// The fleet assigns a/w0 only: an episode of b taken from a weights
	// queue is refused before anything loads; one of a is served.
	h.SetAssigned([]string{"a/w0"})
	routed := Routed(ctx)
	if _, _, err := h.Acquire(routed, hr, "b", "w1"); !errors.As(err, new(*MovedError)) {
		t.Fatalf("a stray episode of b/w1: %v, want a MovedError", err)
	}
	_, ra, err := h.Acquire(routed, hr, "a", "w0")
	if err != nil {
		t.Fatal(err)
	}
	if loaded, _ := h.Models(); len(loaded) != 1 || loaded[0].Weights != "a/w0" || loaded[0].Busy != 1 || loaded[0].Load <= 0 {
		t.Errorf("models while a/w0 runs: %+v", loaded)
	}
	ra()
	if loaded, _ := h.Models(); len(loaded) != 1 || loaded[0].Busy != 0 || loaded[0].IdleSince.IsZero() {
		t.Errorf("models after: %+v, want a/w0 idle since its release", loaded)
	}
	// Once the fleet moves a/w0 off, an a episode still served from the
	// loaded server costs nothing and is taken; b's is still refused.
	h.SetAssigned([]string{"c/w0"})
	if _, rel, err := h.Acquire(routed, hr, "a", "w0"); err != nil {
		t.Errorf("an episode of the loaded weights was refused: %v", err)
	} else {
		rel()
	}
	if s := stats()["a"]; s.Loads != 3 {
		t.Errorf("a loaded %d times, want 3", s.Loads)
	}
	// Episodes of the one rollout queue (older workflows) are served
	// whatever the assignment.
	if _, rel, err := h.Acquire(ctx, hr, "b", "w1"); err != nil {
		t.Errorf("an episode of the rollout queue was refused: %v", err)
	} else {
		rel()
	}
}

// A harness with per_host 2 keeps two weights loaded at once: episodes of
// either never wait; a third weights waits for one to be free, then takes
// the server idle longest. Each episode learns its own server's URL.
func TestSeveralModelServers(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	dir := t.TempDir()
	for _, w := range []string{"w0", "w1", "w2"} {
		publishPolicy(t, stack.Store, dir, "r", w, []byte(`{"w":"`+w+`"}`))
	}
	hr := schemas.Harness{Name: "toy", Dir: dir, Digest: "d"}
	hr.Model.Command = []string{"sh", "-c", "echo ready; exec sleep 60"}
	hr.Model.Ready = schemas.Ready{Log: "ready"}
	hr.Model.PerHost, hr.Model.MemoryShare = 2, 0.4
	h, err := Start(ctx, Config{Store: stack.Store, WorkDir: filepath.Join(dir, "host"), ProxyListen: "127.0.0.1:0", Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	acquire := func(w string) (string, func()) {
		t.Helper()
		vars, release, err := h.Acquire(ctx, hr, "r", w)
		if err != nil {
			t.Fatalf("acquire %s: %v", w, err)
		}
		return vars["model_url"], release
	}
	u0, r0 := acquire("w0")
	u1, r1 := acquire("w1")
	if u0 == u1 || u0 == "" {
		t.Fatalf("w0 and w1 share a model server: %q, %q", u0, u1)
	}
	if loaded, _ := h.Models(); len(loaded) != 2 || loaded[0].Weights != "r/w0" || loaded[1].Weights != "r/w1" {
		t.Fatalf("models %+v, want r/w0 and r/w1", loaded)
	}
	got := make(chan string, 1)
	go func() {
		u, r := acquire("w2")
		r()
		got <- u
	}()
	for i := 0; h.SlotStats()[0].Waiting != 1; i++ {
		if i == 100 {
			t.Fatalf("w2 never waited: %+v", h.SlotStats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	r1()
	time.Sleep(20 * time.Millisecond)
	r0()
	// w1's server went idle first: w2 takes its place, w0 stays.
	if u := <-got; u == u0 || u == "" {
		t.Errorf("w2 served at %s, w0's server", u)
	}
	if loaded, _ := h.Models(); len(loaded) != 2 || loaded[0].Weights != "r/w0" || loaded[1].Weights != "r/w2" {
		t.Errorf("models %+v, want r/w0 and r/w2", loaded)
	}
	if u, r := acquire("w0"); u != u0 {
		t.Errorf("w0 moved from %s to %s", u0, u)
	} else {
		r()
	}
	if s := h.SlotStats()[0]; s.Loads != 3 || s.Waits != 1 {
		t.Errorf("stats %+v, want 3 loads and 1 wait", s)
	}
}

// A harness that declares an in-place reload gets its weights swapped into
// the running server (the stand-in's vLLM sleep-mode endpoints), not a
// restart: same process and port, the new weights served; a reload that
// fails falls back to a restart.
func TestReloadInPlace(t *testing.T) {
	stack := itest.Start(t)
	bins := itest.Build(t, "./harnesses/minimal/cmd/minimal-model")
	ctx := context.Background()
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(itest.Root(t), "harnesses/minimal/weights/w0/policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"w0", "w1", "w2"} {
		publishPolicy(t, stack.Store, dir, "r", w, src)
	}
	hr := schemas.Harness{Name: "toy", Dir: dir, Digest: "d"}
	hr.Model.Command = []string{filepath.Join(bins, "minimal-model"), "--weights", "{weights}", "--listen", "127.0.0.1:{port}", "--enable-sleep-mode"}
	hr.Model.Ready = schemas.Ready{HTTP: "/health"}
	hr.Model.WeightsFile = "policy.json"
	hr.Model.Reload = []schemas.ReloadStep{{Post: "/sleep?level=1"}, {Post: "/collective_rpc", Body: `{"method":"reload_weights"}`, Expect: "results"}, {Post: "/wake_up"}}
	h, err := Start(ctx, Config{Store: stack.Store, WorkDir: filepath.Join(dir, "host"), ProxyListen: "127.0.0.1:0", Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	use := func(hr schemas.Harness, w string) string {
		t.Helper()
		vars, release, err := h.Acquire(ctx, hr, "r", w)
		if err != nil {
			t.Fatalf("acquire %s: %v", w, err)
		}
		release()
		return vars["model_url"]
	}
	u0 := use(hr, "w0")
	pid := h.services[modelName].proc
	if u1 := use(hr, "w1"); u1 != u0 || h.services[modelName].proc != pid {
		t.Fatalf("w1 restarted the server (%s → %s)", u0, u1)
	}
	target, err := os.Readlink(filepath.Join(dir, "host", "serving", "model"))
	if err != nil || !strings.Contains(target, "/r/w1/") {
		t.Errorf("serving path points at %q (%v), want w1's weights", target, err)
	}
	if loaded, _ := h.Models(); len(loaded) != 1 || loaded[0].Weights != "r/w1" {
		t.Errorf("models %+v, want r/w1", loaded)
	}
	if s := h.SlotStats()[0]; s.Loads != 2 || s.Reloads != 1 {
		t.Errorf("stats %+v, want 2 loads, 1 in place", s)
	}
	// A reload the server refuses: the host restarts it instead.
	bad := hr
	bad.Model.Reload = []schemas.ReloadStep{{Post: "/collective_rpc", Body: `{"method":"no_such_method"}`}}
	if u2 := use(bad, "w2"); u2 == u0 {
		t.Errorf("w2 served by the old process at %s after a failed reload", u2)
	}
	if s := h.SlotStats()[0]; s.Loads != 3 || s.Reloads != 1 {
		t.Errorf("stats %+v, want 3 loads, 1 in place", s)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	itest.Cleanup() // binaries Build made
	os.Exit(code)
}

// publishPolicy publishes weights id of run: one policy.json holding body,
// written under dir first.
func publishPolicy(t *testing.T, s *store.Store, dir, run, id string, body []byte) {
	t.Helper()
	d := filepath.Join(dir, run+"-"+id)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "policy.json"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := weights.Dir(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := weights.Publish(context.Background(), s, schemas.Layout{Run: run}.Weights(id), files, schemas.WeightsManifest{WeightsID: id}); err != nil {
		t.Fatal(err)
	}
}

// While a model server starts (which holds the host's lock for as long as
// it takes), the host still answers what it serves, its figures and a new
// assignment: its report to the fleet is its lease.
func TestReportsWhileAServerStarts(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	dir := t.TempDir()
	for _, w := range []string{"w0", "w1"} {
		publishPolicy(t, stack.Store, dir, "r", w, []byte(`{"w":"`+w+`"}`))
	}
	hr := schemas.Harness{Name: "toy", Dir: dir, Digest: "d"}
	hr.Model.Command = []string{"sh", "-c", "sleep 3; echo ready; exec sleep 60"}
	hr.Model.Ready = schemas.Ready{Log: "ready"}
	h, err := Start(ctx, Config{Store: stack.Store, WorkDir: filepath.Join(dir, "host"), ProxyListen: "127.0.0.1:0", Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, release, err := h.Acquire(ctx, hr, "r", "w0")
	if err != nil {
		t.Fatal(err)
	}
	release()
	// The agent asks every second; the answers given are kept.
	before, _ := h.Models()
	h.SlotStats()
	done := make(chan error, 1)
	go func() {
		_, release, err := h.Acquire(ctx, hr, "r", "w1")
		if err == nil {
			release()
		}
		done <- err
	}()
	// Wait until the switch to w1 holds the lock (bounded: 100 × 10 ms).
	for i := 0; ; i++ {
		if !h.mu.TryLock() {
			break
		}
		h.mu.Unlock()
		if i == 100 {
			t.Fatal("the switch to w1 never took the host's lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	loaded, _ := h.Models()
	stats := h.SlotStats()
	h.SetAssigned([]string{"r/w1"})
	select {
	case err := <-done:
		t.Fatalf("the host answered only after the start ended (%v)", err)
	default:
	}
	if len(loaded) != 1 || loaded[0].Weights != before[0].Weights || len(stats) != 1 || stats[0].Loads != 1 {
		t.Errorf("during the start: models %+v, stats %+v; want the last answer (r/w0, 1 load)", loaded, stats)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if loaded, _ := h.Models(); len(loaded) != 1 || loaded[0].Weights != "r/w1" {
		t.Errorf("after the start: models %+v, want r/w1", loaded)
	}
}
