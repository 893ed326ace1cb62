package host

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/itest"
	"github.com/roundhouse-rl/roundhouse/internal/spool"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestPruneWeights(t *testing.T) {
	root := t.TempDir()
	keep := "d1/run/r2/etag2"
	for _, p := range []string{"d1/run/r1/etag1/policy.json", "d1/run/r1/etag1.manifest.json", keep + "/policy.json", keep + ".manifest.json", "d2/other/w0/e/config.json"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte("x"), 0o644)
	}
	pruneWeights(root, keep)
	for p, want := range map[string]bool{keep + "/policy.json": true, keep + ".manifest.json": true, "d1/run/r1/etag1": false, "d1/run/r1/etag1.manifest.json": false, "d2/other/w0/e": false} {
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
	// The next worker process on the host.
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
