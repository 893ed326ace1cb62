package activities

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
	"go.temporal.io/sdk/activity"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/ports"
	"github.com/roundhouse-rl/roundhouse/internal/proc"
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

// acquire makes sure the host runs the harness's services and its model
// server with the run's weights, and returns their {name_port}/{name_url}
// values; release lets the model server be switched to other weights.
// Shared services are started once and kept; a service that died is
// restarted by the next episode that needs it.
func (r *Rollout) acquire(ctx context.Context, h schemas.Harness, run, weightsID string) (map[string]string, func(), error) {
	// The model server's key holds the manifest's ETag: a run replaced under
	// the same name never reuses the old run's server or cached files.
	remote := schemas.Layout{Run: run}.Weights(weightsID)
	etag, err := r.Store.ETag(ctx, remote+schemas.WeightsManifestFile)
	if err != nil {
		return nil, nil, fmt.Errorf("weights %s are not published (no manifest): %w", weightsID, err)
	}
	modelKey := h.Digest + "/" + run + "/" + weightsID + "/" + etag
	for {
		r.mu.Lock()
		if r.services == nil {
			r.services, r.failed = map[string]*service{}, map[string]failedStart{}
		}
		vars := map[string]string{"harness_dir": h.Dir}
		for _, spec := range h.Services {
			if err := r.ensure(ctx, h, spec, h.Digest, vars, nil); err != nil {
				r.mu.Unlock()
				return nil, nil, err
			}
		}
		m := r.services[modelName]
		if m != nil && m.key != modelKey && m.users > 0 && m.alive() {
			// Other episodes still use the old weights: wait for them.
			r.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		spec := h.Model.Service
		spec.Name = modelName
		local := filepath.Join(r.WorkDir, "weights", filepath.FromSlash(modelKey))
		err := r.ensure(ctx, h, spec, modelKey, vars, func() (map[string]string, error) {
			if _, err := weights.Fetch(ctx, r.Store, remote, local); err != nil {
				return nil, err
			}
			pruneWeights(filepath.Join(r.WorkDir, "weights"), modelKey)
			return map[string]string{"weights": filepath.Join(local, h.Model.WeightsFile), "served_name": h.Model.ServedName}, nil
		})
		if err != nil {
			r.mu.Unlock()
			return nil, nil, err
		}
		m = r.services[modelName]
		m.users++
		r.Proxy.SetUpstream(m.url)
		r.mu.Unlock()
		var once sync.Once
		return vars, func() {
			once.Do(func() {
				r.mu.Lock()
				m.users--
				r.mu.Unlock()
			})
		}, nil
	}
}

// ensure starts spec unless it already runs for key, and adds its port and
// url to vars. Called with r.mu held: episodes wait while a service starts.
func (r *Rollout) ensure(ctx context.Context, h schemas.Harness, spec schemas.Service, key string, vars map[string]string, prepare func() (map[string]string, error)) (err error) {
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
	if spec.Name != modelName {
		slot = spec.Name + "@" + key
	}
	if s := r.services[slot]; s != nil {
		if s.key == key && s.alive() {
			vars[spec.Name+"_port"] = strconv.Itoa(s.lease.Port)
			vars[spec.Name+"_url"] = s.url
			return nil
		}
		reason := "weights" // the model server's slot, switched to other weights
		if !s.alive() {
			reason = "exited"
			activity.GetLogger(ctx).Warn("service exited; restarting", "harness", h.Name, "service", spec.Name)
		}
		instr.ServiceRestart(ctx, spec.Name, reason)
		s.stop()
		delete(r.services, slot)
	}
	fail := func(err error) error {
		r.failed[slot] = failedStart{key: key, at: time.Now(), err: err}
		return &ServiceError{Harness: h.Name, Service: spec.Name, Err: err}
	}
	// A service that just failed to start fails fast for a while instead of
	// making every waiting episode sit through its start timeout again.
	if f, ok := r.failed[slot]; ok && f.key == key && time.Since(f.at) < failBackoff {
		return &ServiceError{Harness: h.Name, Service: spec.Name, Err: fmt.Errorf("%w (failed %s ago; retried after %s)", f.err, time.Since(f.at).Round(time.Second), failBackoff)}
	}
	ctx, span := tracer.Start(ctx, "service.start", trace.WithAttributes(
		attribute.String("harness", h.Name), attribute.String("service", spec.Name)))
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
	logPath := filepath.Join(r.WorkDir, "logs", spec.Name+"-"+strings.NewReplacer("/", "-", ":", "-").Replace(key)+".log")
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
		return fail(fmt.Errorf("%w; its log ends: %s", err, logTail(logPath, 400)))
	}
	delete(r.failed, slot)
	r.services[slot] = &service{spec: spec, key: key, proc: p, lease: lease, url: base}
	vars[spec.Name+"_port"] = strconv.Itoa(lease.Port)
	vars[spec.Name+"_url"] = base
	activity.GetLogger(ctx).Info("service ready", "harness", h.Name, "service", spec.Name, "url", base)
	return nil
}

// failBackoff is how long a failed service start is remembered.
const failBackoff = 30 * time.Second

type failedStart struct {
	key string
	at  time.Time
	err error
}

// logTail returns the last n bytes of a log on one line.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.Join(strings.Fields(string(b)), " ")
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

// StopForTraining stops the services that ask to make room for training on
// this host, unless an episode is using the model server.
func (r *Rollout) StopForTraining() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, s := range r.services {
		if s.spec.StopBeforeTraining && !(name == modelName && s.users > 0) {
			s.stop()
			delete(r.services, name)
		}
	}
}

// Close stops every service of the host.
func (r *Rollout) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, s := range r.services {
		s.stop()
		delete(r.services, name)
	}
}

// pruneWeights removes the host's cached weights other than keep (a path
// digest/run/weights/etag under root): the model slot serves one weights id
// at a time, and checkpoints of earlier rounds would fill the disk.
func pruneWeights(root, keep string) {
	dirs, _ := filepath.Glob(filepath.Join(root, "*", "*", "*", "*"))
	for _, d := range dirs {
		if rel, err := filepath.Rel(root, d); err == nil && strings.TrimSuffix(filepath.ToSlash(rel), ".manifest.json") != keep {
			os.RemoveAll(d)
		}
	}
}
