package activities_test

import (
	"context"
	"testing"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// TestWriteReportInvalid: a report counts invalid episodes by cause and
// cells without a record as lost, gives each rate its 95 % interval, and
// flags the report when invalid and lost exceed the harness's limit.
func TestWriteReportInvalid(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	env := recordsEnv(s)
	var rec *activities.Records

	// Five cells (task 0, init ids 0–4): 2 successes, 1 failure, 1 timeout,
	// and init id 4 lost: 2 of 5 attempted (40 %) do not count.
	write := func(run string, limit float64) schemas.Report {
		t.Helper()
		l := schemas.Layout{Run: run}
		h := schemas.Harness{Name: "h", Tasks: []schemas.Task{{ID: 0, Name: "a"}}, Splits: schemas.Splits{Val: "0-4"}}
		h.Collect.MaxInvalidShare = limit
		if err := store.PutJSON(ctx, s, l.Harness(), h); err != nil {
			t.Fatal(err)
		}
		for i, e := range []schemas.Episode{{Valid: true, Success: true}, {Valid: true, Success: true}, {Valid: true, FailureClass: schemas.FailureTask},
			{FailureClass: schemas.FailureTimeout}} {
			e.Run, e.Round, e.Phase, e.InitID, e.Group = run, 1, schemas.PhaseVal, int32(i), int32(i)
			e.EpisodeID = schemas.EpisodeID(1, schemas.PhaseVal, e.Group, 0)
			if _, err := store.WriteParquet(ctx, s, l.Episodes(1, schemas.PhaseVal, e.EpisodeID), []schemas.Episode{e}); err != nil {
				t.Fatal(err)
			}
		}
		v, err := env.ExecuteActivity(rec.WriteReport, activities.ReportInput{Run: run, Round: 1, Phase: schemas.PhaseVal, Tag: "v", InitKey: "val_init_ids"})
		if err != nil {
			t.Fatal(err)
		}
		var rep schemas.Report
		if err := v.Get(&rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := write("inv", 0)
	o := rep.Overall
	if o.Episodes != 4 || o.Valid != 3 || o.Invalid != 1 || o.Lost != 1 || o.Successes != 2 || o.InvalidByCause[schemas.FailureTimeout] != 1 || len(o.InvalidByCause) != 1 {
		t.Errorf("overall %+v: want 4 episodes, 3 valid, 1 timeout, 1 lost, 2 successes", o)
	}
	if len(o.SuccessCI95) != 2 || o.SuccessCI95[0] <= 0 || o.SuccessCI95[0] >= o.SuccessRate || o.SuccessCI95[1] <= o.SuccessRate || o.SuccessCI95[1] >= 1 {
		t.Errorf("interval %v of %v", o.SuccessCI95, o.SuccessRate)
	}
	if rep.MaxInvalidShare != schemas.DefaultMaxInvalidShare || !rep.OverInvalidLimit {
		t.Errorf("unset limit: limit %v, over %v; want the default and over", rep.MaxInvalidShare, rep.OverInvalidLimit)
	}
	if rep := write("inv-lax", 0.5); rep.MaxInvalidShare != 0.5 || rep.OverInvalidLimit {
		t.Errorf("limit 0.5: limit %v, over %v; want not over", rep.MaxInvalidShare, rep.OverInvalidLimit)
	}
}
