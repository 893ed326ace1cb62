package runs

import (
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Lost episodes have no row: the collection's come from the round's
// summary, the validation's from its result, and a round with neither
// has none.
func TestAddLost(t *testing.T) {
	rs := []RoundSuccess{
		{Round: 1, Train: Counts{Episodes: 4, Valid: 4, Successes: 2}, Val: Counts{Episodes: 30, Valid: 30, Successes: 9}},
		{Round: 2, Train: Counts{Episodes: 36, Valid: 35, Successes: 20}, Val: Counts{Episodes: 30, Valid: 29, Successes: 14}},
		{Round: 3, Val: Counts{Episodes: 30, Valid: 30, Successes: 21}},
	}
	sums := []schemas.RoundSummary{{Round: 2, BatchSummary: schemas.BatchSummary{InvalidByCause: map[string]int{"lost": 2, "timeout": 1}}}}
	addLost(rs, sums, map[int32]schemas.TaskResult{2: {Lost: 0}, 3: {Lost: 3}})
	for i, want := range [][2]int{{0, 0}, {2, 0}, {0, 3}} {
		if got := [2]int{rs[i].Train.Lost, rs[i].Val.Lost}; got != want {
			t.Errorf("round %d lost (collection, validation) %v, want %v", rs[i].Round, got, want)
		}
	}
	// One invalid collection episode, two lost: 20 of 38 attempted.
	if got := rs[1].Train.OfAttempted(); got != "20/38 (52.6% [37–68])" {
		t.Errorf("round 2 collection over attempted: %s", got)
	}
}
