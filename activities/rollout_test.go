package activities

import (
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/outcome"
)

func TestSuccessCall(t *testing.T) {
	cases := []struct {
		name  string
		out   outcome.Result
		calls int
		want  int32
	}{
		{"failure", outcome.Result{Valid: true, SuccessTurn: 2}, 5, -1},
		{"turn known: calls from that index follow success", outcome.Result{Valid: true, Success: true, SuccessTurn: 2}, 5, 2},
		{"turn past the recorded calls", outcome.Result{Valid: true, Success: true, SuccessTurn: 9}, 5, 5},
		{"episode ends at success", outcome.Result{Valid: true, Success: true, EndsAtSuccess: true}, 4, 4},
		{"unknown", outcome.Result{Valid: true, Success: true}, 4, -1},
	}
	for _, c := range cases {
		if got := successCall(c.out, c.calls); got != c.want {
			t.Errorf("%s: successCall = %d, want %d", c.name, got, c.want)
		}
	}
}
