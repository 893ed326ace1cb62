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
		{"planner error", minimalSpec, `{"error":"model unreachable","termination":"model_error"}`, Exit{Code: 1},
			Result{FailureClass: schemas.FailureInfra}},
		{"timeout", minimalSpec, ``, Exit{TimedOut: true}, Result{FailureClass: schemas.FailureTimeout}},
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
		if c.want.Termination != "" && got.Termination != c.want.Termination {
			t.Errorf("%s: termination %q, want %q", c.name, got.Termination, c.want.Termination)
		}
		if !got.Valid && got.Termination == "" {
			t.Errorf("%s: an invalid episode must say why", c.name)
		}
	}
}
