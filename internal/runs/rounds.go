package runs

import (
	"context"
	"fmt"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Rounds is what `starter report` shows of a run: its history, and its
// success per round counted from the episode rows with the lost
// episodes, which have no row, added from the summaries and reports.
type Rounds struct {
	History
	Success []RoundSuccess
	// Final is the round that holds the final validation (N+1) once the
	// run has done its N rounds, else 0.
	Final int32
	// FinalVal is the final validation's overall result, when known.
	FinalVal *schemas.TaskResult
}

// ReadRounds reads a run's history and success per round; a run with
// neither a finished round nor an episode has nothing to show.
func ReadRounds(ctx context.Context, s *store.Store, run string) (Rounds, error) {
	var r Rounds
	var err error
	if r.History, err = ReadHistory(ctx, s, run); err != nil {
		return r, err
	}
	if r.Success, err = Success(ctx, s, run); err != nil {
		return r, err
	}
	sums, st := r.Summaries, r.State
	if len(sums) == 0 && len(r.Success) == 0 {
		l := schemas.Layout{Run: run}
		return r, fmt.Errorf("run %s has no finished round and no episode yet under s3://%s/%s: wait for its first episodes (`starter status --run %s`)", run, s.Bucket, l.Prefix(), run)
	}
	if len(r.Success) == 0 {
		return r, nil
	}
	if st.Rounds > 0 && st.RoundsDone == st.Rounds {
		r.Final = st.Rounds + 1
	}
	vals := valResults(ctx, s, run, r.Success, sums)
	addLost(r.Success, sums, vals)
	if v, ok := vals[r.Final]; ok && r.Final > 0 {
		r.FinalVal = &v
	}
	return r, nil
}

// valResults is each validation's overall result, from the round's
// summary or else its report (val-r<R>, as for the final validation);
// rounds with neither are left out: their lost episodes stay unknown.
func valResults(ctx context.Context, s *store.Store, run string, rs []RoundSuccess, sums []schemas.RoundSummary) map[int32]schemas.TaskResult {
	out := map[int32]schemas.TaskResult{}
	for _, r := range sums {
		if r.Val != nil {
			out[r.Round] = *r.Val
		}
	}
	l := schemas.Layout{Run: run}
	for _, r := range rs {
		if _, ok := out[r.Round]; ok || r.Val.Episodes == 0 {
			continue
		}
		var rep schemas.Report
		if err := store.GetJSON(ctx, s, l.Report(schemas.ValTag(r.Round)), &rep); err == nil {
			out[r.Round] = rep.Overall
		}
	}
	return out
}

// addLost adds the lost episodes, which have no row to count, to the
// success counts: the collection's from the round summaries, the
// validations' from their results.
func addLost(rs []RoundSuccess, sums []schemas.RoundSummary, vals map[int32]schemas.TaskResult) {
	lost := map[int32]int{}
	for _, r := range sums {
		lost[r.Round] = r.InvalidByCause["lost"]
	}
	for i := range rs {
		rs[i].Train.Lost = lost[rs[i].Round]
		rs[i].Val.Lost = vals[rs[i].Round].Lost
	}
}
