package activities_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/npz"
	"github.com/roundhouse-rl/roundhouse/internal/ports"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// The trainer activity against real S3: publishes weights with a manifest,
// uploads its log, returns the stored result on retry without training
// twice, and fails with the log's tail when the trainer fails.
func TestTrainPublishesAndVerifies(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs.txt")
	// w0 is a weights directory: policy.json, or a checkpoint with a
	// nested tokenizer when the harness names no weights_file.
	setupWith := func(run, weightsFile, script string) {
		t.Helper()
		h := schemas.Harness{Name: "fake", Dir: dir,
			Model:   schemas.ModelServer{WeightsFile: weightsFile},
			Trainer: schemas.Trainer{Command: []string{"sh", "-c", script, "trainer", "{weights_in}", "{weights_out}", "{metrics_out}", "{batch}", "{rdzv_port}"}}}
		b, _ := json.Marshal(h)
		l := schemas.Layout{Run: run}
		for key, body := range map[string]string{l.Harness(): string(b), l.Batch(1): imageBatch(t, nil)} {
			if err := s.Put(ctx, key, []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		w0 := t.TempDir()
		files := map[string]string{"policy.json": `{"w":0}`}
		if weightsFile == "" {
			files = map[string]string{"config.json": `{"layers":2}`, "tokenizer/tokenizer.json": `{}`}
		}
		for name, body := range files {
			os.MkdirAll(filepath.Dir(filepath.Join(w0, name)), 0o755)
			os.WriteFile(filepath.Join(w0, name), []byte(body), 0o644)
		}
		wf, err := weights.Dir(w0)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := weights.Publish(ctx, s, l.Weights("w0"), wf, schemas.WeightsManifest{WeightsID: "w0"}); err != nil {
			t.Fatal(err)
		}
	}
	setup := func(run, script string) { setupWith(run, "policy.json", script) }
	train := func(run string) (schemas.TrainerMetrics, error) {
		var env testsuite.WorkflowTestSuite
		aenv := env.NewTestActivityEnvironment()
		aenv.RegisterActivity(&activities.Trainer{Store: s, WorkDir: filepath.Join(dir, "work")})
		var tr *activities.Trainer
		v, err := aenv.ExecuteActivity(tr.Train, activities.TrainInput{Run: run, Round: 1, BatchKey: schemas.Layout{Run: run}.Batch(1), WeightsID: "w0", NewWeightsID: "r1"})
		var m schemas.TrainerMetrics
		if err == nil {
			err = v.Get(&m)
		}
		return m, err
	}

	good := `echo run >> ` + runs + `; echo "step 1 loss 0.25"; cat "$1" > /dev/null && echo '{"w":1}' > "$2" && echo '{"loss":0.25,"steps":1}' > "$3"`
	setup("ok", good)
	m, err := train("ok")
	if err != nil || m.Loss != 0.25 || m.Steps != 1 {
		t.Fatalf("train: %+v %v", m, err)
	}
	l := schemas.Layout{Run: "ok"}
	b, err := s.Get(ctx, l.Weights("r1")+schemas.WeightsManifestFile)
	if err != nil {
		t.Fatal(err)
	}
	var man schemas.WeightsManifest
	if err := json.Unmarshal(b, &man); err != nil || len(man.Files) != 1 || man.Files[0].Name != "policy.json" || man.Files[0].Size != 8 || len(man.Files[0].SHA256) != 64 || man.Metrics.Loss != 0.25 {
		t.Fatalf("manifest %+v %v", man, err)
	}
	// The files lie in the try's own folder, which the manifest names.
	if !strings.HasPrefix(man.Dir, "try0-") || !strings.HasSuffix(man.Dir, "/") {
		t.Fatalf("manifest dir %q, want the first try's folder", man.Dir)
	}
	if got, _ := s.Get(ctx, man.Key(l.Weights("r1"), "policy.json")); strings.TrimSpace(string(got)) != `{"w":1}` {
		t.Fatalf("weights %q", got)
	}
	if log, err := s.Get(ctx, l.TrainerLog(1, 1)); err != nil || !strings.Contains(string(log), "step 1 loss 0.25") {
		t.Fatalf("trainer log %q %v", log, err)
	}
	// A retry (the activity ran again after its result was lost) returns the
	// published result instead of training twice.
	if m2, err := train("ok"); err != nil || m2 != m {
		t.Fatalf("retry: %+v %v", m2, err)
	}
	if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") != 1 {
		t.Fatalf("trainer ran %d times, want 1", strings.Count(string(b), "run"))
	}

	// The rendezvous port is leased from the machine's port locks while the
	// trainer runs, and given back when Train returns.
	t.Setenv("ROUNDHOUSE_PORTS_DIR", t.TempDir())
	portFile, goOn := filepath.Join(dir, "port"), filepath.Join(dir, "go-on")
	setup("port", `echo "$5" > `+portFile+`.tmp && mv `+portFile+`.tmp `+portFile+`; while [ ! -f `+goOn+` ]; do sleep 0.05; done; `+good)
	trained := make(chan error, 1)
	go func() { _, err := train("port"); trained <- err }()
	var port int
	for port == 0 {
		select {
		case err := <-trained:
			t.Fatalf("trainer ended before it was released: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if b, err := os.ReadFile(portFile); err == nil {
			if port, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil || port <= 0 {
				t.Fatalf("rdzv_port %q", b)
			}
		}
	}
	if !ports.Held(port) {
		t.Errorf("rendezvous port %d is not locked while the trainer runs", port)
	}
	os.WriteFile(goOn, nil, 0o644)
	if err := <-trained; err != nil {
		t.Fatalf("train: %v", err)
	}
	if ports.Held(port) {
		t.Errorf("rendezvous port %d still locked after Train returned", port)
	}

	setup("fails", `echo "CUDA out of memory"; exit 3`)
	if _, err := train("fails"); err == nil || !strings.Contains(err.Error(), "exit 3") || !strings.Contains(err.Error(), "CUDA out of memory") {
		t.Fatalf("failing trainer: %v", err)
	}
	if ok, _ := s.Exists(ctx, schemas.Layout{Run: "fails"}.TrainerLog(1, 1)); !ok {
		t.Error("the log of a failed trainer must be uploaded too")
	}
	if ok, _ := s.Exists(ctx, schemas.Layout{Run: "fails"}.Weights("r1")+schemas.WeightsManifestFile); ok {
		t.Error("a failed trainer must publish no manifest")
	}

	setup("noweights", `echo '{"loss":1}' > "$3"`)
	if _, err := train("noweights"); err == nil || !strings.Contains(err.Error(), "produced no weights") {
		t.Fatalf("trainer without weights: %v", err)
	}
	setup("otherfile", `echo '{"w":1}' > "$(dirname "$2")/model.bin"; echo '{"loss":1}' > "$3"`)
	if _, err := train("otherfile"); err == nil || !strings.Contains(err.Error(), "did not write policy.json") {
		t.Fatalf("trainer writing another file than weights_file: %v", err)
	}

	// Directory weights: {weights_in} and {weights_out} are directories; the
	// whole output directory, nested files included, is published.
	setupWith("dirs", "", `test -f "$1/config.json" && test -f "$1/tokenizer/tokenizer.json" && cp -r "$1/." "$2" && echo shard > "$2/model.safetensors" && echo '{"loss":0.5}' > "$3"`)
	if _, err := train("dirs"); err != nil {
		t.Fatalf("directory weights: %v", err)
	}
	got, err := weights.Read(ctx, s, schemas.Layout{Run: "dirs"}.Weights("r1"))
	var names []string
	for _, f := range got.Files {
		names = append(names, f.Name)
	}
	sort.Strings(names)
	if err != nil || strings.Join(names, ",") != "config.json,model.safetensors,tokenizer/tokenizer.json" {
		t.Fatalf("published directory: %v %v", names, err)
	}
}

// imageBatch is a batch.npz body holding only the image arrays: one sample
// per entry of images, each sending those blob names.
func imageBatch(t *testing.T, images [][]string) string {
	t.Helper()
	names, index, off := schemas.IndexImages(images)
	var buf bytes.Buffer
	w := npz.NewWriter(&buf)
	if err := w.WriteStrings(schemas.BatchImages, names); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteInt32(schemas.BatchImageIndex, index); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteInt64(schemas.BatchImageOffsets, off); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestTrainFetchesImages: the trainer gets the batch's images as verified
// files in {images}; a missing blob or one whose content does not match its
// name stops the round without a retry, naming the key and the episode.
func TestTrainFetchesImages(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	dir := t.TempDir()
	blob := func(body string) string {
		sum := sha256.Sum256([]byte(body))
		return hex.EncodeToString(sum[:]) + ".png"
	}
	red, blue := blob("red pixels"), blob("blue pixels")
	listing := filepath.Join(dir, "listing.txt")
	run := func(name string, images [][]string, blobs map[string]string) error {
		t.Helper()
		l := schemas.Layout{Run: name}
		h := schemas.Harness{Name: "fake", Dir: dir, Model: schemas.ModelServer{WeightsFile: "policy.json"},
			Trainer: schemas.Trainer{Command: []string{"sh", "-c",
				`ls "$1" > ` + listing + ` && cat "$1"/* >> ` + listing + ` && echo '{"w":1}' > "$2" && echo '{"loss":1}' > "$3"`,
				"trainer", "{images}", "{weights_out}", "{metrics_out}"}}}
		b, _ := json.Marshal(h)
		objs := map[string]string{l.Harness(): string(b), l.Batch(1): imageBatch(t, images)}
		for k, v := range blobs {
			objs[l.Blob(k)] = v
		}
		for key, body := range objs {
			if err := s.Put(ctx, key, []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		samples := make([]schemas.Sample, len(images))
		for i := range samples {
			samples[i] = schemas.Sample{Run: name, Round: 1, EpisodeID: fmt.Sprintf("ep-%d", i), CallIndex: int32(2 * i)}
		}
		if _, err := store.WriteParquet(ctx, s, l.Samples(1), samples); err != nil {
			t.Fatal(err)
		}
		w0 := t.TempDir()
		os.WriteFile(filepath.Join(w0, "policy.json"), []byte(`{"w":0}`), 0o644)
		wf, _ := weights.Dir(w0)
		if _, _, err := weights.Publish(ctx, s, l.Weights("w0"), wf, schemas.WeightsManifest{WeightsID: "w0"}); err != nil {
			t.Fatal(err)
		}
		var env testsuite.WorkflowTestSuite
		aenv := env.NewTestActivityEnvironment()
		aenv.RegisterActivity(&activities.Trainer{Store: s, WorkDir: filepath.Join(dir, "work")})
		var tr *activities.Trainer
		_, err := aenv.ExecuteActivity(tr.Train, activities.TrainInput{Run: name, Round: 1, BatchKey: l.Batch(1), WeightsID: "w0", NewWeightsID: "r1"})
		return err
	}

	if err := run("ok", [][]string{{red, blue}, {red}}, map[string]string{red: "red pixels", blue: "blue pixels"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(listing)
	if want := []string{blue, red}; !strings.HasPrefix(string(got), strings.Join(sorted(want), "\n")+"\n") ||
		!strings.Contains(string(got), "red pixels") || !strings.Contains(string(got), "blue pixels") {
		t.Errorf("the trainer saw in {images}:\n%s", got)
	}

	var appErr *temporal.ApplicationError
	err := run("missing", [][]string{{red}, {blue}}, map[string]string{red: "red pixels"})
	if !errors.As(err, &appErr) || !appErr.NonRetryable() || !strings.Contains(err.Error(), "runs/missing/blobs/"+blue) ||
		!strings.Contains(err.Error(), "episode ep-1 call 2") {
		t.Fatalf("missing blob: %v", err)
	}
	err = run("forged", [][]string{{red}}, map[string]string{red: "not red at all"})
	if !errors.As(err, &appErr) || !appErr.NonRetryable() || !strings.Contains(err.Error(), "refused") ||
		!strings.Contains(err.Error(), "episode ep-0 call 0") {
		t.Fatalf("forged blob: %v", err)
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }
