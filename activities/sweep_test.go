package activities_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// TestSweepActivities runs the sweep's activities on the real S3 server:
// only complete weights are listed, imports copy weights into the
// evaluation run once and never overwrite other weights, the leaderboard
// round-trips sorted with its markdown beside it.
func TestSweepActivities(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	env := recordsEnv(s)
	var rec *activities.Records

	dir := t.TempDir()
	// file writes a local file of weights id, named name inside it.
	file := func(id, name, body string) weights.File {
		p := filepath.Join(dir, id, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return weights.File{Name: name, Path: p}
	}
	publish := func(prefix string, man schemas.WeightsManifest, files ...weights.File) schemas.WeightsManifest {
		t.Helper()
		m, _, err := weights.Publish(ctx, s, prefix, files, man)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a := publish("ckpts/a/", schemas.WeightsManifest{WeightsID: "a", CreatedAt: 2}, file("a", "policy.json", `{"w":[1]}`), file("a", "tok/vocab.txt", "x y"))
	publish("ckpts/b/", schemas.WeightsManifest{WeightsID: "b", CreatedAt: 1}, file("b", "policy.json", `{"w":[2]}`))
	// Incomplete: no manifest (a publish in progress), and a file missing.
	if err := s.Put(ctx, "ckpts/c/policy.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	publish("ckpts/d/", schemas.WeightsManifest{WeightsID: "d"}, file("d", "policy.json", "{}"))
	if err := s.Delete(ctx, "ckpts/d/policy.json"); err != nil {
		t.Fatal(err)
	}
	src := "s3://" + s.Bucket + "/ckpts/"
	list := func(in activities.SweepSource) ([]activities.SweepWeights, error) {
		v, err := env.ExecuteActivity(rec.ListSweepWeights, in)
		if err != nil {
			return nil, err
		}
		var out []activities.SweepWeights
		return out, v.Get(&out)
	}
	got, err := list(activities.SweepSource{Source: src, Run: "sweep-x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "b" || got[1].ID != "a" || got[1].Prefix != "ckpts/a/" || got[1].Digest != schemas.WeightsDigest(a.Files) {
		t.Fatalf("listed %+v, want b then a (oldest first), c and d incomplete", got)
	}
	if _, err := list(activities.SweepSource{Source: "s3://elsewhere/ckpts/", Run: "sweep-x"}); err == nil || !strings.Contains(err.Error(), "bucket elsewhere") {
		t.Errorf("other bucket: %v", err)
	}
	// A run source lists runs/<run>/weights/, and checks the run's harness digest.
	publish(schemas.Layout{Run: "r"}.Weights("w0"), schemas.WeightsManifest{WeightsID: "w0"}, file("w0", "policy.json", "{}"))
	hb, _ := json.Marshal(schemas.Harness{Name: "minimal", Digest: "d1"})
	if err := s.Put(ctx, schemas.Layout{Run: "r"}.Harness(), hb); err != nil {
		t.Fatal(err)
	}
	if got, err := list(activities.SweepSource{Source: "r", Run: "r", HarnessDigest: "d1"}); err != nil || len(got) != 1 || got[0].ID != "w0" {
		t.Errorf("run source: %+v %v", got, err)
	}
	_, err = list(activities.SweepSource{Source: "r", Run: "r", HarnessDigest: "d2"})
	if err == nil || !strings.Contains(err.Error(), "digest d1") || !strings.Contains(err.Error(), "recreate the sweep") {
		t.Errorf("changed harness: %v", err)
	}

	// Import: a verified copy under a content-named id, done once.
	target := schemas.ImportedID("a", schemas.WeightsDigest(a.Files))
	imp := activities.ImportInput{From: "ckpts/a/", Run: "sweep-x", Target: target, Digest: schemas.WeightsDigest(a.Files)}
	if _, err := env.ExecuteActivity(rec.ImportWeights, imp); err != nil {
		t.Fatal(err)
	}
	to := schemas.Layout{Run: "sweep-x"}.Weights(target)
	man, err := weights.Read(ctx, s, to)
	if err != nil {
		t.Fatal(err)
	}
	if !weights.Same(man.Files, a.Files) || man.WeightsID != target || man.CreatedAt != 2 {
		t.Errorf("imported manifest %+v, source %+v", man, a)
	}
	fetched, err := weights.Fetch(ctx, s, to, filepath.Join(t.TempDir(), "w"))
	if err != nil || len(fetched.Files) != 2 {
		t.Fatalf("fetch the imported weights: %v", err)
	}
	etag, _ := s.ETag(ctx, to+schemas.WeightsManifestFile)
	if _, err := env.ExecuteActivity(rec.ImportWeights, imp); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.ETag(ctx, to+schemas.WeightsManifestFile); again != etag {
		t.Error("a second import rewrote the copy")
	}
	// Other weights at the target are never overwritten.
	_, err = env.ExecuteActivity(rec.ImportWeights, activities.ImportInput{From: "ckpts/b/", Run: "sweep-x", Target: target})
	if err == nil || !strings.Contains(err.Error(), "not overwriting") {
		t.Errorf("conflicting import: %v", err)
	}
	if again, _ := s.ETag(ctx, to+schemas.WeightsManifestFile); again != etag {
		t.Error("a conflicting import rewrote the copy")
	}

	// Weights changed since they were listed are not imported under the old digest.
	_, err = env.ExecuteActivity(rec.ImportWeights, activities.ImportInput{From: "ckpts/b/", Run: "sweep-x", Target: "b-123", Digest: "123"})
	if err == nil || !strings.Contains(err.Error(), "changed since the sweep listed them") {
		t.Errorf("changed source: %v", err)
	}
	if ok, _ := s.Exists(ctx, schemas.Layout{Run: "sweep-x"}.Weights("b-123")+"policy.json"); ok {
		t.Error("weights changed since listing were copied")
	}

	// Leaderboard: absent reads empty; written sorted, with markdown.
	v, err := env.ExecuteActivity(rec.ReadLeaderboard, "x")
	if err != nil {
		t.Fatal(err)
	}
	var lb schemas.Leaderboard
	if err := v.Get(&lb); err != nil || lb.Sweep != "x" || len(lb.Entries) != 0 {
		t.Fatalf("absent leaderboard: %+v %v", lb, err)
	}
	lb = schemas.Leaderboard{Sweep: "x", Source: src, Run: "sweep-x", InitKey: "val_init_ids", Entries: []schemas.LeaderboardEntry{
		{WeightsID: "b", SuccessRate: 0.2, Successes: 1, Valid: 5}, {WeightsID: "a", SuccessRate: 0.8, Successes: 4, Valid: 5}}}
	if _, err := env.ExecuteActivity(rec.WriteLeaderboard, lb); err != nil {
		t.Fatal(err)
	}
	if v, err = env.ExecuteActivity(rec.ReadLeaderboard, "x"); err != nil {
		t.Fatal(err)
	}
	var back schemas.Leaderboard
	if err := v.Get(&back); err != nil || len(back.Entries) != 2 || back.Entries[0].WeightsID != "a" || back.UpdatedAtMS == 0 {
		t.Errorf("leaderboard read back %+v %v", back, err)
	}
	md, err := s.Get(ctx, schemas.SweepLeaderboardMarkdown("x"))
	if err != nil || !strings.Contains(string(md), "| 1 | ≈ | `a` | 80.0% [37–97] |") {
		t.Errorf("leaderboard.md %q %v", md, err)
	}

	// FindReport: absent, then present.
	key := schemas.Layout{Run: "sweep-x"}.Report("sweep-x-a")
	var found activities.FoundReport
	if v, err = env.ExecuteActivity(rec.FindReport, key); err != nil || v.Get(&found) != nil || found.Found {
		t.Errorf("absent report: %+v %v", found, err)
	}
	rb, _ := json.Marshal(schemas.Report{Tag: "sweep-x-a", WeightsID: target})
	if err := s.Put(ctx, key, rb); err != nil {
		t.Fatal(err)
	}
	if v, err = env.ExecuteActivity(rec.FindReport, key); err != nil || v.Get(&found) != nil || !found.Found || found.Report.WeightsID != target {
		t.Errorf("stored report: %+v %v", found, err)
	}
}
