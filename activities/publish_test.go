package activities_test

import (
	"context"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// TestPublishRefusesCorruptTries stages four tries in the real S3 server,
// three of them damaged in a different way, and checks that Publish copies
// only the sound one into the tables and names each refused try and why;
// with Rerun unset (older workflows) the first damaged try fails it.
func TestPublishRefusesCorruptTries(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	l := schemas.Layout{Run: "p"}
	const try = "try0-abcdef12"
	stage := func(group int32, calls int, edit func(e *schemas.Episode, cs []schemas.Call)) activities.AcceptedTry {
		t.Helper()
		id := schemas.EpisodeID(1, schemas.PhaseTrain, group, 0)
		e := schemas.Episode{Run: "p", Round: 1, Phase: schemas.PhaseTrain, EpisodeID: id, Group: group, NumCalls: int32(calls), Try: try, Valid: true}
		cs := make([]schemas.Call, calls)
		for i := range cs {
			cs[i] = schemas.Call{Run: "p", EpisodeID: id, CallIndex: int32(i), PromptTokenIDs: []int32{int32(i)}}
		}
		if edit != nil {
			edit(&e, cs)
		}
		staged := l.Staged(1, schemas.PhaseTrain, id, try)
		if _, err := store.WriteParquet(ctx, s, staged+activities.StagedCalls, cs); err != nil {
			t.Fatal(err)
		}
		if _, err := store.WriteParquet(ctx, s, staged+activities.StagedRow, []schemas.Episode{e}); err != nil {
			t.Fatal(err)
		}
		return activities.AcceptedTry{EpisodeID: id, Try: try}
	}
	good := stage(0, 3, nil)
	short := stage(1, 3, func(e *schemas.Episode, _ []schemas.Call) { e.NumCalls = 4 })
	mixed := stage(2, 2, func(_ *schemas.Episode, cs []schemas.Call) { cs[1].Retry = 1 })
	truncated := stage(3, 3, nil)
	key := l.Staged(1, schemas.PhaseTrain, truncated.EpisodeID, try) + activities.StagedCalls
	b, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, key, b[:len(b)/2]); err != nil {
		t.Fatal(err)
	}

	aenv := recordsEnv(s)
	var rec *activities.Records
	in := activities.PublishInput{Run: "p", Round: 1, Phase: schemas.PhaseTrain, Tries: []activities.AcceptedTry{good, short, mixed, truncated}, Rerun: true}
	v, err := aenv.ExecuteActivity(rec.Publish, in)
	if err != nil {
		t.Fatal(err)
	}
	var res activities.PublishResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if res.Published != 1 || len(res.Corrupt) != 3 {
		t.Fatalf("published %d, refused %+v; want 1 published and 3 refused", res.Published, res.Corrupt)
	}
	for i, want := range []struct {
		try    activities.AcceptedTry
		reason string
	}{{short, "holds 3 calls where the row says num_calls 4"}, {mixed, "retry 1"}, {truncated, "does not decode"}} {
		c := res.Corrupt[i]
		if c.EpisodeID != want.try.EpisodeID || c.Try != try || !strings.Contains(c.Reason, want.reason) {
			t.Errorf("refused %+v, want %s with a reason containing %q", c, want.try.EpisodeID, want.reason)
		}
	}
	calls, err := store.ReadTable(ctx, s, l.CallsDir(1, schemas.PhaseTrain), func(c schemas.Call) string { return c.EpisodeID })
	if err != nil {
		t.Fatal(err)
	}
	rows, err := store.ReadTable(ctx, s, l.EpisodesDir(1, schemas.PhaseTrain), func(e schemas.Episode) string { return e.EpisodeID })
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 3 || len(rows) != 1 || rows[0].EpisodeID != good.EpisodeID {
		t.Errorf("tables hold %d calls and %d rows (%v), want only %s's 3 calls and row", len(calls), len(rows), rows, good.EpisodeID)
	}

	in.Rerun = false
	in.Tries = []activities.AcceptedTry{truncated}
	if _, err := aenv.ExecuteActivity(rec.Publish, in); err == nil || !strings.Contains(err.Error(), truncated.EpisodeID) || !strings.Contains(err.Error(), "CorruptStaged") {
		t.Errorf("without Rerun a corrupt try must fail Publish naming it, got %v", err)
	}
}
