package activities_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/host"
	"github.com/roundhouse-rl/roundhouse/internal/nonretryable"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// TestNonRetryableFailsFirstAttempt drives each non-retryable error of the
// activities through its activity method, against real S3, on a worker
// with the interceptor every worker carries (workers.Run). Temporal's
// server decides a retry from the outermost failure the worker sends
// alone, whatever its causes say: each must arrive non-retryable there,
// with the refusal's type, or the activity's retry policy (10 tries for
// control activities, without limit for the trainer) runs it again. The
// SDK's test environment retries by the whole chain instead, so attempt
// counts there would not show the difference; the outermost failure does.
func TestNonRetryableFailsFirstAttempt(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	dir := t.TempDir()
	var rec *activities.Records
	var tr *activities.Trainer
	var ro *activities.Rollout

	putJSON := func(key string, v any) {
		t.Helper()
		if err := store.PutJSON(ctx, s, key, v); err != nil {
			t.Fatal(err)
		}
	}
	put := func(key, body string) {
		t.Helper()
		if err := s.Put(ctx, key, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	// publishWeights stores a weights directory of files under prefix.
	publishWeights := func(prefix string, files map[string]string) {
		t.Helper()
		local := t.TempDir()
		for name, body := range files {
			os.MkdirAll(filepath.Dir(filepath.Join(local, name)), 0o755)
			if err := os.WriteFile(filepath.Join(local, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		wf, err := weights.Dir(local)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := weights.Publish(ctx, s, prefix, wf, schemas.WeightsManifest{WeightsID: filepath.Base(prefix)}); err != nil {
			t.Fatal(err)
		}
	}
	blobName := func(body string) string {
		sum := sha256.Sum256([]byte(body))
		return hex.EncodeToString(sum[:]) + ".png"
	}
	// train runs Trainer.Train for run, its harness trainer command script
	// (sh -c; $1 weights_out, $2 metrics_out) over a batch sending images,
	// with blobs stored and weights w0.
	train := func(env *testsuite.TestActivityEnvironment, run string, h schemas.Harness, images [][]string, blobs map[string]string) error {
		l := schemas.Layout{Run: run}
		h.Name, h.Dir = "fake", dir
		if h.Trainer.Command == nil {
			h.Trainer.Command = []string{"sh", "-c", `mkdir -p "$(dirname "$1")"; echo '{"w":1}' > "$1"; echo '{"loss":1}' > "$2"`,
				"trainer", "{weights_out}", "{metrics_out}"}
		}
		putJSON(l.Harness(), h)
		put(l.Batch(1), imageBatch(t, images))
		for name, body := range blobs {
			put(l.Blob(name), body)
		}
		w0 := map[string]string{"policy.json": `{"w":0}`}
		if h.Model.WeightsFile == "" {
			w0 = map[string]string{"config.json": "{}", weights.ProcessorFile: "{}"}
		}
		publishWeights(l.Weights("w0"), w0)
		env.RegisterActivity(&activities.Trainer{Store: s, WorkDir: filepath.Join(dir, "work-"+run)})
		_, err := env.ExecuteActivity(tr.Train, activities.TrainInput{Run: run, Round: 1, BatchKey: l.Batch(1), WeightsID: "w0", NewWeightsID: "r1"})
		return err
	}
	toy := schemas.ModelServer{WeightsFile: "policy.json"}

	cases := []struct {
		name, typ string
		run       func(env *testsuite.TestActivityEnvironment) error
	}{
		{"BuildBatch: a text-only model's calls sent images", "TextOnlyModel", func(env *testsuite.TestActivityEnvironment) error {
			const run = "nr-text"
			l := schemas.Layout{Run: run}
			putJSON(l.Harness(), schemas.Harness{Name: "h"})
			img := blobName("camera")
			for attempt := range int32(2) {
				e := schemas.Episode{Run: run, Round: 1, Phase: schemas.PhaseTrain, Attempt: attempt, Valid: true, Success: attempt == 0, Reward: float64(1 - attempt)}
				e.EpisodeID = schemas.EpisodeID(1, schemas.PhaseTrain, 0, attempt)
				call := schemas.Call{EpisodeID: e.EpisodeID, Trainable: true, PromptTokenIDs: []int32{1, 2}, CompletionTokenIDs: []int32{3},
					CompletionLogprobs: []float32{-1}, PromptTokens: 2, CompletionTokens: 1, Images: []string{img}}
				if _, err := store.WriteParquet(ctx, s, l.Calls(1, schemas.PhaseTrain, e.EpisodeID), []schemas.Call{call}); err != nil {
					t.Fatal(err)
				}
				if _, err := store.WriteParquet(ctx, s, l.Episodes(1, schemas.PhaseTrain, e.EpisodeID), []schemas.Episode{e}); err != nil {
					t.Fatal(err)
				}
			}
			env.RegisterActivity(&activities.Records{Store: s})
			_, err := env.ExecuteActivity(rec.BuildBatch, activities.BatchInput{Run: run, Round: 1, MaxCallsPerEpisode: 16, Selection: "first", Seed: 1})
			return err
		}},
		{"WriteReport: no call of a training run's validation can train", "Untrainable", func(env *testsuite.TestActivityEnvironment) error {
			const run = "nr-untrainable"
			l := schemas.Layout{Run: run}
			putJSON(l.Harness(), schemas.Harness{Name: "h", Tasks: []schemas.Task{{ID: 0, Suite: "toy"}}, Splits: schemas.Splits{Val: "45-46"}})
			publishWeights(l.Weights("w0"), map[string]string{"policy.json": `{"w":0}`})
			for i, init := range []int32{45, 46} {
				e := schemas.Episode{Run: run, Round: 1, Phase: schemas.PhaseVal, InitID: init, Group: int32(i), Valid: true, WeightsID: "w0"}
				e.EpisodeID = schemas.EpisodeID(1, schemas.PhaseVal, int32(i), 0)
				call := schemas.Call{EpisodeID: e.EpisodeID, UntrainableReason: "temperature_raw,top_k"}
				if _, err := store.WriteParquet(ctx, s, l.Calls(1, schemas.PhaseVal, e.EpisodeID), []schemas.Call{call}); err != nil {
					t.Fatal(err)
				}
				if _, err := store.WriteParquet(ctx, s, l.Episodes(1, schemas.PhaseVal, e.EpisodeID), []schemas.Episode{e}); err != nil {
					t.Fatal(err)
				}
			}
			env.RegisterActivity(&activities.Records{Store: s})
			_, err := env.ExecuteActivity(rec.WriteReport, activities.ReportInput{Run: run, Round: 1, Phase: schemas.PhaseVal,
				Tag: schemas.ValTag(1), WeightsID: "w0", InitKey: "val_init_ids"})
			if err != nil && !strings.Contains(err.Error(), "--logprobs-mode processed_logprobs") {
				t.Errorf("the refusal does not name the fix: %v", err)
			}
			return err
		}},
		{"ListSweepWeights: a source naming no bucket", "BadSource", func(env *testsuite.TestActivityEnvironment) error {
			env.RegisterActivity(&activities.Records{Store: s})
			_, err := env.ExecuteActivity(rec.ListSweepWeights, activities.SweepSource{Source: "s3:///ckpts/", Run: "nr-sweep"})
			return err
		}},
		{"ListSweepWeights: a source in another bucket", "BadSource", func(env *testsuite.TestActivityEnvironment) error {
			env.RegisterActivity(&activities.Records{Store: s})
			_, err := env.ExecuteActivity(rec.ListSweepWeights, activities.SweepSource{Source: "s3://elsewhere/ckpts/", Run: "nr-sweep"})
			return err
		}},
		{"ListSweepWeights: the run's harness changed", "HarnessChanged", func(env *testsuite.TestActivityEnvironment) error {
			putJSON(schemas.Layout{Run: "nr-sweep"}.Harness(), schemas.Harness{Name: "minimal", Digest: "d1"})
			env.RegisterActivity(&activities.Records{Store: s})
			_, err := env.ExecuteActivity(rec.ListSweepWeights, activities.SweepSource{Source: "nr-sweep", Run: "nr-sweep", HarnessDigest: "d2"})
			return err
		}},
		{"ImportWeights: weights changed since listed", "WeightsChanged", func(env *testsuite.TestActivityEnvironment) error {
			publishWeights("nr-ckpts/a/", map[string]string{"policy.json": `{"w":1}`})
			env.RegisterActivity(&activities.Records{Store: s})
			_, err := env.ExecuteActivity(rec.ImportWeights, activities.ImportInput{From: "nr-ckpts/a/", Run: "nr-import", Target: "a-1", Digest: "another digest"})
			return err
		}},
		{"ImportWeights: other weights under the target", "WeightsConflict", func(env *testsuite.TestActivityEnvironment) error {
			publishWeights("nr-ckpts/b/", map[string]string{"policy.json": `{"w":2}`})
			publishWeights(schemas.Layout{Run: "nr-import"}.Weights("b-1"), map[string]string{"policy.json": `{"w":"other"}`})
			env.RegisterActivity(&activities.Records{Store: s})
			_, err := env.ExecuteActivity(rec.ImportWeights, activities.ImportInput{From: "nr-ckpts/b/", Run: "nr-import", Target: "b-1"})
			return err
		}},
		{"Demand: no Temporal client", "NoFleetClient", func(env *testsuite.TestActivityEnvironment) error {
			env.RegisterActivity(&activities.Records{Store: s})
			return errOf(env.ExecuteActivity(rec.Demand, api.DemandChange{}))
		}},
		{"ClosedWorkflows: no Temporal client", "NoFleetClient", func(env *testsuite.TestActivityEnvironment) error {
			env.RegisterActivity(&activities.Records{Store: s})
			return errOf(env.ExecuteActivity(rec.ClosedWorkflows, []string{"episodes-x"}))
		}},
		{"Publish: a staged try's records are gone", "MissingStaged", func(env *testsuite.TestActivityEnvironment) error {
			env.RegisterActivity(&activities.Records{Store: s})
			return errOf(env.ExecuteActivity(rec.Publish, activities.PublishInput{Run: "nr-publish", Round: 1, Phase: schemas.PhaseTrain,
				Tries: []activities.AcceptedTry{{EpisodeID: schemas.EpisodeID(1, schemas.PhaseTrain, 0, 0), Try: "try0-gone"}}}))
		}},
		{"Publish: a staged try is corrupt", "CorruptStaged", func(env *testsuite.TestActivityEnvironment) error {
			l := schemas.Layout{Run: "nr-publish"}
			id, try := schemas.EpisodeID(1, schemas.PhaseTrain, 1, 0), "try0-short"
			staged := l.Staged(1, schemas.PhaseTrain, id, try)
			if _, err := store.WriteParquet(ctx, s, staged+activities.StagedCalls, []schemas.Call{{EpisodeID: id}}); err != nil {
				t.Fatal(err)
			}
			row := schemas.Episode{Run: "nr-publish", Round: 1, Phase: schemas.PhaseTrain, EpisodeID: id, Group: 1, Try: try, NumCalls: 4}
			if _, err := store.WriteParquet(ctx, s, staged+activities.StagedRow, []schemas.Episode{row}); err != nil {
				t.Fatal(err)
			}
			env.RegisterActivity(&activities.Records{Store: s})
			return errOf(env.ExecuteActivity(rec.Publish, activities.PublishInput{Run: "nr-publish", Round: 1, Phase: schemas.PhaseTrain,
				Tries: []activities.AcceptedTry{{EpisodeID: id, Try: try}}}))
		}},
		{"Train: an image name that is no blob name", "BadBlob", func(env *testsuite.TestActivityEnvironment) error {
			return train(env, "nr-badname", schemas.Harness{Model: toy}, [][]string{{"camera.png"}}, nil)
		}},
		{"Train: an image missing from S3", "MissingBlob", func(env *testsuite.TestActivityEnvironment) error {
			return train(env, "nr-missing", schemas.Harness{Model: toy}, [][]string{{blobName("never stored")}}, nil)
		}},
		{"Train: an image whose content is not its name", "BadBlob", func(env *testsuite.TestActivityEnvironment) error {
			return train(env, "nr-forged", schemas.Harness{Model: toy}, [][]string{{blobName("red")}}, map[string]string{blobName("red"): "blue"})
		}},
		{"Train: trainer.command cannot be filled", "BadHarness", func(env *testsuite.TestActivityEnvironment) error {
			return train(env, "nr-command", schemas.Harness{Model: toy, Trainer: schemas.Trainer{Command: []string{"true", "{no_such_var}"}}}, nil, nil)
		}},
		{"Train: the drift guard stops the trainer", "DriftGuard", func(env *testsuite.TestActivityEnvironment) error {
			script := `echo "` + schemas.TrainerDriftGuard + `mean |log pi_old - log pi_rollout| 0.5 exceeds --drift-limit 0.001"; exit 1`
			return train(env, "nr-drift", schemas.Harness{Model: toy, Trainer: schemas.Trainer{Command: []string{"sh", "-c", script}}}, nil, nil)
		}},
		{"Train: vision weights written without their processor", "BadWeights", func(env *testsuite.TestActivityEnvironment) error {
			script := `mkdir -p "$1" && echo '{}' > "$1/config.json" && echo '{"loss":1}' > "$2"`
			return train(env, "nr-vision", schemas.Harness{Model: schemas.ModelServer{Vision: true},
				Trainer: schemas.Trainer{Command: []string{"sh", "-c", script, "trainer", "{weights_out}", "{metrics_out}"}}}, nil, nil)
		}},
		{"RunEpisode: episode.command cannot be filled", "BadHarness", func(env *testsuite.TestActivityEnvironment) error {
			const run = "nr-episode"
			l := schemas.Layout{Run: run}
			h := schemas.Harness{Name: "fake", Dir: dir, Digest: "nr"}
			// A model server that is ready at once and serves nothing: the
			// episode never gets to call it.
			h.Model.Command = []string{"sh", "-c", "echo ready; exec sleep 300"}
			h.Model.Ready = schemas.Ready{Log: "ready"}
			h.Model.WeightsFile = "policy.json"
			h.Episode.Command = []string{"true", "{no_such_var}"}
			putJSON(l.Harness(), h)
			publishWeights(l.Weights("w0"), map[string]string{"policy.json": `{"w":0}`})
			hst, err := host.Start(ctx, host.Config{Store: s, WorkDir: filepath.Join(dir, "rollout"), ProxyListen: "127.0.0.1:0", Name: "nr",
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer hst.Close()
			env.RegisterActivity(&activities.Rollout{Host: hst})
			return errOf(env.ExecuteActivity(ro.RunEpisode, activities.EpisodeInput{Run: run, Round: 1, Phase: schemas.PhaseTrain,
				Task: schemas.Task{ID: 0, Suite: "toy"}, InitID: 11, WeightsID: "w0", InfraTries: 3}))
		}},
	}
	// The rollout activity's own refusal: weights whose generation config
	// cannot be read give no sampling defaults to judge calls by.
	cases = append(cases, struct {
		name, typ string
		run       func(env *testsuite.TestActivityEnvironment) error
	}{"RunEpisode: the weights' generation_config.json is broken", "SamplingDefaults", func(env *testsuite.TestActivityEnvironment) error {
		const run = "nr-genconfig"
		l := schemas.Layout{Run: run}
		h := schemas.Harness{Name: "fake", Dir: dir, Digest: "nr-gc"}
		h.Model.Command = []string{"sh", "-c", "echo ready; exec sleep 300"}
		h.Model.Ready = schemas.Ready{Log: "ready"}
		h.Model.WeightsFile = "policy.json"
		h.Episode.Command = []string{"true"}
		putJSON(l.Harness(), h)
		publishWeights(l.Weights("w0"), map[string]string{"policy.json": `{"w":0}`, "generation_config.json": `{"temperature": "hot"}`})
		hst, err := host.Start(ctx, host.Config{Store: s, WorkDir: filepath.Join(dir, "rollout-gc"), ProxyListen: "127.0.0.1:0", Name: "nr-gc",
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer hst.Close()
		env.RegisterActivity(&activities.Rollout{Host: hst})
		err = errOf(env.ExecuteActivity(ro.RunEpisode, activities.EpisodeInput{Run: run, Round: 1, Phase: schemas.PhaseTrain,
			Task: schemas.Task{ID: 0, Suite: "toy"}, InitID: 11, WeightsID: "w0", InfraTries: 3}))
		if err != nil && !strings.Contains(err.Error(), "generation_config.json") {
			t.Errorf("the refusal does not name the file: %v", err)
		}
		return err
	}})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestActivityEnvironment()
			env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{nonretryable.Interceptor()}})
			err := c.run(env)
			if err == nil {
				t.Fatal("the activity succeeded")
			}
			// The environment wraps the failure the worker sent, converted
			// back, in an ActivityError: its cause is the outermost failure.
			app, ok := errors.Unwrap(err).(*temporal.ApplicationError)
			if !ok {
				t.Fatalf("outermost failure %T: %v", errors.Unwrap(err), err)
			}
			if !app.NonRetryable() || app.Type() != c.typ {
				t.Errorf("outermost failure: type %q, non-retryable %v; want a non-retryable %s (%v)", app.Type(), app.NonRetryable(), c.typ, err)
			}
			// Its message names the refusal once: no cause repeats it.
			if cause := app.Unwrap(); cause != nil && strings.Contains(app.Message(), cause.Error()) {
				t.Errorf("the failure's cause %q repeats its message %q", cause.Error(), app.Message())
			}
		})
	}
}

// errOf is the error of an activity environment's result.
func errOf[T any](_ T, err error) error { return err }
