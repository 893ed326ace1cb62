// Package host is a rollout host: what one worker process keeps on its
// machine for the episodes it runs. It owns the harness services and the
// model server (each on a port leased from internal/ports, supervised with
// internal/proc), the recording proxy every planner call goes through, and
// the spool that keeps the proxy's records on disk until an episode stores
// them. Start recovers what an earlier worker left in the spool; Close stops
// it all. The episode activity (activities.Rollout) runs on a Host.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/proxy"
	"github.com/roundhouse-rl/roundhouse/internal/spool"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Config is what Start needs.
type Config struct {
	Store       *store.Store
	WorkDir     string // local scratch: spool, weights, service logs
	ProxyListen string // host:port for the recording proxy; port 0 picks one
	Name        string // recorded as the host of its episodes
	Logger      *slog.Logger
}

// Host is a running rollout host; create it with Start.
type Host struct {
	Store     *store.Store
	Proxy     *proxy.Proxy
	Spool     *spool.Spool // the proxy's OnCall/OnBlob write here
	ProxyAddr string       // host:port the proxy listens on
	WorkDir   string
	Name      string

	log      *slog.Logger
	srv      *http.Server
	ln       net.Listener
	mu       sync.Mutex
	probed   probes                 // weights whose model server processor was reported
	services map[string]*service    // by name@config; model servers by modelSlot
	failed   map[string]failedStart // recent failed starts, by the same keys
	stored   sync.Map               // blob keys known to be in the bucket
	slots    slotLog                // the model slot's figures, under mu
	// loadFailed holds weights whose model server failed to start here,
	// by fleet key, until they load.
	loadFailed map[string]fleet.Failure
	// assigned holds the weights the fleet has this host serve (nil: no
	// fleet yet), for Acquire to refuse strays. Under assignMu, not mu: a
	// model server's start holds mu for as long as it takes, and the
	// fleet's agent must not wait for it.
	assignMu sync.Mutex
	assigned map[string]bool
	// view is what Models and SlotStats last answered, given again while
	// mu is held (a model server starting): the host's report to the
	// fleet is its lease, so it never waits out a start.
	viewMu sync.Mutex
	view   hostView
}

// Start opens the spool, serves the recording proxy and stores what earlier
// worker processes on this machine spooled but never completed, before any
// episode runs. A recovery that fails is logged, not fatal: those records
// stay in the spool for the next start.
func Start(ctx context.Context, cfg Config) (*Host, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	sp, err := spool.New(filepath.Join(cfg.WorkDir, "spool"), log)
	if err != nil {
		return nil, err
	}
	px := proxy.New(proxy.Options{Logger: log, OnCall: sp.Call, OnBlob: sp.Blob})
	ln, err := net.Listen("tcp", cfg.ProxyListen)
	if err != nil {
		return nil, fmt.Errorf("recording proxy on %s (choose another --proxy-listen): %w", cfg.ProxyListen, err)
	}
	h := &Host{Store: cfg.Store, Proxy: px, Spool: sp, ProxyAddr: ln.Addr().String(), WorkDir: cfg.WorkDir, Name: cfg.Name,
		log: log, ln: ln, srv: &http.Server{Handler: px, ReadHeaderTimeout: 30 * time.Second}}
	go func() {
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("recording proxy stopped", "error", err)
		}
	}()
	if n, err := h.RecoverOrphans(ctx); err != nil {
		log.Error("orphaned episode records not recovered; they stay in the spool", "error", err)
	} else if n > 0 {
		log.Info("stored orphaned episode tries from an earlier worker", "tries", n)
	}
	log.Info("recording proxy listening", "addr", h.ProxyAddr)
	return h, nil
}

