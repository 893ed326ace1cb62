package host

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/ports"
	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// modelName keys the model server among a host's services.
const modelName = "model"

// service is a process a rollout host keeps running for its episodes.
type service struct {
	spec  schemas.Service
	key   string // what it was started for: harness digest (+ weights ETag)
	proc  *proc.Server
	lease *ports.Lease
	url   string
	users int
	// weights is the fleet's key (fleet.Key) of the weights a model
	// server serves; "" for other services.
	weights   string
	idleSince time.Time     // when its last user let go
	loadTook  time.Duration // fetching the weights and starting
}

func (s *service) alive() bool {
	done, _ := s.proc.Exited()
	return !done
}

func (s *service) stop() {
	s.proc.Stop(10 * time.Second)
	s.lease.Release()
}

// ServiceError says a harness service could not be started or did not
// become ready: an infrastructure failure of the episodes that need it.
type ServiceError struct {
	Harness, Service string
	Err              error
}

func (e *ServiceError) Error() string {
	return fmt.Sprintf("harness %s: service %s failed to start: %v", e.Harness, e.Service, e.Err)
}

func (e *ServiceError) Unwrap() error { return e.Err }

// Acquire makes sure the host runs the harness's services and its model
// server with the run's weights, and returns their {name_port}/{name_url}
// values; release lets the model server be switched to other weights.
// Shared services are started once and kept; a service that died is
// restarted by the next episode that needs it.
func (h *Host) Acquire(ctx context.Context, hr schemas.Harness, run, weightsID string) (map[string]string, func(), error) {
	a, err := h.newAcquisition(ctx, hr, run, weightsID)
	if err != nil {
		return nil, nil, err
	}
	for {
		h.mu.Lock()
		if h.services == nil {
			h.services, h.failed, h.loadFailed = map[string]*service{}, map[string]failedStart{}, map[string]fleet.Failure{}
		}
		vars := map[string]string{"harness_dir": hr.Dir}
		for _, spec := range hr.Services {
			if err := h.ensure(ctx, hr, spec, hr.Digest, vars, nil); err != nil {
				a.endWait()
				h.mu.Unlock()
				return nil, nil, err
			}
		}
		slot, m, err := a.chooseSlot()
		if err != nil {
			a.endWait()
			h.mu.Unlock()
			return nil, nil, err
		}
		if slot == "" {
			// Other episodes still use the other weights: wait for them.
			a.startWait()
			h.mu.Unlock()
			if err := a.pause(); err != nil {
				return nil, nil, err
			}
			continue
		}
		a.endWait()
		if m == nil {
			if m, err = a.load(slot, vars); err != nil {
				h.mu.Unlock()
				return nil, nil, err
			}
		}
		release := a.use(slot, m, vars)
		h.mu.Unlock()
		return vars, release, nil
	}
}

// acquisition is one Acquire: the weights it wants, where they go on
// this host, and its wait for a model server.
type acquisition struct {
	h         *Host
	ctx       context.Context
	hr        schemas.Harness
	run       string
	weightsID string
	remote    string // the weights in the bucket
	modelKey  string // what the model server is started for
	local     string // where the weights are fetched to
	wk        string // the fleet's key of the weights
	// waitStart: an episode that waits for other weights' episodes to
	// finish is counted once (SlotStats.Waits); endWait ends its wait.
	waitStart time.Time
	// fetchTook is how long the last fetch took: the transfer part of a
	// load, apart from the serving pause (SlotStats.FetchTime).
	fetchTook time.Duration
}

