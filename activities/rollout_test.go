package activities

import (
	"reflect"
	"slices"
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

// The struct registered with the rollout worker exposes activities only:
// the host's own methods (orphan recovery, stopping, closing) live on
// host.Host, so none is registered as an activity by accident.
func TestRolloutExportsActivitiesOnly(t *testing.T) {
	var names []string
	rt := reflect.TypeFor[*Rollout]()
	for i := range rt.NumMethod() {
		names = append(names, rt.Method(i).Name)
	}
	if !slices.Equal(names, []string{"RunEpisode"}) {
		t.Errorf("*Rollout methods %v, want [RunEpisode]", names)
	}
}