// Close stops the proxy and every service of the host.
func (h *Host) Close() {
	if h.srv != nil {
		h.srv.Close()
	}
	// Serve runs in its own goroutine: a Close that comes before Serve took
	// the listener would leave it open until then, so it is closed here too.
	if h.ln != nil {
		_ = h.ln.Close()
	}
	if h.Spool != nil {
		// Tries still open stay in the spool for the next worker process
		// to recover.
		if err := h.Spool.Close(); err != nil && h.log != nil {
			h.log.Error("spool not closed cleanly", "error", err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.slots.busy("", time.Now()) // a stopped model server is not idle
	for name, s := range h.services {
		s.stop()
		delete(h.services, name)
	}
}

// StopForTraining stops the services that ask to make room for training on
// this machine, unless an episode is using the model server.
func (h *Host) StopForTraining() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, s := range h.services {
		if s.spec.StopBeforeTraining && !(isModelSlot(name) && s.users > 0) {
			if isModelSlot(name) {
				h.slots.busy(name, time.Now())
			}
			s.stop()
			delete(h.services, name)
		}
	}
}

// Recorded returns the stored episode row of key's episode (any try). The
// row is written last, so its presence means the episode is complete.
func (h *Host) Recorded(ctx context.Context, key schemas.EpisodeKey) (schemas.Episode, bool, error) {
	k := schemas.Layout{Run: key.Run}.Episodes(key.Round, key.Phase, key.ID())
	rows, err := store.ReadParquet[schemas.Episode](ctx, h.Store, k)
	if store.IsNotFound(err) {
		return schemas.Episode{}, false, nil
	}
	if err != nil {
		return schemas.Episode{}, false, err
	}
	if len(rows) != 1 {
		return schemas.Episode{}, false, fmt.Errorf("%s holds %d rows, want 1", k, len(rows))
	}
	return rows[0], true, nil
}

// StoreBlobs uploads the blobs a try referenced, once per content and run.
func (h *Host) StoreBlobs(ctx context.Context, key schemas.EpisodeKey) error {
	return h.storeBlobs(ctx, key.Run, h.Spool.Blobs(key))
}

func (h *Host) storeBlobs(ctx context.Context, run string, names []string) error {
	l := schemas.Layout{Run: run}
	for _, name := range names {
		key := l.Blob(name)
		if _, ok := h.stored.Load(key); ok {
			continue
		}
		ok, err := h.Store.Exists(ctx, key)
		if err != nil {
			return err
		}
		if !ok {
			if err := h.Store.PutFile(ctx, key, h.Spool.BlobPath(run, name)); err != nil {
				return err
			}
		}
		h.stored.Store(key, true)
	}
	return nil
}

// StoreOrphan stores a try's records under orphans/ (never trained on), with
// the blobs they reference, and is done with its spool.
func (h *Host) StoreOrphan(ctx context.Context, key schemas.EpisodeKey, calls []schemas.Call) error {
	if err := h.storeOrphan(ctx, key, calls); err != nil {
		return err
	}
	return h.Spool.Done(key)
}

func (h *Host) storeOrphan(ctx context.Context, ep schemas.EpisodeKey, calls []schemas.Call) error {
	var names []string
	for _, c := range calls {
		for _, m := range blobRef.FindAllStringSubmatch(c.Request, -1) {
			if _, err := os.Stat(h.Spool.BlobPath(ep.Run, m[1])); err == nil {
				names = append(names, m[1])
			}
		}
	}
	if err := h.storeBlobs(ctx, ep.Run, names); err != nil {
		return err
	}
	if len(calls) > 0 {
		key := schemas.Layout{Run: ep.Run}.Orphan(ep.Round, ep.Phase, ep.ID(), ep.Retry)
		if _, err := store.WriteParquet(ctx, h.Store, key, calls); err != nil {
			return err
		}
	}
	return nil
}

var blobRef = regexp.MustCompile(regexp.QuoteMeta(proxy.BlobPrefix) + `([0-9a-f]{64}\.[A-Za-z0-9]+)`)

// RecoverOrphans stores what earlier worker processes on this machine
// spooled but never completed (Start calls it before serving episodes).
func (h *Host) RecoverOrphans(ctx context.Context) (int, error) {
	orphans, err := h.Spool.Orphans()
	if err != nil {
		return 0, err
	}
	for _, o := range orphans {
		// A try whose episode row is stored completed: the worker died
		// after storing it, before its spool knew. Its calls are in calls/
		// already; it is not an orphan.
		ep := o.Key
		done, ok, err := h.Recorded(ctx, ep)
		if err != nil {
			return 0, fmt.Errorf("orphan %s try %d: %w", ep.ID(), ep.Retry, err)
		}
		if !ok || done.Retry != ep.Retry {
			calls := o.Calls
			for i := range calls {
				calls[i].Error = strings.TrimPrefix(calls[i].Error+"; ", "; ") + "orphaned: the worker stopped before the episode completed"
				calls[i].Trainable, calls[i].UntrainableReason = false, "orphaned"
			}
			if err := h.storeOrphan(ctx, ep, calls); err != nil {
				return 0, fmt.Errorf("orphan %s try %d: %w", ep.ID(), ep.Retry, err)
			}
		}
		if err := h.Spool.Forget(o); err != nil {
			return 0, err
		}
	}
	return len(orphans), nil
}
