package report

import (
	"sort"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// DiscordantGroup is the discordant cells of a comparison that one side
// solved and the other did not, the losing side's episodes having ended
// the same way.
type DiscordantGroup struct {
	Winner      string // "a" or "b"
	Termination string // how the losing side's episodes ended
	Cells       []schemas.DiscordantCell
}

// GroupDiscordant groups discordant cells by winner and how the losing
// side ended, B's wins first, then the largest groups (then by
// termination): where one weights fails and the other does not is what a
// person looks at first.
func GroupDiscordant(ds []schemas.DiscordantCell) []DiscordantGroup {
	type key struct{ winner, termination string }
	index := map[key]int{}
	var gs []DiscordantGroup
	for _, d := range ds {
		loser := d.A
		if d.Winner == "a" {
			loser = d.B
		}
		k := key{d.Winner, loser.Termination}
		i, ok := index[k]
		if !ok {
			i = len(gs)
			index[k] = i
			gs = append(gs, DiscordantGroup{Winner: d.Winner, Termination: loser.Termination})
		}
		gs[i].Cells = append(gs[i].Cells, d)
	}
	sort.Slice(gs, func(i, j int) bool {
		if gs[i].Winner != gs[j].Winner {
			return gs[i].Winner > gs[j].Winner // B's wins first
		}
		if len(gs[i].Cells) != len(gs[j].Cells) {
			return len(gs[i].Cells) > len(gs[j].Cells)
		}
		return gs[i].Termination < gs[j].Termination
	})
	return gs
}
