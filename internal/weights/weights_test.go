package weights_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestMain(m *testing.M) {
	code := m.Run()
	itest.Cleanup()
	os.Exit(code)
}

// checkpoint writes a Hugging Face-shaped directory with a nested file.
func checkpoint(t *testing.T) string {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"config.json":                      `{"model_type":"qwen3"}`,
		"model-00001-of-00002.safetensors": strings.Repeat("a", 5000),
		"model-00002-of-00002.safetensors": strings.Repeat("b", 3000),
		"tokenizer/tokenizer.json":         `{"version":"1.0"}`,
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPublishFetch(t *testing.T) {
	stack := itest.Start(t)
	s := stack.Store
	ctx := context.Background()
	src := checkpoint(t)
	files, err := weights.Dir(src)
	if err != nil {
		t.Fatal(err)
	}
	prefix := schemas.Layout{Run: "wt"}.Weights("r1")
	if _, err := weights.Read(ctx, s, prefix); err == nil || !strings.Contains(err.Error(), "incomplete or absent") {
		t.Fatalf("Read before publishing: %v", err)
	}
	man, _, err := weights.Publish(ctx, s, prefix, files, schemas.WeightsManifest{WeightsID: "r1", Metrics: schemas.TrainerMetrics{Loss: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	if len(man.Files) != 4 {
		t.Fatalf("manifest lists %d files, want 4: %+v", len(man.Files), man.Files)
	}
	got, err := weights.Read(ctx, s, prefix)
	if err != nil || got.Metrics.Loss != 0.5 || len(got.Files) != 4 {
		t.Fatalf("Read = %+v, %v", got, err)
	}

	dst := filepath.Join(t.TempDir(), "cache", "r1")
	if _, err := weights.Fetch(ctx, s, prefix, dst); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		want, _ := os.ReadFile(f.Path)
		b, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(f.Name)))
		if err != nil || string(b) != string(want) {
			t.Fatalf("%s fetched as %d bytes (%v), want %d", f.Name, len(b), err, len(want))
		}
	}

	// A file changed behind the manifest's back is caught on fetch, and
	// nothing half-checked appears at the destination.
	if err := s.Put(ctx, prefix+"config.json", []byte(`{"model_type":"llama"}`)); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "r1")
	if _, err := weights.Fetch(ctx, s, prefix, bad); err == nil || !strings.Contains(err.Error(), "config.json does not match its manifest") {
		t.Fatalf("Fetch of tampered weights: %v", err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Fatalf("tampered fetch left %s behind: %v", bad, err)
	}
	// Verify checks presence and size: a lost shard fails it.
	if _, err := s.DeletePrefix(ctx, prefix+"model-00002"); err != nil {
		t.Fatal(err)
	}
	if err := weights.Verify(ctx, s, prefix, man); err == nil || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors is missing") {
		t.Fatalf("Verify after losing a shard: %v", err)
	}
	// The verified local copy is reused without S3.
	if _, err := weights.Fetch(ctx, s, prefix, dst); err != nil {
		t.Fatalf("second Fetch of a complete copy: %v", err)
	}
}

func TestDirRefuses(t *testing.T) {
	if _, err := weights.Dir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "holds no files") {
		t.Fatalf("empty dir: %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, schemas.WeightsManifestFile), []byte("{}"), 0o644)
	if _, err := weights.Dir(dir); err == nil || !strings.Contains(err.Error(), "rename it") {
		t.Fatalf("dir with its own manifest.json: %v", err)
	}
	if _, err := weights.Dir(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing dir: %v", err)
	}
}

func TestCheckVision(t *testing.T) {
	for _, c := range []struct {
		names []string
		ok    bool
	}{
		{[]string{"policy.json"}, true}, // not a Hugging Face directory
		{[]string{"config.json", "model.safetensors", "preprocessor_config.json", "tokenizer.json"}, true},
		{[]string{"config.json", "model.safetensors", "tokenizer.json"}, false},
	} {
		err := weights.CheckVision(c.names, "/ckpt/w0")
		if (err == nil) != c.ok {
			t.Errorf("%v: %v", c.names, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "/ckpt/w0") || !strings.Contains(err.Error(), weights.ProcessorFile)) {
			t.Errorf("error names neither the weights nor the file: %v", err)
		}
	}
}

// Two trainer tries publish the same weights id, each into its own folder:
// the first manifest stands, the late try is told and gets the published
// manifest back, and fetching yields the first try's bytes.
func TestPublishIsFencedAgainstALateTry(t *testing.T) {
	stack := itest.Start(t)
	s := stack.Store
	ctx := context.Background()
	prefix := schemas.Layout{Run: "fence"}.Weights("r1")
	try := func(dir, content string) ([]weights.File, string) {
		d := t.TempDir()
		os.WriteFile(filepath.Join(d, "policy.json"), []byte(content), 0o644)
		files, err := weights.Dir(d)
		if err != nil {
			t.Fatal(err)
		}
		return files, dir
	}
	first, dirA := try("try1-aaaaaaaa/", `{"w":1}`)
	man, created, err := weights.Publish(ctx, s, prefix, first, schemas.WeightsManifest{WeightsID: "r1", Dir: dirA, Metrics: schemas.TrainerMetrics{Loss: 1}})
	if err != nil || !created || man.Dir != dirA {
		t.Fatalf("first try: created %v dir %q, %v", created, man.Dir, err)
	}
	late, dirB := try("try0-bbbbbbbb/", `{"w":2}`)
	got, created, err := weights.Publish(ctx, s, prefix, late, schemas.WeightsManifest{WeightsID: "r1", Dir: dirB, Metrics: schemas.TrainerMetrics{Loss: 2}})
	if err != nil || created || got.Dir != dirA || got.Metrics.Loss != 1 {
		t.Fatalf("late try: created %v, manifest %+v, %v; want the first try's", created, got, err)
	}
	dst := filepath.Join(t.TempDir(), "r1")
	if _, err := weights.Fetch(ctx, s, prefix, dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "policy.json")); string(b) != `{"w":1}` {
		t.Errorf("fetched %s, want the first try's weights", b)
	}
	if ok, _ := s.Exists(ctx, prefix+dirB+"policy.json"); ok {
		t.Error("the late try uploaded though the weights were published")
	}
}
