package report

import (
	"math"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func stamped(k int32, c0, c1, t0, t1 int64) schemas.RoundSummary {
	s := int64(1_800_000_000_000) // any epoch: only differences count
	return schemas.RoundSummary{Round: k, CollectStartMS: s + c0*1000, CollectEndMS: s + c1*1000, TrainStartMS: s + t0*1000, TrainEndMS: s + t1*1000}
}

// TestRunBusy: one phase after another leaves each side idle half the
// time; overlapped, the same phases leave a quarter of 40 s; rounds
// without stamps (from before) are left out.
func TestRunBusy(t *testing.T) {
	cases := []struct {
		name                     string
		sums                     []schemas.RoundSummary
		rounds                   int
		wall                     time.Duration
		trainerIdle, collectIdle float64
	}{
		{"synchronous", []schemas.RoundSummary{stamped(1, 0, 10, 10, 20), stamped(2, 20, 30, 30, 40)}, 2, 40 * time.Second, 0.5, 0.5},
		{"overlapped", []schemas.RoundSummary{stamped(1, 0, 10, 10, 20), stamped(2, 10, 20, 20, 30), stamped(3, 20, 30, 30, 40)}, 3, 40 * time.Second, 0.25, 0.25},
		// Round 2 trained nothing (no training stamps): its collection
		// still counts, and the run ends when round 3's training does.
		{"a round without samples", []schemas.RoundSummary{{Round: 0}, stamped(1, 0, 10, 10, 20), {Round: 2, CollectStartMS: 1_800_000_020_000, CollectEndMS: 1_800_000_030_000},
			stamped(3, 30, 40, 40, 50)}, 3, 50 * time.Second, 0.6, 0.4},
	}
	for _, c := range cases {
		b := RunBusy(c.sums)
		if b.Rounds != c.rounds || b.Wall != c.wall || math.Abs(b.TrainerIdle-c.trainerIdle) > 1e-9 || math.Abs(b.CollectIdle-c.collectIdle) > 1e-9 {
			t.Errorf("%s: %+v, want %d rounds in %s, trainer idle %v, collection idle %v", c.name, b, c.rounds, c.wall, c.trainerIdle, c.collectIdle)
		}
	}
	if b := RunBusy([]schemas.RoundSummary{{Round: 1}}); b.Rounds != 0 || b.String() != "" {
		t.Errorf("rounds without stamps: %+v %q, want nothing", b, b.String())
	}
	if got, want := RunBusy(cases[0].sums).String(), "2 rounds in 40s: trainer idle 50%, no collection running 50%"; got != want {
		t.Errorf("String: %q, want %q", got, want)
	}
}

func TestOverlapLine(t *testing.T) {
	s := schemas.RoundSummary{Round: 3, WeightsID: "r2", CollectedOn: "r1", PoolFrom: "val-r2", MaxStaleness: 1}
	s.Staleness = schemas.Staleness{1: 80}
	s.Trainer.StaleSamples, s.Trainer.PolicyLagMean, s.Trainer.PolicyLagMax = 80, 0.031, 0.42
	if got, want := OverlapLine(s), "r3: collected on r1 for r2 (pool val-r2), staleness 1:80 (bound 1), policy lag 0.031 / 0.42"; got != want {
		t.Errorf("OverlapLine: %q, want %q", got, want)
	}
	if got := OverlapLine(schemas.RoundSummary{Round: 1, WeightsID: "w0"}); got != "" {
		t.Errorf("a synchronous round: %q, want nothing", got)
	}
}