// newAcquisition reads the weights' manifest ETag for the model server's
// key: a run replaced under the same name never reuses the old run's
// server or cached files.
func (h *Host) newAcquisition(ctx context.Context, hr schemas.Harness, run, weightsID string) (*acquisition, error) {
	remote := schemas.Layout{Run: run}.Weights(weightsID)
	// Storage out of reach is waited out here, as RunEpisode does; only an
	// answer (no manifest) fails the episode.
	var etag string
	err := store.Await(ctx, store.OutageWait, "weights "+weightsID, func() (err error) {
		etag, err = h.Store.ETag(ctx, remote+schemas.WeightsManifestFile)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("weights %s are not published (no manifest): %w", weightsID, err)
	}
	modelKey := hr.Digest + "/" + run + "/" + weightsID + "/" + etag
	return &acquisition{h: h, ctx: ctx, hr: hr, run: run, weightsID: weightsID, remote: remote, modelKey: modelKey,
		local: filepath.Join(h.WorkDir, "weights", filepath.FromSlash(modelKey)), wk: fleet.Key(run, weightsID)}, nil
}

// slots is how many model servers the harness allows on one host.
func (a *acquisition) slots() int { return max(a.hr.Model.PerHost, 1) }

// chooseSlot chooses the model server to use, under h.mu: one serving
// these weights (m), else an empty (or dead) slot, else the slot idle
// longest — to be switched to these weights. With every slot busy with
// other weights it returns "": wait. Weights the fleet moved away are
// not loaded (MovedError).
func (a *acquisition) chooseSlot() (string, *service, error) {
	h := a.h
	for i := range a.slots() {
		if s := h.services[modelSlot(i)]; s != nil && s.key == a.modelKey && s.alive() {
			return modelSlot(i), s, nil
		}
	}
	if routed(a.ctx) && !h.isAssigned(a.wk) {
		// Taken by a poll that was waiting when the fleet moved these
		// weights away: loading them would undo the fleet's switch.
		return "", nil, &MovedError{Weights: a.wk}
	}
	for i := range a.slots() {
		if s := h.services[modelSlot(i)]; s == nil || !s.alive() {
			return modelSlot(i), nil, nil
		}
	}
	slot, since := "", time.Time{}
	for i := range a.slots() {
		if s := h.services[modelSlot(i)]; s.users == 0 && (slot == "" || s.idleSince.Before(since)) {
			slot, since = modelSlot(i), s.idleSince
		}
	}
	return slot, nil, nil
}

// startWait counts the episode as waiting for a model server, once;
// under h.mu.
func (a *acquisition) startWait() {
	if !a.waitStart.IsZero() {
		return
	}
	a.waitStart = time.Now()
	st := a.h.slots.of(a.run)
	st.Waits++
	st.Waiting++
	instr.ModelWaiting(a.ctx, 1)
}

// endWait ends the episode's wait, if it waited; under h.mu.
func (a *acquisition) endWait() {
	if a.waitStart.IsZero() {
		return
	}
	st := a.h.slots.of(a.run)
	st.Waiting--
	st.WaitTime += time.Since(a.waitStart)
	instr.ModelWaiting(a.ctx, -1)
	a.waitStart = time.Time{}
}

// pause waits a moment before the next try, without h.mu; the context
// ending ends the wait.
func (a *acquisition) pause() error {
	select {
	case <-a.ctx.Done():
		a.h.mu.Lock()
		a.endWait()
		a.h.mu.Unlock()
		return a.ctx.Err()
	case <-time.After(100 * time.Millisecond):
		return nil
	}
}

// fetch downloads the weights to a.local, waiting out a storage outage,
// and checks a vision model's weights hold what it needs.
func (a *acquisition) fetch() error {
	started := time.Now()
	defer func() { a.fetchTook = time.Since(started) }()
	var man schemas.WeightsManifest
	err := store.Await(a.ctx, store.OutageWait, "fetch weights "+a.weightsID, func() (err error) {
		man, err = weights.Fetch(a.ctx, a.h.Store, a.remote, a.local)
		return err
	})
	if err != nil {
		return err
	}
	if a.hr.Model.Vision {
		if err := weights.CheckVision(manifestNames(man), a.remote); err != nil {
			return err
		}
	}
	return nil
}

// load puts the weights on model slot, under h.mu: swapped in place into
// an idle server of the same harness config that can reload, else a
// server started (or restarted) for them. Cached weights that no other
// model server serves are pruned.
func (a *acquisition) load(slot string, vars map[string]string) (*service, error) {
	h := a.h
	keep := map[string]bool{a.modelKey: true}
	for i := range a.slots() {
		if s := h.services[modelSlot(i)]; s != nil && modelSlot(i) != slot {
			keep[s.key] = true // weights other model servers serve
		}
	}
	old := h.services[slot]
	if old != nil {
		h.slots.busy(slot, time.Now()) // the slot is switched: no longer idle
	}
	// A model server that can swap weights in place does, when the slot
	// holds one of the same harness config, idle.
	if old != nil && old.alive() && old.users == 0 && len(a.hr.Model.Reload) > 0 && strings.HasPrefix(old.key, a.hr.Digest+"/") {
		if a.reloadInPlace(slot, old, keep) {
			return old, nil
		}
	}
	return a.start(slot, vars, keep)
}

// reloadInPlace swaps the weights of old, the server of slot; false: it
// failed, and the server is to be restarted.
func (a *acquisition) reloadInPlace(slot string, old *service, keep map[string]bool) bool {
	h, hr := a.h, a.hr
	started := time.Now()
	if err := h.reload(a.ctx, hr, old, slot, a.local, a.fetch); err != nil {
		h.log.Warn("in-place reload failed; restarting the model server", "harness", hr.Name, "weights", a.wk, "error", err)
		return false
	}
	old.key, old.weights, old.loadTook = a.modelKey, a.wk, time.Since(started)
	h.log.Info("model server reloaded in place", "harness", hr.Name, "weights", a.wk, "took", old.loadTook,
		"fetch", a.fetchTook, "serving_paused", old.loadTook-a.fetchTook)
	pruneWeights(filepath.Join(h.WorkDir, "weights"), keep)
	h.slots.loaded(a.ctx, a.run, old.loadTook, a.fetchTook, true)
	h.slots.of(a.run).Reloads++
	delete(h.loadFailed, a.wk)
	return true
}

// start starts slot's model server with the weights, fetched first. A
// start that fails is recorded for the fleet, which moves the weights
// to another host (Models).
func (a *acquisition) start(slot string, vars map[string]string, keep map[string]bool) (*service, error) {
	h, hr := a.h, a.hr
	spec := hr.Model.Service
	spec.Name = slot
	started := time.Now()
	err := h.ensure(a.ctx, hr, spec, a.modelKey, vars, func() (map[string]string, error) {
		if err := a.fetch(); err != nil {
			return nil, err
		}
		pruneWeights(filepath.Join(h.WorkDir, "weights"), keep)
		path := a.local
		if len(hr.Model.Reload) > 0 {
			// A path the host can point at other weights later.
			var err error
			if path, err = h.pointServing(slot, a.local); err != nil {
				return nil, err
			}
		}
		return map[string]string{"weights": filepath.Join(path, hr.Model.WeightsFile), "served_name": hr.Model.ServedName}, nil
	})
	if f, ok := h.failed[slot]; err != nil && ok && !f.at.Before(started) {
		h.slots.loaded(a.ctx, a.run, time.Since(started), a.fetchTook, false)
		h.loadFailed[a.wk] = fleet.Failure{At: f.at, Cause: f.err.Error()}
	}
	if err != nil {
		return nil, err
	}
	m := h.services[slot]
	m.loadTook = time.Since(started)
	m.weights = a.wk
	h.slots.loaded(a.ctx, a.run, m.loadTook, a.fetchTook, true)
	delete(h.loadFailed, a.wk)
	return m, nil
}

// use makes the episode a user of model server m, under h.mu: its
// {model_port} and {model_url} go into vars and its calls to m. The
// release it returns, once, lets m go idle.
func (a *acquisition) use(slot string, m *service, vars map[string]string) func() {
	h := a.h
	if m.users == 0 {
		h.slots.busy(slot, time.Now())
	}
	m.users++
	// The episode's calls go to this model server (Episode.Upstream); the
	// one upstream serves harnesses that read {model_url} less.
	vars["model_port"] = strconv.Itoa(m.lease.Port)
	vars["model_url"] = m.url
	// Where the served weights are, for their generation_config.json
	// (sampling.Defaults).
	vars["weights_dir"] = a.local
	h.Proxy.SetUpstream(m.url)
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			m.users--
			if m.users == 0 {
				m.idleSince = time.Now()
				if h.services[slot] == m {
					h.slots.idleAt(slot, a.run, time.Now())
				}
			}
			h.mu.Unlock()
		})
	}
}

