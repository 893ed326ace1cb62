package schemas

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// WeightsVersion is the version a training run's weights id counts as:
// w0, the run's initial weights, is 0 and r<k>, what round k's trainer
// wrote, is k. Staleness is a difference of versions (docs/design.md §4,
// "Overlapped rounds").
func WeightsVersion(id string) (int32, error) {
	if id == "w0" {
		return 0, nil
	}
	if k, ok := strings.CutPrefix(id, "r"); ok {
		if v, err := strconv.ParseInt(k, 10, 32); err == nil && v >= 1 {
			return int32(v), nil
		}
	}
	return 0, fmt.Errorf("weights %q is not a training run's (w0, or r<round> that round's trainer wrote)", id)
}

// TrainingWeightsID is the weights id of version v: w0 or r<v>.
func TrainingWeightsID(v int32) string {
	if v == 0 {
		return "w0"
	}
	return fmt.Sprintf("r%d", v)
}

// Staleness counts a batch's samples by staleness: key s is how many
// weights versions older than the trainer's starting weights the weights
// that sampled them are.
type Staleness map[int32]int

// Max is the largest staleness with a sample (0 when none).
func (s Staleness) Max() int32 {
	var m int32
	for k, n := range s {
		if n > 0 && k > m {
			m = k
		}
	}
	return m
}

// String is "0:120 1:80", by staleness.
func (s Staleness) String() string {
	keys := make([]int32, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%d", k, s[k])
	}
	return b.String()
}
