package outcome

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestDecide(t *testing.T) {
	minimalSpec := schemas.OutcomeSpec{Adapter: "minimal", File: "outcome.json"}
	jsonSpec := schemas.OutcomeSpec{Adapter: "json", File: "result.json", Success: "env.done", Reward: "env.score", Error: "error"}
	cases := []struct {
		name string
		spec schemas.OutcomeSpec
		file string
		exit Exit
		want Result
	}{
		{"success from the env", minimalSpec, `{"success":true,"terminated":true,"termination":"goal_reached"}`, Exit{},
			Result{Valid: true, Success: true, Reward: 1, Termination: "goal_reached"}},
		{"the model's finish claim is not success", minimalSpec, `{"success":false,"terminated":false,"finish_claimed":true,"termination":"finish_claimed"}`, Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask, Termination: "finish_claimed"}},
		{"planner error, model server healthy: the planner's own", minimalSpec, `{"error":"reply has no tool call","termination":"model_error"}`, Exit{Code: 1},
			Result{Valid: true, FailureClass: schemas.FailureTask, Reason: ReasonPlannerError}},
		{"planner error, the model server failed calls", minimalSpec, `{"error":"HTTP 502","termination":"model_error"}`,
			Exit{Code: 1, Health: Health{ModelFailures: 2, FirstModelFailure: "call 3: HTTP 502"}}, Result{FailureClass: schemas.FailureInfra}},
		{"out of time, all healthy: a task failure", minimalSpec, ``, Exit{TimedOut: true}, Result{Valid: true, FailureClass: schemas.FailureTask, Reason: ReasonOutOfTime}},
		{"out of time with a service down", minimalSpec, ``, Exit{TimedOut: true, Health: Health{ServicesDown: []string{"vla"}}},
			Result{FailureClass: schemas.FailureInfra}},
		{"success stands against later model failures", minimalSpec, `{"terminated":true,"termination":"goal_reached"}`,
			Exit{Health: Health{ModelFailures: 1, FirstModelFailure: "call 4: HTTP 500"}}, Result{Valid: true, Success: true, Reward: 1}},
		{"planner error before any model call: its setup", minimalSpec, `{"error":"OPENAI_API_KEY is not set","termination":"model_error"}`,
			Exit{Code: 1, Health: Health{NoCalls: true}}, Result{FailureClass: schemas.FailureInfra}},
		{"ran out of turns", minimalSpec, `{"terminated":false,"termination":"max_turns"}`, Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask, Termination: "max_turns", Reason: "max_turns"}},
		{"no outcome file", minimalSpec, ``, Exit{}, Result{FailureClass: schemas.FailureInfra}},
		{"could not start", minimalSpec, ``, Exit{Err: errors.New("no such file")}, Result{FailureClass: schemas.FailureInfra}},
		{"garbage outcome", minimalSpec, `{`, Exit{}, Result{FailureClass: schemas.FailureInfra}},
		{"json success with reward", jsonSpec, `{"env":{"done":true,"score":0.5},"error":null}`, Exit{},
			Result{Valid: true, Success: true, Reward: 0.5}},
		{"json failure", jsonSpec, `{"env":{"done":false,"score":0},"error":""}`, Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask}},
		{"json error field", jsonSpec, `{"env":{"done":false,"score":0},"error":"sim crashed"}`, Exit{},
			Result{FailureClass: schemas.FailureInfra}},
		{"json missing success", jsonSpec, `{"env":{"score":1}}`, Exit{}, Result{FailureClass: schemas.FailureInfra}},
		{"json success turn", schemas.OutcomeSpec{Adapter: "json", File: "r.json", Success: "ok", SuccessTurn: "turn"}, `{"ok":true,"turn":3}`, Exit{},
			Result{Valid: true, Success: true, Reward: 1, SuccessTurn: 3}},
		{"json success turn ignored on failure", schemas.OutcomeSpec{Adapter: "json", File: "r.json", Success: "ok", SuccessTurn: "turn"}, `{"ok":false,"turn":null}`, Exit{},
			Result{Valid: true, FailureClass: schemas.FailureTask}},
		{"json success turn not a number", schemas.OutcomeSpec{Adapter: "json", File: "r.json", Success: "ok", SuccessTurn: "turn"}, `{"ok":true,"turn":"3"}`, Exit{},
			Result{FailureClass: schemas.FailureInfra}},
		{"json array path", schemas.OutcomeSpec{Adapter: "json", File: "r.json", Success: "steps.1.ok"}, `{"steps":[{"ok":false},{"ok":true}]}`, Exit{},
			Result{Valid: true, Success: true, Reward: 1}},
	}
	for _, c := range cases {
		dir := t.TempDir()
		if c.file != "" {
			os.WriteFile(filepath.Join(dir, c.spec.File), []byte(c.file), 0o644)
		}
		got := Decide(c.spec, dir, c.exit)
		if got.Valid != c.want.Valid || got.Success != c.want.Success || got.Reward != c.want.Reward || got.FailureClass != c.want.FailureClass || got.SuccessTurn != c.want.SuccessTurn {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
		if c.want.Reason != "" && got.Reason != c.want.Reason {
			t.Errorf("%s: reason %q, want %q", c.name, got.Reason, c.want.Reason)
		}
		if got.Valid && !got.Success && got.Reason == "" {
			t.Errorf("%s: a task failure without a reason", c.name)
		}
		if c.want.Termination != "" && got.Termination != c.want.Termination {
			t.Errorf("%s: termination %q, want %q", c.name, got.Termination, c.want.Termination)
		}
		if !got.Valid && got.Termination == "" {
			t.Errorf("%s: an invalid episode must say why", c.name)
		}
	}
}

// HealthOf counts the calls whose status shows the model server failed.
func TestHealthOf(t *testing.T) {
	calls := []schemas.Call{{CallIndex: 0, HTTPStatus: 200}, {CallIndex: 1, HTTPStatus: 400}, {CallIndex: 2, HTTPStatus: 502, Error: "refused"},
		{CallIndex: 3, HTTPStatus: 404}, {CallIndex: 4, HTTPStatus: 499}, {CallIndex: 5, HTTPStatus: 429}}
	h := HealthOf(calls)
	if h.ModelFailures != 3 || h.FirstModelFailure != "call 2: HTTP 502 refused" || h.NoCalls {
		t.Errorf("%+v: want 502, 404 and 429 counted, 400 (the planner's request) and 499 (the harness left) not", h)
	}
	if !HealthOf(nil).NoCalls {
		t.Error("no calls: NoCalls unset")
	}
}
