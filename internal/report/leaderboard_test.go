package report

import (
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Best success rate first; more valid episodes break ties; entries without
// a valid episode last; the markdown has one row per entry in that order.
func TestLeaderboardSortAndMarkdown(t *testing.T) {
	lb := schemas.Leaderboard{Sweep: "nightly", Source: "demo", Run: "demo", InitKey: "val_init_ids", UpdatedAtMS: 1700000000000,
		Entries: []schemas.LeaderboardEntry{
			{WeightsID: "w0", SuccessRate: 0.3, Successes: 9, Valid: 30, Episodes: 31, Invalid: 1, Lost: 1, ReportKey: "runs/demo/eval/sweep-nightly-w0/report.json", EvaluatedAtMS: 1700000000000},
			{WeightsID: "r9", Valid: 0, Episodes: 30, Invalid: 30},
			{WeightsID: "r2", SuccessRate: 0.7, Successes: 7, Valid: 10, Episodes: 10},
			{WeightsID: "r1", SuccessRate: 0.7, Successes: 21, Valid: 30, Episodes: 30},
			{WeightsID: "r3", SuccessRate: 0, Valid: 30, Episodes: 30},
		}}
	SortLeaderboard(lb.Entries)
	var order []string
	for _, e := range lb.Entries {
		order = append(order, e.WeightsID)
	}
	if got := strings.Join(order, " "); got != "r1 r2 w0 r3 r9" {
		t.Fatalf("order %s, want r1 r2 w0 r3 r9", got)
	}
	md := LeaderboardMarkdown(lb)
	for _, want := range []string{
		"# Sweep nightly",
		"Weights of demo, evaluated in run demo on val_init_ids; updated 2023-11-14 22:13.",
		"| # | ≈ | weights | success / valid [95 % CI] | successes / valid | success / attempted | invalid + lost | evaluated (UTC) | report |",
		// The leader is within noise of itself; r2's 7/10 overlaps it, w0's 9/30 does not.
		"| 1 | ≈ | `r1` | 70.0% [52–84] | 21 / 30 | 70.0% [52–84] | 0 / 30 | – |",
		"| 2 | ≈ | `r2` | 70.0% [39–90] | 7 / 10 |",
		"| 3 |  | `w0` | 30.0% [16–48] | 9 / 30 | 28.1% [15–46] | 2 / 32 | 2023-11-14 22:13 | `runs/demo/eval/sweep-nightly-w0/report.json` |",
		"| 4 |  | `r3` | 0.0% [0–12] |",
		"| 5 |  | `r9` | – | 0 / 0 | 0.0% [0–12] | 30 / 30 |",
		"these 2 cannot be ranked against each other",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	var rows int
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| #") {
			rows++
		}
	}
	for i, e := range lb.Entries {
		if (e.SuccessCI95 == nil) != (e.Valid == 0) || e.WithinNoise != (i < 2) {
			t.Errorf("entry %s: interval %v, within noise %v", e.WeightsID, e.SuccessCI95, e.WithinNoise)
		}
	}
	if rows != 5 {
		t.Errorf("%d table rows, want 5:\n%s", rows, md)
	}
	empty := LeaderboardMarkdown(schemas.Leaderboard{Sweep: "x", Source: "s3://b/p/", Run: "sweep-x", InitKey: "val_init_ids"})
	if !strings.Contains(empty, "No weights evaluated yet.") || strings.Contains(empty, "| #") {
		t.Errorf("empty leaderboard:\n%s", empty)
	}
}
