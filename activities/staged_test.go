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

// TestDropStagedAfterPublish, on the real S3 server: once an episode is
// published, DropStaged deletes all its staged tries (the accepted one and
// a failed one) and keeps those of an unpublished episode, including one
// whose id starts with the published one's (g100, g1000). Publish run
// again after the drop succeeds without copying anything new; a late try
// that stages after the drop is still never published over the accepted
// one, and Publish of a try the row does not name still fails.
func TestDropStagedAfterPublish(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	s := stack.Store
	l := schemas.Layout{Run: "d"}
	const round, phase = 1, schemas.PhaseTrain
	stage := func(group, retry int32, try string, calls int) activities.AcceptedTry {
		t.Helper()
		id := schemas.EpisodeID(round, phase, group, 0)
		e := schemas.Episode{Run: "d", Round: round, Phase: phase, EpisodeID: id, Group: group, Retry: retry, NumCalls: int32(calls), Try: try, Valid: true}
		cs := make([]schemas.Call, calls)
		for i := range cs {
			cs[i] = schemas.Call{Run: "d", EpisodeID: id, CallIndex: int32(i), Retry: retry}
		}
		staged := l.Staged(round, phase, id, try)
		if _, err := store.WriteParquet(ctx, s, staged+activities.StagedCalls, cs); err != nil {
			t.Fatal(err)
		}
		if _, err := store.WriteParquet(ctx, s, staged+activities.StagedRow, []schemas.Episode{e}); err != nil {
			t.Fatal(err)
		}
		return activities.AcceptedTry{EpisodeID: id, Try: try}
	}
	stage(100, 0, "try0-aaaa", 2) // failed, not accepted
	accepted := stage(100, 1, "try1-aaaa", 3)
	waiting := stage(1000, 0, "try0-aaaa", 1) // never published
	count := func(prefix string) int {
		t.Helper()
		objs, err := s.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		return len(objs)
	}

	aenv := recordsEnv(s)
	var rec *activities.Records
	publish := func(try activities.AcceptedTry) (activities.PublishResult, error) {
		t.Helper()
		in := activities.PublishInput{Run: "d", Round: round, Phase: phase, Tries: []activities.AcceptedTry{try}, Rerun: true}
		v, err := aenv.ExecuteActivity(rec.Publish, in)
		var res activities.PublishResult
		if err == nil {
			err = v.Get(&res)
		}
		return res, err
	}
	if res, err := publish(accepted); err != nil || res.Published != 1 {
		t.Fatalf("publish: %+v, %v", res, err)
	}
	drop := func() activities.DropStagedResult {
		t.Helper()
		v, err := aenv.ExecuteActivity(rec.DropStaged, activities.DropStagedInput{Run: "d", Round: round, Phase: phase,
			Episodes: []string{accepted.EpisodeID, waiting.EpisodeID}})
		if err != nil {
			t.Fatal(err)
		}
		var res activities.DropStagedResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := drop(); res.Episodes != 1 || res.Kept != 1 || res.Objects != 4 || res.Bytes == 0 {
		t.Errorf("drop: %+v, want 1 episode's 4 objects deleted and 1 episode kept", res)
	}
	if n := count(l.StagedEpisode(round, phase, accepted.EpisodeID)); n != 0 {
		t.Errorf("%d staged objects left of the published episode, want none", n)
	}
	if n := count(l.StagedEpisode(round, phase, waiting.EpisodeID)); n != 2 {
		t.Errorf("%d staged objects of the unpublished episode, want its 2 kept", n)
	}
	// Again: nothing more to delete, nothing fails.
	if res := drop(); res.Episodes != 1 || res.Objects != 0 {
		t.Errorf("drop again: %+v, want nothing deleted", res)
	}

	// A Publish retried after the drop finds the row naming its try.
	if res, err := publish(accepted); err != nil || res.Published != 1 || len(res.Corrupt) != 0 {
		t.Fatalf("publish after the drop: %+v, %v; want it published", res, err)
	}
	// A late try of the same episode stages after the drop; Publish of the
	// accepted try run again does not take it for the accepted one.
	late := stage(100, 2, "try2-bbbb", 5)
	if _, err := publish(accepted); err != nil {
		t.Fatalf("publish after a late try staged: %v", err)
	}
	if _, err := publish(activities.AcceptedTry{EpisodeID: accepted.EpisodeID, Try: "try3-cccc"}); err == nil || !strings.Contains(err.Error(), "MissingStaged") {
		t.Errorf("publish of a try with no staged records and no row naming it: %v, want MissingStaged", err)
	}
	rows, err := store.ReadTable(ctx, s, l.EpisodesDir(round, phase), func(e schemas.Episode) string { return e.EpisodeID })
	if err != nil {
		t.Fatal(err)
	}
	calls, err := store.ReadTable(ctx, s, l.CallsDir(round, phase), func(c schemas.Call) string { return c.EpisodeID })
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Try != accepted.Try || len(calls) != 3 {
		t.Fatalf("tables hold %d rows %+v and %d calls; want the accepted try %s's row and 3 calls", len(rows), rows, len(calls), accepted.Try)
	}
	for _, c := range calls {
		if c.Retry != 1 {
			t.Errorf("a published call of retry %d, the accepted try is retry 1", c.Retry)
		}
	}
	if n := count(l.Staged(round, phase, late.EpisodeID, late.Try)); n != 2 {
		t.Errorf("the late try left %d staged objects, want its 2 beside the tables", n)
	}
}
