package spool

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// BenchmarkCall is the spool's cost per planner call, as the rollout worker
// pays it after each answer (docs/proxy.md, "Where the time goes"): a
// record of a 2.5 KB request, 350 prompt and 50 completion token ids,
// encoded and written; episodes of 50 calls, each ended with Done.
func BenchmarkCall(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := schemas.Call{Run: "bench", Round: 1, Phase: "rollout", Model: "toy", FinishReason: "tool_calls",
		Request:   strings.Repeat(`{"role": "user", "content": "put the red cup into the top drawer"}, `, 40),
		ToolCalls: `[{"id":"x","type":"function","function":{"name":"computer","arguments":"{\"action\": \"click\"}"}}]`}
	for range 350 {
		c.PromptTokenIDs = append(c.PromptTokenIDs, rng.Int32N(151000))
	}
	for range 50 {
		c.CompletionTokenIDs = append(c.CompletionTokenIDs, rng.Int32N(151000))
		c.CompletionLogprobs = append(c.CompletionLogprobs, float32(-rng.ExpFloat64()*0.3))
	}
	s, err := New(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
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
