package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// runSweep runs `starter sweep ARGS…` against e and returns its output.
func runSweep(ctx context.Context, e *connect.Endpoints, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := sweepCmd(e)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// Every bad input of create, and a bad name anywhere, fails before any
// server is contacted, in one line naming the input and the fix.
func TestSweepBadInput(t *testing.T) {
	port := itest.Port(t)
	// Endpoints nothing listens on: reaching them would fail differently.
	e := connect.Endpoints{Temporal: "127.0.0.1:" + strconv.Itoa(port), Namespace: "default",
		S3: connect.FromEnv().S3}
	e.S3.Endpoint, e.S3.Bucket = "http://127.0.0.1:"+strconv.Itoa(port), "roundhouse"
	good := "../harnesses/minimal/harness.yaml"
	base := []string{"create", "--name", "n", "--config", good}
	cases := []struct {
		args []string
		want []string
	}{
		{append(base, "--run", "r"), []string{"--every or --cron is required"}},
		{append(base, "--run", "r", "--every", "6h", "--cron", "0 3 * * *"), []string{"both given", "choose one"}},
		{append(base, "--run", "r", "--every", "6x"), []string{"--every", "not a duration"}},
		{append(base, "--run", "r", "--cron", "0 25 * * *"), []string{"--cron", "five fields"}},
		{append(base, "--every", "6h"), []string{"--run or --weights-prefix is required"}},
		{append(base, "--every", "6h", "--run", "r", "--weights-prefix", "s3://roundhouse/ckpts/"), []string{"both given"}},
		{append(base, "--every", "6h", "--weights-prefix", "roundhouse/ckpts/"), []string{"--weights-prefix", "s3://bucket/prefix/"}},
		{append(base, "--every", "6h", "--weights-prefix", "s3://roundhouse"), []string{"--weights-prefix", "names no prefix"}},
		{append(base, "--every", "6h", "--weights-prefix", "s3://other/ckpts/"), []string{"bucket other", "workers read bucket roundhouse"}},
		{append(base, "--every", "6h", "--run", "a b"), []string{"--run", "a b"}},
		{append(base, "--every", "6h", "--run", "r", "--init-key", "train_init_ids"), []string{"--init-key", "val_init_ids"}},
		{append(base, "--every", "6h", "--run", "r", "--var", "gpu=0"), []string{"--var gpu=0"}},
		{append(base, "--every", "6h", "--run", "r", "--parallel", "0"), []string{"--parallel"}},
		{append(base, "--every", "6h", "--run", "r", "--priority", "6"), []string{"--priority 6", "1 (served first) to 5"}},
		{[]string{"create", "--name", "n", "--every", "6h", "--run", "r"}, []string{"--config is required"}},
		{[]string{"create", "--name", "a/b", "--every", "6h", "--run", "r", "--config", good}, []string{"--name", "a/b"}},
		{[]string{"create", "--every", "6h", "--run", "r", "--config", good}, []string{"--name"}},
		{[]string{"pause", "--name", "a b"}, []string{"--name"}},
		{[]string{"trigger"}, []string{"--name"}},
		{[]string{"show", "--name", ""}, []string{"--name"}},
	}
	for _, c := range cases {
		out, err := runSweep(context.Background(), &e, c.args...)
		name := strings.Join(c.args, " ")
		if err == nil {
			t.Errorf("%s: no error (%s)", name, out)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", name, err, w)
			}
		}
		if strings.Contains(err.Error(), "Temporal") || strings.Contains(err.Error(), "not reachable") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: not a one-line input error: %v", name, err)
		}
	}
}

