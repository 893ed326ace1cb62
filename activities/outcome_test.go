package activities

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestOutcomeClassifies(t *testing.T) {
	spec := schemas.OutcomeSpec{Adapter: "minimal", File: "outcome.json"}
	cases := []struct {
		name, file string
		pr         proc.Result
		runErr     error
		want       EpisodeOutcome
	}{
		{"success from the env", `{"success":true,"terminated":true,"termination":"goal_reached"}`, proc.Result{}, nil,
			EpisodeOutcome{Valid: true, Success: true, Reward: 1, Termination: "goal_reached"}},
		{"the model's finish claim is not success", `{"success":false,"terminated":false,"finish_claimed":true,"termination":"finish_claimed"}`, proc.Result{}, nil,
			EpisodeOutcome{Valid: true, FailureClass: schemas.FailureTask, Termination: "finish_claimed"}},
		{"planner error", `{"error":"model unreachable","termination":"model_error"}`, proc.Result{ExitCode: 1}, nil,
			EpisodeOutcome{FailureClass: schemas.FailureInfra}},
		{"timeout", ``, proc.Result{TimedOut: true}, nil, EpisodeOutcome{FailureClass: schemas.FailureTimeout}},
		{"no outcome file", ``, proc.Result{}, nil, EpisodeOutcome{FailureClass: schemas.FailureInfra}},
		{"could not start", ``, proc.Result{}, errors.New("no such file"), EpisodeOutcome{FailureClass: schemas.FailureInfra}},
		{"garbage outcome", `{`, proc.Result{}, nil, EpisodeOutcome{FailureClass: schemas.FailureInfra}},
	}
	for _, c := range cases {
		dir := t.TempDir()
		if c.file != "" {
			os.WriteFile(filepath.Join(dir, "outcome.json"), []byte(c.file), 0o644)
		}
		got := Outcome(spec, dir, c.pr, c.runErr)
		if got.Valid != c.want.Valid || got.Success != c.want.Success || got.Reward != c.want.Reward || got.FailureClass != c.want.FailureClass {
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
