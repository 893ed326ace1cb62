package standin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/outcome"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// chainToSuccess scripts execute_skill calls that bring the stand-in env
// (task, seed) to its goal when service calls fail every failEvery-th time
// (0: never): a call that fails moves nothing, so the script simulates the
// services' counters as the episode will meet them.
func chainToSuccess(t *testing.T, task, seed, failEvery int) [][2]string {
	t.Helper()
	env := NewEnv("libero_object_swap", task, seed, 400)
	fails := func(n int) bool { return failEvery > 0 && n%failEvery == 0 }
	var script [][2]string
	sam3, vla := 0, 0
	for i := 0; i < 200 && !env.terminated; i++ {
		instr := fmt.Sprintf("pick up the salad dressing, attempt %d", i)
		script = append(script, [2]string{"execute_skill", fmt.Sprintf(`{"instruction":%q}`, instr)})
		if sam3++; fails(sam3) {
			continue
		}
		if vla++; fails(vla) {
			continue
		}
		if _, err := env.Step(ChunkFor(instr)); err != nil {
			t.Fatal(err)
		}
	}
	if !env.terminated {
		t.Fatal("no instruction sequence reached the goal in 200 turns")
	}
	return script
}

// Every row of the failure table (docs/design.md §7), produced by the
// stand-in rpent as a process run and classified by the adapter with the
// evidence the rollout worker has (the proxy's records, the services'
// state, the exit). Rows 4 and 6 have more cases in TestPlannerErrors.
func TestEveryFailureTableRow(t *testing.T) {
	const task, seed = 2, 12
	ok := []schemas.Call{{HTTPStatus: 200}} // a healthy model call, as the proxy records it
	play := func(t *testing.T, base string, failEvery, maxTurns int, k Knobs, ctx context.Context) (string, int) {
		_, _, _, urls := services(t, task, seed, failEvery)
		cfg := config(t, base, task, seed, urls)
		cfg.MaxTurns = maxTurns
		return cfg.OutputDir, Run(ctx, cfg, k, io.Discard)
	}
	answering := func(status int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":{"message":"injected"}}`, status)
		}))
		t.Cleanup(srv.Close)
		return srv.URL + "/v1"
	}
	type want struct {
		valid, success bool
		class, reason  string
		says           string
	}
	rows := []struct {
		row  int
		name string
		run  func(t *testing.T) (string, outcome.Exit)
		want want
	}{
		{1, "program cannot start", func(t *testing.T) (string, outcome.Exit) {
			err := exec.Command(filepath.Join(t.TempDir(), "rpent")).Start()
			return t.TempDir(), outcome.Exit{Err: err}
		}, want{class: schemas.FailureInfra, says: "could not run"}},
		{2, "success stands against a later non-zero exit and timeout", func(t *testing.T) (string, outcome.Exit) {
			dir, code := play(t, scripted(t, chainToSuccess(t, task, seed, 0)...).URL+"/v1", 0, 200, knobs, context.Background())
			if code != ExitOK {
				t.Fatalf("exit %d", code)
			}
			return dir, outcome.Exit{Code: ExitPlanner, TimedOut: true, Health: outcome.HealthOf(ok)}
		}, want{valid: true, success: true}},
		{3, "success after a service error", func(t *testing.T) (string, outcome.Exit) {
			dir, code := play(t, scripted(t, chainToSuccess(t, task, seed, 3)...).URL+"/v1", 3, 200, knobs, context.Background())
			if code != ExitOK {
				t.Fatalf("exit %d", code)
			}
			return dir, outcome.Exit{Health: outcome.HealthOf(ok)}
		}, want{class: schemas.FailureInfra, says: "service error before success"}},
		{4, "the model server answers 503", func(t *testing.T) (string, outcome.Exit) {
			dir, code := play(t, answering(503), 0, 8, knobs, context.Background())
			return dir, outcome.Exit{Code: code, Health: outcome.HealthOf([]schemas.Call{{HTTPStatus: 503}})}
		}, want{class: schemas.FailureInfra, says: "the model server failed 1 call"}},
		{5, "every VLA and SAM3 call fails", func(t *testing.T) (string, outcome.Exit) {
			dir, code := play(t, scripted(t, [2]string{"execute_skill", `{"instruction":"pick up the ketchup"}`}).URL+"/v1", 1, 8, knobs, context.Background())
			return dir, outcome.Exit{Code: code, Health: outcome.HealthOf(ok)}
		}, want{class: schemas.FailureInfra, says: "sam3"}},
		{6, "no model call: the planner's setup failed", func(t *testing.T) (string, outcome.Exit) {
			dir, code := play(t, scripted(t).URL+"/v1", 0, 8, Knobs{ModelTimeout: time.Second, ServiceTimeout: time.Second}, context.Background())
			return dir, outcome.Exit{Code: code, Health: outcome.HealthOf(nil)}
		}, want{class: schemas.FailureInfra, says: "before asking the model anything"}},
		{7, "out of time, everything healthy", func(t *testing.T) (string, outcome.Exit) {
			k := knobs
			k.HangTasks = "*"
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond) // the worker's episode.timeout
			defer cancel()
			dir, code := play(t, scripted(t).URL+"/v1", 0, 8, k, ctx)
			return dir, outcome.Exit{Code: code, TimedOut: true, Health: outcome.HealthOf(ok)}
		}, want{valid: true, class: schemas.FailureTask, reason: outcome.ReasonOutOfTime, says: "ran out of time"}},
		{8, "states.json missing", func(t *testing.T) (string, outcome.Exit) {
			dir, code := play(t, scripted(t).URL+"/v1", 0, 8, knobs, context.Background())
			if err := os.Remove(filepath.Join(dir, "states.json")); err != nil {
				t.Fatal(err)
			}
			return dir, outcome.Exit{Code: code, Health: outcome.HealthOf(ok)}
		}, want{class: schemas.FailureInfra, says: "states.json"}},
		{9, "the planner's malformed request (400)", func(t *testing.T) (string, outcome.Exit) {
			dir, code := play(t, answering(400), 0, 8, knobs, context.Background())
			if code != ExitPlanner {
				t.Fatalf("exit %d, want %d", code, ExitPlanner)
			}
			return dir, outcome.Exit{Code: code, Health: outcome.HealthOf([]schemas.Call{{HTTPStatus: 400}})}
		}, want{valid: true, class: schemas.FailureTask, reason: outcome.ReasonPlannerError, says: "planner error, no component failed"}},
		{10, "out of turns, never terminated", func(t *testing.T) (string, outcome.Exit) {
			loop := make([][2]string, 3)
			for i := range loop {
				loop[i] = [2]string{"detect", `{"object":"basket"}`}
			}
			dir, code := play(t, scripted(t, loop...).URL+"/v1", 0, 3, knobs, context.Background())
			return dir, outcome.Exit{Code: code, Health: outcome.HealthOf(ok)}
		}, want{valid: true, class: schemas.FailureTask, reason: "not_terminated", says: "not terminated after 0 steps"}},
		{10, "finish claimed, never terminated", func(t *testing.T) (string, outcome.Exit) {
			dir, code := play(t, scripted(t).URL+"/v1", 0, 8, knobs, context.Background())
			return dir, outcome.Exit{Code: code, Health: outcome.HealthOf(ok)}
		}, want{valid: true, class: schemas.FailureTask, reason: outcome.ReasonFinishClaimed, says: "claimed success"}},
	}
	for _, r := range rows {
		t.Run(fmt.Sprintf("row %d %s", r.row, r.name), func(t *testing.T) {
			dir, exit := r.run(t)
			got := outcome.Decide(rpentSpec, dir, exit)
			w := r.want
			if got.Valid != w.valid || got.Success != w.success || got.FailureClass != w.class || got.Reason != w.reason || !strings.Contains(got.Termination, w.says) {
				t.Errorf("outcome %+v\nwant valid=%v success=%v class=%q reason=%q, termination containing %q", got, w.valid, w.success, w.class, w.reason, w.says)
			}
		})
	}
}
