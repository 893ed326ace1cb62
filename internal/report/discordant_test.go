package report

import (
	"fmt"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestGroupDiscordant(t *testing.T) {
	cell := func(task int32, winner, endA, endB string) schemas.DiscordantCell {
		return schemas.DiscordantCell{Task: task, Winner: winner, A: schemas.EpisodeLink{Termination: endA}, B: schemas.EpisodeLink{Termination: endB}}
	}
	gs := GroupDiscordant([]schemas.DiscordantCell{
		cell(0, "a", "success", "max_turns"),
		cell(1, "b", "max_turns", "success"),
		cell(2, "b", "finish_claimed", "success"),
		cell(3, "b", "max_turns", "success"),
		cell(4, "a", "success", "error"),
		cell(5, "b", "error", "success"),
	})
	// B's wins first, the largest group first, ties by how the loser ended;
	// the loser is B when A won.
	var got []string
	for _, g := range gs {
		tasks := []int32{}
		for _, c := range g.Cells {
			tasks = append(tasks, c.Task)
		}
		got = append(got, fmt.Sprintf("%s %s %v", g.Winner, g.Termination, tasks))
	}
	want := []string{"b max_turns [1 3]", "b error [5]", "b finish_claimed [2]", "a error [4]", "a max_turns [0]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("groups %q, want %q", got, want)
	}
	if gs := GroupDiscordant(nil); len(gs) != 0 {
		t.Errorf("no cell: %v", gs)
	}
}
