package report

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// SortLeaderboard orders entries best first: success rate, then valid
// episodes (more evidence first), then weights id. Entries without a valid
// episode have no success rate and go last.
func SortLeaderboard(es []schemas.LeaderboardEntry) {
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
	b.WriteString("| # | weights | success rate | successes / valid | episodes | evaluated (UTC) | report |\n")
	b.WriteString("|---:|---|---:|---:|---:|---|---|\n")
	for i, e := range lb.Entries {
		rate := "–"
		if e.Valid > 0 {
			rate = fmt.Sprintf("%.1f%%", 100*e.SuccessRate)
		}
		fmt.Fprintf(&b, "| %d | `%s` | %s | %d / %d | %d | %s | `%s` |\n", i+1, e.WeightsID, rate, e.Successes, e.Valid, e.Episodes, utc(e.EvaluatedAtMS), e.ReportKey)
	}
	return b.String()
}

func utc(ms int64) string {
	if ms == 0 {
		return "–"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04")
}
