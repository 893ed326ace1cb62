package activities_test

import (
	"bytes"
	"context"
	"strings"
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

// TestWriteReportFiles: beside report.json, WriteReport writes every
// task's row as text (report.txt) and CSV (tasks.csv), from the stored
// report; a retry that finds report.json stored writes the same bytes, and
// puts back a file lost before it.
func TestWriteReportFiles(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	env := recordsEnv(s)
	var rec *activities.Records
	run := "files"
	l := schemas.Layout{Run: run}
	// Three tasks of two suites, init ids 0–1: task 0 solves both, task 1
	// one of two, task 2's init 1 times out and its init 0 is lost.
	h := schemas.Harness{Name: "h", Splits: schemas.Splits{Val: "0-1"},
		Tasks: []schemas.Task{{ID: 0, Name: "a", Suite: "s1"}, {ID: 1, Name: "b, with a comma", Suite: "s1"}, {ID: 2, Name: "c", Suite: "s2"}}}
	if err := store.PutJSON(ctx, s, l.Harness(), h); err != nil {
		t.Fatal(err)
	}
	for i, e := range []schemas.Episode{{Task: 0, InitID: 0, Valid: true, Success: true}, {Task: 0, InitID: 1, Valid: true, Success: true},
		{Task: 1, InitID: 0, Valid: true}, {Task: 1, InitID: 1, Valid: true, Success: true}, {Task: 2, InitID: 1, FailureClass: schemas.FailureTimeout}} {
		e.Run, e.Round, e.Phase, e.Group = run, 1, schemas.PhaseVal, int32(i)
		e.EpisodeID = schemas.EpisodeID(1, schemas.PhaseVal, e.Group, 0)
		if _, err := store.WriteParquet(ctx, s, l.Episodes(1, schemas.PhaseVal, e.EpisodeID), []schemas.Episode{e}); err != nil {
			t.Fatal(err)
		}
	}
	write := func() (txt, csv []byte) {
		t.Helper()
		if _, err := env.ExecuteActivity(rec.WriteReport, activities.ReportInput{Run: run, Round: 1, Phase: schemas.PhaseVal, Tag: "v", InitKey: "val_init_ids"}); err != nil {
			t.Fatal(err)
		}
		txt, err := s.Get(ctx, l.ReportText("v"))
		if err != nil {
			t.Fatal(err)
		}
		csv, err = s.Get(ctx, l.ReportTasks("v"))
		if err != nil {
			t.Fatal(err)
		}
		return txt, csv
	}
	txt, csv := write()
	want := "task,name,suite,attempted,valid,invalid,lost,successes,success_rate,ci95_low,ci95_high,success_over_attempted,invalid_by_cause\n" +
		"0,a,s1,2,2,0,0,2,1.0000,0.3424,1.0000,1.0000,\n" +
		"1,\"b, with a comma\",s1,2,2,0,0,1,0.5000,0.0945,0.9055,0.5000,\n" +
		"2,c,s2,2,0,1,1,0,,,,0.0000,lost:1 timeout:1\n"
	if string(csv) != want {
		t.Errorf("tasks.csv:\n%s\nwant:\n%s", csv, want)
	}
	for _, s := range []string{"b, with a comma", "lost:1 timeout:1", "report: s3://" + s.Bucket + "/" + l.Report("v"), "validation score (val_init_ids)"} {
		if !strings.Contains(string(txt), s) {
			t.Errorf("report.txt lacks %q:\n%s", s, txt)
		}
	}
	// A retry after report.json was stored, with tasks.csv lost: the same
	// bytes at the same keys.
	if err := s.Delete(ctx, l.ReportTasks("v")); err != nil {
		t.Fatal(err)
	}
	if txt2, csv2 := write(); !bytes.Equal(txt, txt2) || !bytes.Equal(csv, csv2) {
		t.Errorf("a retry wrote other files:\n%s\n%s", txt2, csv2)
	}
}
