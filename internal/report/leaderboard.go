package report

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// SortLeaderboard orders entries best first: success rate, then valid
// episodes (more evidence first), then weights id. Entries without a valid
// episode have no success rate and go last. It then sets each entry's 95 %
// interval and marks those whose interval overlaps the leader's: a
// ranking among them is noise.
func SortLeaderboard(es []schemas.LeaderboardEntry) {
	sortEntries(es)
	var leader *stats.Interval
	for i := range es {
		e := &es[i]
		e.SuccessCI95, e.WithinNoise = nil, false
		if e.Valid == 0 {
			continue
		}
		iv := stats.Wilson(e.Successes, e.Valid)
		e.SuccessCI95 = []float64{iv.Lo, iv.Hi}
		if leader == nil {
			leader = &iv
		}
		e.WithinNoise = iv.Overlaps(*leader)
	}
}

func sortEntries(es []schemas.LeaderboardEntry) {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if (a.Valid > 0) != (b.Valid > 0) {
			return a.Valid > 0
		}
		if a.SuccessRate != b.SuccessRate {
			return a.SuccessRate > b.SuccessRate
		}
		if a.Valid != b.Valid {
			return a.Valid > b.Valid
		}
		return a.WeightsID < b.WeightsID
	})
}

// LeaderboardMarkdown renders a leaderboard as leaderboard.md: a heading,
// where the numbers come from, and one table row per weights id in the
// order given.
func LeaderboardMarkdown(lb schemas.Leaderboard) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Sweep %s\n\n", lb.Sweep)
	fmt.Fprintf(&b, "Weights of %s, evaluated in run %s on %s", lb.Source, lb.Run, lb.InitKey)
	if lb.UpdatedAtMS > 0 {
		fmt.Fprintf(&b, "; updated %s", utc(lb.UpdatedAtMS))
	}
	b.WriteString(".\n\n")
	if len(lb.Entries) == 0 {
		b.WriteString("No weights evaluated yet.\n")
		return b.String()
	}
	b.WriteString("| # | ≈ | weights | success / valid [95 % CI] | successes / valid | success / attempted | invalid + lost | evaluated (UTC) | report |\n")
	b.WriteString("|---:|:---:|---|---:|---:|---:|---:|---|---|\n")
	noise := 0
	for i, e := range lb.Entries {
		mark := ""
		if e.WithinNoise {
			mark = "≈"
			noise++
		}
		attempted := e.Episodes + e.Lost
		fmt.Fprintf(&b, "| %d | %s | `%s` | %s | %d / %d | %s | %d / %d | %s | `%s` |\n", i+1, mark, e.WeightsID, stats.Rate(e.Successes, e.Valid),
			e.Successes, e.Valid, stats.Rate(e.Successes, attempted), e.Invalid+e.Lost, attempted, utc(e.EvaluatedAtMS), e.ReportKey)
	}
	if noise > 1 {
		fmt.Fprintf(&b, "\n≈: within noise of the leader (95 %% intervals overlap): these %d cannot be ranked against each other on this evidence; evaluate on more init ids to separate them.\n", noise)
	}
	return b.String()
}

func utc(ms int64) string {
	if ms == 0 {
		return "–"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04")
}