// pointServing points model slot's serving path (what {weights} names
// when the harness reloads in place) at the weights in local, replacing
// what it pointed at in one rename, and returns the path.
func (h *Host) pointServing(slot, local string) (string, error) {
	link := filepath.Join(h.WorkDir, "serving", strings.ReplaceAll(slot, "#", "-"))
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return "", fmt.Errorf("serving path for %s: %w", slot, err)
	}
	tmp := link + ".new"
	os.Remove(tmp)
	if err := os.Symlink(local, tmp); err != nil {
		return "", fmt.Errorf("serving path for %s: %w", slot, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		return "", fmt.Errorf("serving path for %s: %w", slot, err)
	}
	return link, nil
}

// reload swaps the weights of model server s in place: fetch them, point
// its serving path at them, send the harness's reload requests, then wait
// for its readiness check, all within its start timeout. Called with h.mu
// held, as a start is. On failure the caller restarts the server.
func (h *Host) reload(ctx context.Context, hr schemas.Harness, s *service, slot, local string, fetch func() error) error {
	timeout := hr.Model.StartTimeout.D()
	if timeout == 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := fetch(); err != nil {
		return err
	}
	if _, err := h.pointServing(slot, local); err != nil {
		return err
	}
	for i, st := range hr.Model.Reload {
		if err := httpProbe(http.MethodPost, s.url+st.Post, st.Body, st.Expect)(ctx); err != nil {
			return fmt.Errorf("reload step %d: %w", i+1, err)
		}
	}
	logPath := filepath.Join(h.WorkDir, "logs", s.spec.Name+"-"+strings.NewReplacer("/", "-", ":", "-").Replace(s.key)+".log")
	ready := readyCheck(hr.Model.Ready, s.url, logPath)
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after reload within %s: %w", timeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// modelSlot names model server i among a host's services: "model", then
// "model#1", "model#2"… when a harness keeps several (per_host).
func modelSlot(i int) string {
	if i == 0 {
		return modelName
	}
	return modelName + "#" + strconv.Itoa(i)
}

func isModelSlot(name string) bool {
	return name == modelName || strings.HasPrefix(name, modelName+"#")
}

// MovedError refuses an episode whose weights the fleet has just moved
// off this host, before anything of it ran: Temporal retries it in its
// weights' queue, which a host serving them polls.
type MovedError struct{ Weights string }

func (e *MovedError) Error() string {
	return fmt.Sprintf("weights %s moved off this rollout host as it took the episode; retried where they are served", e.Weights)
}

// SetAssigned tells the host which weights (fleet keys) the fleet has it
// serve; episodes of others, taken from a weights queue, are refused with
// a MovedError unless their weights are loaded anyway.
func (h *Host) SetAssigned(keys []string) {
	h.assignMu.Lock()
	defer h.assignMu.Unlock()
	h.assigned = map[string]bool{}
	for _, k := range keys {
		h.assigned[k] = true
	}
}

// isAssigned says whether the fleet has this host serve weights key wk;
// before the fleet has said anything, every weights is.
func (h *Host) isAssigned(wk string) bool {
	h.assignMu.Lock()
	defer h.assignMu.Unlock()
	return h.assigned == nil || h.assigned[wk]
}

type routedKey struct{}

// Routed marks ctx as an episode taken from a weights queue, where the
// fleet's assignment applies; episodes of the one rollout queue (older
// workflows) are served whatever their weights.
func Routed(ctx context.Context) context.Context { return context.WithValue(ctx, routedKey{}, true) }

func routed(ctx context.Context) bool { v, _ := ctx.Value(routedKey{}).(bool); return v }

// ensure starts spec unless it already runs for key, and adds its port and
// url to vars. Called with h.mu held: episodes wait while a service starts.
func (h *Host) ensure(ctx context.Context, hr schemas.Harness, spec schemas.Service, key string, vars map[string]string, prepare func() (map[string]string, error)) (err error) {
	if spec.External != "" {
		vars[spec.Name+"_url"] = spec.External
		if u, err := url.Parse(spec.External); err == nil && u.Port() != "" {
			vars[spec.Name+"_port"] = u.Port()
		}
		return nil
	}
	// Shared services are keyed by name and harness config, so runs with
	// different configs on one host never stop each other's services; the
	// model server has one slot and is switched when idle (acquire).
	slot := spec.Name
	if !isModelSlot(spec.Name) {
		slot = spec.Name + "@" + key
	}
	if s := h.services[slot]; s != nil {
		if s.key == key && s.alive() {
			vars[spec.Name+"_port"] = strconv.Itoa(s.lease.Port)
			vars[spec.Name+"_url"] = s.url
			return nil
		}
		reason := "weights" // the model server's slot, switched to other weights
		if !s.alive() {
			reason = "exited"
			h.log.Warn("service exited; restarting", "harness", hr.Name, "service", spec.Name)
		}
		instr.ServiceRestart(ctx, spec.Name, reason)
		s.stop()
		delete(h.services, slot)
	}
	fail := func(err error) error {
		h.failed[slot] = failedStart{key: key, at: time.Now(), err: err}
		return &ServiceError{Harness: hr.Name, Service: spec.Name, Err: err}
	}
	// A service that just failed to start fails fast for a while instead of
	// making every waiting episode sit through its start timeout again.
	if f, ok := h.failed[slot]; ok && f.key == key && time.Since(f.at) < failBackoff {
		return &ServiceError{Harness: hr.Name, Service: spec.Name, Err: fmt.Errorf("%w (failed %s ago; retried after %s)", f.err, time.Since(f.at).Round(time.Second), failBackoff)}
	}
	ctx, span := instr.Tracer.Start(ctx, "service.start", trace.WithAttributes(
		attribute.String("harness", hr.Name), attribute.String("service", spec.Name)))
	defer func() { instr.End(span, err) }()
	extra := map[string]string{}
	if prepare != nil {
		var err error
		if extra, err = prepare(); err != nil {
			return err
		}
	}
	lease, err := ports.Allocate()
	if err != nil {
		return fail(err)
	}
	fill := map[string]string{"port": strconv.Itoa(lease.Port)}
	for k, v := range vars {
		fill[k] = v
	}
	for k, v := range extra {
		fill[k] = v
	}
	args, err := harness.FillArgs(spec.Command, fill)
	if err != nil {
		lease.Release()
		return fail(err)
	}
	var env []string
	for k, v := range spec.Env {
		env = append(env, k+"="+harness.Fill(v, fill))
	}
	logPath := filepath.Join(h.WorkDir, "logs", spec.Name+"-"+strings.NewReplacer("/", "-", ":", "-").Replace(key)+".log")
	os.Remove(logPath) // the log line readiness check must not see an earlier start
	p, err := proc.Start(spec.Name, args, env, logPath, false)
	if err != nil {
		lease.Release()
		return fail(err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(lease.Port)
	timeout := spec.StartTimeout.D()
	if timeout == 0 {
		timeout = time.Minute
	}
	if err := proc.WaitReady(ctx, p, timeout, readyCheck(spec.Ready, base, logPath), logPath); err != nil {
		p.Stop(5 * time.Second)
		lease.Release()
		if ctx.Err() != nil {
			return ctx.Err() // the episode was cancelled, the service did not fail
		}
		return fail(fmt.Errorf("%w; its log ends: %s", err, proc.LogTail(logPath, 400)))
	}
	delete(h.failed, slot)
	h.services[slot] = &service{spec: spec, key: key, proc: p, lease: lease, url: base}
	vars[spec.Name+"_port"] = strconv.Itoa(lease.Port)
	vars[spec.Name+"_url"] = base
	h.log.Info("service ready", "harness", hr.Name, "service", spec.Name, "url", base)
	return nil
}

// failBackoff is how long a failed service start is remembered.
const failBackoff = 30 * time.Second

type failedStart struct {
	key string
	at  time.Time
	err error
}

// readyCheck builds the readiness probe a service declares.
func readyCheck(rd schemas.Ready, url, logPath string) func(context.Context) error {
	switch {
	case rd.HTTP != "":
		return httpProbe(http.MethodGet, url+rd.HTTP, "", "")
	case rd.Post != "":
		return httpProbe(http.MethodPost, url+rd.Post, rd.Body, rd.Expect)
	case rd.Log != "":
		return func(context.Context) error {
			b, err := os.ReadFile(logPath)
			if err != nil || !bytes.Contains(b, []byte(rd.Log)) {
				return fmt.Errorf("no %q in its log yet", rd.Log)
			}
			return nil
		}
	}
	return proc.TCPCheck(strings.TrimPrefix(url, "http://"))
}

func httpProbe(method, url, body, expect string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			return err
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s %s: status %d", method, url, resp.StatusCode)
		}
		if expect != "" && !bytes.Contains(b, []byte(expect)) {
			return fmt.Errorf("%s %s: answer lacks %q", method, url, expect)
		}
		return nil
	}
}

// pruneWeights removes the host's cached weights other than keep (a path
// digest/run/weights/etag under root): the model slot serves one weights id
// at a time, and checkpoints of earlier rounds would fill the disk.
func pruneWeights(root string, keep map[string]bool) {
	dirs, _ := filepath.Glob(filepath.Join(root, "*", "*", "*", "*"))
	for _, d := range dirs {
		if rel, err := filepath.Rel(root, d); err == nil && !keep[strings.TrimSuffix(filepath.ToSlash(rel), ".manifest.json")] {
			os.RemoveAll(d)
		}
	}
}

func manifestNames(m schemas.WeightsManifest) []string {
	out := make([]string, len(m.Files))
	for i, f := range m.Files {
		out[i] = f.Name
	}
	return out
}

// Down names the harness's services, the model server included, that this
// host started and that are no longer running: evidence that an episode
// which ended badly met a component's failure, not the planner's.
func (h *Host) Down(hr schemas.Harness) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var down []string
	check := func(name, slot string) {
		if s := h.services[slot]; s != nil && !s.alive() {
			down = append(down, name)
		}
	}
	for _, spec := range hr.Services {
		if spec.External == "" {
			check(spec.Name, spec.Name+"@"+hr.Digest)
		}
	}
	for name, s := range h.services {
		if isModelSlot(name) && !s.alive() {
			down = append(down, "model server")
			break
		}
	}
	return down
}