// TestSweepSchedule creates a sweep of a tiny run on the real servers,
// triggers it, and checks the leaderboard; a second trigger evaluates
// nothing new; bad commands change nothing.
func TestSweepSchedule(t *testing.T) {
	stack := itest.Start(t)
	bins := itest.Binaries(t)
	root := itest.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stack.StartWorker(t, bins, "main")

	// A run as `starter train` leaves it: harness.json and weights w0.
	s := stack.Store
	const run = "itsweep"
	l := schemas.Layout{Run: run}
	config := filepath.Join(root, "harnesses/minimal/harness.yaml")
	h, err := harness.Load(config, map[string]string{"bin": bins})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutJSON(ctx, s, l.Harness(), h); err != nil {
		t.Fatal(err)
	}
	files, err := weights.Dir(filepath.Join(root, "harnesses/minimal/weights/w0"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := weights.Publish(ctx, s, l.Weights("w0"), files, schemas.WeightsManifest{WeightsID: "w0"}); err != nil {
		t.Fatal(err)
	}

	e := stack.Endpoints
	sweep := func(args ...string) string {
		t.Helper()
		out, err := runSweep(ctx, &e, args...)
		if err != nil {
			t.Fatalf("sweep %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	refused := func(want string, args ...string) {
		t.Helper()
		out, err := runSweep(ctx, &e, args...)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("sweep %s: error %v, want one line with %q\n%s", strings.Join(args, " "), err, want, out)
		}
	}
	create := []string{"create", "--name", "it", "--every", "1h", "--config", config, "--var", "bin=" + bins, "--run", run}
	out := sweep(create...)
	if !strings.Contains(out, "created sweep it") || !strings.Contains(out, "next sweep:") {
		t.Errorf("create printed %q", out)
	}
	refused("sweep it exists", create...)
	c, err := connect.Temporal(ctx, e, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := api.DescribeSweep(ctx, c, "it")
	if err != nil || d.Schedule.Policy == nil || d.Schedule.Policy.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_SKIP {
		t.Errorf("schedule policy %+v %v, want overlap skip", d, err)
	}
	refused("run nope does not exist", "create", "--name", "other", "--every", "1h", "--config", config, "--var", "bin="+bins, "--run", "nope")
	refused("another harness", "create", "--name", "other", "--every", "1h", "--config", config, "--run", run)
	refused("no sweep named nope", "pause", "--name", "nope")
	refused("no sweep named nope", "trigger", "--name", "nope")

	out = sweep("trigger", "--name", "it", "--wait", "--wait-timeout", "4m")
	if !strings.Contains(out, "evaluated 1 weights (w0), 0 already on the leaderboard") || !strings.Contains(out, "| 1 | ≈ | `w0` |") {
		t.Errorf("first trigger printed %q", out)
	}
	var lb schemas.Leaderboard
	if err := store.GetJSON(ctx, s, schemas.SweepLeaderboard("it"), &lb); err != nil {
		t.Fatal(err)
	}
	cells := len(h.Tasks) * 5 // val_init_ids 45-49
	if len(lb.Entries) != 1 || lb.Source != run || lb.Run != run || lb.InitKey != "val_init_ids" {
		t.Fatalf("leaderboard %+v", lb)
	}
	w0 := lb.Entries[0]
	if w0.WeightsID != "w0" || w0.Tag != "sweep-it-w0" || w0.Episodes != cells || w0.Valid == 0 || len(w0.SuccessCI95) != 2 ||
		w0.SuccessRate < 0 || w0.SuccessRate > 1 || w0.SuccessRate != float64(w0.Successes)/float64(w0.Valid) {
		t.Errorf("entry %+v (want %d episodes)", w0, cells)
	}
	var rep schemas.Report
	if err := store.GetJSON(ctx, s, w0.ReportKey, &rep); err != nil || rep.WeightsID != "w0" || rep.Overall.SuccessRate != w0.SuccessRate {
		t.Errorf("report %s: %+v %v", w0.ReportKey, rep.Overall, err)
	}
	if md, err := s.Get(ctx, schemas.SweepLeaderboardMarkdown("it")); err != nil || !strings.Contains(string(md), "`w0`") {
		t.Errorf("leaderboard.md: %q %v", md, err)
	}

	// Again: w0 is on the leaderboard, so nothing is evaluated.
	out = sweep("trigger", "--name", "it", "--wait", "--wait-timeout", "2m")
	if !strings.Contains(out, "evaluated 0 weights, 1 already on the leaderboard") {
		t.Errorf("second trigger printed %q", out)
	}
	var again schemas.Leaderboard
	if err := store.GetJSON(ctx, s, schemas.SweepLeaderboard("it"), &again); err != nil {
		t.Fatal(err)
	}
	if len(again.Entries) != 1 || !reflect.DeepEqual(again.Entries[0], w0) {
		t.Errorf("leaderboard changed: %+v, was %+v", again.Entries, w0)
	}
	if out := sweep("show", "--name", "it"); !strings.Contains(out, "| 1 | ≈ | `w0` |") {
		t.Errorf("show printed %q", out)
	}

	if out := sweep("pause", "--name", "it"); !strings.Contains(out, "paused") {
		t.Errorf("pause printed %q", out)
	}
	// Listing is eventually consistent: wait for the paused state to show.
	for deadline := time.Now().Add(20 * time.Second); ; {
		out := sweep("list")
		if strings.Contains(out, "it ") && strings.Contains(out, "paused") && strings.Contains(out, "every 1h") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("list never showed the paused sweep: %q", out)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	sweep("unpause", "--name", "it")
	sweep("delete", "--name", "it")
	refused("no sweep named it", "trigger", "--name", "it")

	// The name's leaderboard belongs to run itsweep: a new sweep of that
	// name over a prefix is refused and writes nothing.
	refused("has a leaderboard of itsweep", "create", "--name", "it", "--every", "1h", "--config", config, "--var", "bin="+bins,
		"--weights-prefix", "s3://"+s.Bucket+"/ckpts/")
	if ok, err := s.Exists(ctx, schemas.Layout{Run: schemas.SweepRun("it")}.Harness()); err != nil || ok {
		t.Errorf("a refused create wrote the sweep run's harness.json (%v)", err)
	}
	var after schemas.Leaderboard
	if err := store.GetJSON(ctx, s, schemas.SweepLeaderboard("it"), &after); err != nil || after.UpdatedAtMS != again.UpdatedAtMS {
		t.Errorf("leaderboard changed by a refused command (%v)", err)
	}

	// Weights outside any run: imported into run sweep-ext, then evaluated.
	if _, _, err := weights.Publish(ctx, s, "ckpts/w0/", files, schemas.WeightsManifest{WeightsID: "w0"}); err != nil {
		t.Fatal(err)
	}
	sweep("create", "--name", "ext", "--cron", "0 3 * * *", "--config", config, "--var", "bin="+bins, "--weights-prefix", "s3://"+s.Bucket+"/ckpts/")
	out = sweep("trigger", "--name", "ext", "--wait", "--wait-timeout", "4m")
	var ext schemas.Leaderboard
	if err := store.GetJSON(ctx, s, schemas.SweepLeaderboard("ext"), &ext); err != nil {
		t.Fatal(err)
	}
	if len(ext.Entries) != 1 || ext.Run != "sweep-ext" || ext.Entries[0].WeightsID != "w0" || ext.Entries[0].Episodes != cells {
		t.Fatalf("leaderboard of the prefix sweep %+v\n%s", ext, out)
	}
	imported := ext.Entries[0].RunWeightsID
	man, err := weights.Read(ctx, s, schemas.Layout{Run: "sweep-ext"}.Weights(imported))
	if err != nil || !strings.HasPrefix(imported, "w0-") {
		t.Fatalf("imported weights %s: %v", imported, err)
	}
	local, _ := weights.Describe(files)
	if !weights.Same(man.Files, local) {
		t.Errorf("imported weights differ from the source: %+v", man.Files)
	}
	sweep("delete", "--name", "ext")
	b, _ := json.Marshal(ext)
	t.Logf("leaderboard of the prefix sweep: %s", b)
}
