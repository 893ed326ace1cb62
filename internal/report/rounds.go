package report

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// WriteRounds is the per-round table of `starter train`, `starter status
// --run` and `starter report`: success over valid and over attempted
// episodes, with 95 % intervals, and a loud line for each round over its
// invalid limit.
func WriteRounds(out io.Writer, ss []schemas.RoundSummary) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tval success [95% CI]\tcollection success / valid\tsuccess / attempted\tinvalid + lost\tgroups w/ signal\tsamples\tweights in\tnew weights\t")
	for _, r := range ss {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%d/%d\t%d\t%s\t%s\t\n", r.Round, ValRate(r), stats.Rate(r.Successes, r.Valid),
			stats.Rate(r.Successes, r.Attempted()), r.Attempted()-r.Valid, r.Attempted(), r.GroupsWithSignal, r.Groups, r.Samples, r.WeightsID, r.NewWeightsID)
	}
	tw.Flush()
	for _, r := range ss {
		if w := RoundWarning(r); w != "" {
			fmt.Fprintf(out, "!! %s\n", w)
		}
	}
}
