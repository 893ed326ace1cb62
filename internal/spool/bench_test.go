package spool

import (
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// BenchmarkCall is the spool's cost per planner call, as the rollout worker
// pays it after each answer (docs/proxy.md, "Where the time goes"): a
// record of a 2.5 KB request, 350 prompt and 50 completion token ids,
// logged; episodes of 50 calls, each ended with Done.
func BenchmarkCall(b *testing.B) {
	c := plannerCall()
	s, err := New(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ep := schemas.EpisodeKey{Run: "bench", Round: 1, Phase: "rollout"}
	i := 0
	for b.Loop() {
		if i%50 == 0 && i > 0 {
			if err := s.Done(ep); err != nil {
				b.Fatal(err)
			}
			ep.Group++
		}
		c.EpisodeID, c.CallIndex = ep.ID(), int32(i%50)
		s.Call(ep, c)
		i++
	}
}
