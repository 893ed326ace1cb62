package report

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Busy is how a run's rounds used their time, from the rounds' own
// stamps (workflow time): Wall runs from the first collection's start to
// the last training's end; TrainerIdle is the share of it no training ran,
// CollectIdle the share no collection ran (the rollout fleet had nothing
// of the run's training to do but validations). Rounds is how many
// rounds had stamps; zero when none had.
type Busy struct {
	Rounds                   int
	Wall                     time.Duration
	TrainerIdle, CollectIdle float64
}

// RunBusy measures sums (rounds without stamps, from before, are left out).
func RunBusy(sums []schemas.RoundSummary) Busy {
	type span struct{ from, to int64 }
	var train, collect []span
	var b Busy
	var start, end int64
	for _, s := range sums {
		if s.CollectStartMS == 0 || s.CollectEndMS < s.CollectStartMS {
			continue
		}
		b.Rounds++
		collect = append(collect, span{s.CollectStartMS, s.CollectEndMS})
		last := s.CollectEndMS
		if s.TrainStartMS > 0 && s.TrainEndMS >= s.TrainStartMS {
			train = append(train, span{s.TrainStartMS, s.TrainEndMS})
			last = s.TrainEndMS
		}
		if start == 0 || s.CollectStartMS < start {
			start = s.CollectStartMS
		}
		end = max(end, last)
	}
	if b.Rounds == 0 || end <= start {
		return Busy{}
	}
	// Union of spans: overlapped rounds' collections never overlap each
	// other today, but the union is right whatever they do.
	covered := func(ss []span) int64 {
		slices.SortFunc(ss, func(a, b span) int { return int(a.from - b.from) })
		var total, curFrom, curTo int64
		for i, s := range ss {
			if i == 0 || s.from > curTo {
				total += curTo - curFrom
				curFrom, curTo = s.from, s.to
				continue
			}
			curTo = max(curTo, s.to)
		}
		return total + curTo - curFrom
	}
	wall := end - start
	b.Wall = time.Duration(wall) * time.Millisecond
	b.TrainerIdle = 1 - float64(covered(train))/float64(wall)
	b.CollectIdle = 1 - float64(covered(collect))/float64(wall)
	return b
}

// String is "3 rounds in 4m12s: trainer idle 48%, no collection running 51%".
func (b Busy) String() string {
	if b.Rounds == 0 {
		return ""
	}
	return fmt.Sprintf("%d rounds in %s: trainer idle %.0f%%, no collection running %.0f%%",
		b.Rounds, b.Wall.Round(time.Second), 100*b.TrainerIdle, 100*b.CollectIdle)
}

// OverlapLine says what an overlapped round collected on and trained
// from, and its staleness ("" for a synchronous round): "r3: collected
// on r1 for r2 (pool val-r2), staleness 1:80, policy lag 0.031 / 0.42".
func OverlapLine(s schemas.RoundSummary) string {
	if s.MaxStaleness == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "r%d: collected on %s for %s", s.Round, s.CollectedOn, s.WeightsID)
	if s.PoolFrom != "" {
		fmt.Fprintf(&b, " (pool %s)", s.PoolFrom)
	}
	if len(s.Staleness) > 0 {
		fmt.Fprintf(&b, ", staleness %s (bound %d)", s.Staleness, s.MaxStaleness)
	}
	if s.Trainer.StaleSamples > 0 {
		fmt.Fprintf(&b, ", policy lag %.2g / %.2g", s.Trainer.PolicyLagMean, s.Trainer.PolicyLagMax)
	}
	return b.String()
}
