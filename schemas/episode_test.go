package schemas

import "testing"

func TestParseEpisodeID(t *testing.T) {
	for _, k := range []EpisodeKey{
		{Run: "r", Round: 1, Phase: PhaseTrain, Group: 7, Attempt: 3},
		{Run: "r", Round: 12, Phase: "eval-x", Group: 1234, Attempt: 100},
	} {
		got, err := ParseEpisodeID(k.Run, k.ID())
		if err != nil || got != k {
			t.Errorf("ParseEpisodeID(%q) = %+v, %v; want %+v", k.ID(), got, err, k)
		}
	}
	for _, id := range []string{"", "episode", "r1-train-g7", "r1-train-g7-a3x", "r1-train-g7-a3/..", "r01-train-g007-a03", "r1-train-g7-a03"} {
		if k, err := ParseEpisodeID("r", id); err == nil {
			t.Errorf("ParseEpisodeID(%q) = %+v, want an error", id, k)
		}
	}
}
