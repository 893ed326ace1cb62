// Package rl holds the pure reinforcement-learning arithmetic of a round:
// pool selection, group planning, leave-one-out advantages and call selection
// (docs/design.md §4). Everything here is deterministic for its inputs, so
// workflows may call it directly.
package rl

import (
	"hash/fnv"
	"math/rand/v2"
	"sort"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// LeaveOneOut returns A_i = r_i − mean(r_j, j≠i) for a group of valid
// attempts. Groups of fewer than two attempts have no baseline: nil.
func LeaveOneOut(rewards []float64) []float64 {
	n := len(rewards)
	if n < 2 {
		return nil
	}
	var sum float64
	for _, r := range rewards {
		sum += r
	}
	out := make([]float64, n)
	for i, r := range rewards {
		out[i] = r - (sum-r)/float64(n-1)
	}
	return out
}

// HasSignal reports whether a group's rewards differ, i.e. whether its
// leave-one-out advantages are not all zero.
func HasSignal(rewards []float64) bool {
	for _, r := range rewards[min(1, len(rewards)):] {
		if r != rewards[0] {
			return true
		}
	}
	return false
}

// SelectPool returns the tasks whose success rate lies strictly inside
// (low, high): only mixed outcomes teach. Tasks without valid episodes are skipped.
func SelectPool(results []schemas.TaskResult, low, high float64) []int32 {
	var pool []int32
	for _, t := range results {
		if t.Valid > 0 && t.SuccessRate > low && t.SuccessRate < high {
			pool = append(pool, t.Task)
		}
	}
	return pool
}

// Group is one (task, init state) pair that is run `attempts` times.
type Group struct {
	Task   int32 `json:"task"`
	InitID int32 `json:"init_id"`
}

// PlanGroups spreads n groups evenly over the pool tasks and draws each
// group's init state from the training ids, without repeating a pair until
// every pair of that task was used. The same inputs give the same plan.
func PlanGroups(pool, initIDs []int32, n int, seed int64, round int32) []Group {
	if len(pool) == 0 || len(initIDs) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(round)))
	tasks := append([]int32(nil), pool...)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i] < tasks[j] })
	decks := map[int32][]int32{}
	out := make([]Group, 0, n)
	for i := 0; i < n; i++ {
		task := tasks[i%len(tasks)]
		if len(decks[task]) == 0 {
			deck := append([]int32(nil), initIDs...)
			rng.Shuffle(len(deck), func(a, b int) { deck[a], deck[b] = deck[b], deck[a] })
			decks[task] = deck
		}
		d := decks[task]
		out = append(out, Group{Task: task, InitID: d[0]})
		decks[task] = d[1:]
	}
	return out
}

// Selection rules for SelectCalls.
const (
	SelectRandom = "random" // uniform, reproducible from (seed, episode id); the default
	SelectFirst  = "first"  // the first max calls
	SelectLast   = "last"   // the last max calls
	SelectSpread = "spread" // evenly spaced over the episode
)

// SelectCalls picks at most max of an episode's n calls for training by
// rule; the result is sorted and the same for the same inputs. Each selected
// call then weighs 1/len(result).
func SelectCalls(n, max int, rule string, seed int64, episodeID string) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	if max <= 0 || n <= max {
		return idx
	}
	switch rule {
	case SelectFirst:
		return idx[:max]
	case SelectLast:
		return idx[n-max:]
	case SelectSpread:
		out := make([]int, max)
		for i := range out {
			out[i] = i * n / max
		}
		return out
	}
	h := fnv.New64a()
	h.Write([]byte(episodeID))
	rng := rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
	rng.Shuffle(n, func(a, b int) { idx[a], idx[b] = idx[b], idx[a] })
	idx = idx[:max]
	sort.Ints(idx)
	return idx
}

// Drop says why a call is left out before selection.
type Drop int

// Reasons a call is left out before selection.
const (
	Keep            Drop = iota
	DropLength           // prompt + completion tokens exceed Filters.MaxTokens
	DropPostSuccess      // made after the environment reported success
)

// active reports whether a filter that starts at from applies in round.
// from ≤ 1 means every round.
func active(round, from int32) bool { return round >= from }

// FilterCall applies the selection filters of a round to one call of an
// episode: tokens is its prompt + completion count, successCall the
// episode's Episode.SuccessCall. successCall ≤ 0 is unknown and drops
// nothing: -1 is written when the adapter cannot tell, and rows written
// before the field existed read it as 0.
func FilterCall(f schemas.Filters, round int32, callIndex int32, tokens int, successCall int32) Drop {
	if f.MaxTokens > 0 && active(round, f.MaxTokensFromRound) && tokens > f.MaxTokens {
		return DropLength
	}
	if f.PostSuccess && active(round, f.PostSuccessFromRound) && successCall > 0 && callIndex >= successCall {
		return DropPostSuccess
	}
	return Keep
}
