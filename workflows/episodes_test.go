package workflows

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// corruptEnv runs Episodes over three cells whose tries are named after
// their retry; Publish refuses every try of an episode in corrupt whose
// retry is below refuseBelow. It returns the RunEpisode inputs, the
// tries each Publish was given and the episodes DropStaged was given.
func corruptEnv(t *testing.T, corrupt string, refuseBelow int32) (api.Tally, []activities.EpisodeInput, [][]string, []string) {
	t.Helper()
	env := mockEnv()
	var ro *activities.Rollout
	var rec *activities.Records
	var runs []activities.EpisodeInput
	env.OnActivity(ro.RunEpisode, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.EpisodeInput) (activities.EpisodeResult, error) {
			runs = append(runs, in)
			id := schemas.EpisodeID(in.Round, in.Phase, in.Group, in.Attempt)
			// A first try fails its task, a rerun succeeds: the tally
			// must count the try that was published.
			return activities.EpisodeResult{EpisodeID: id, Retry: in.RetryBase, Try: fmt.Sprintf("try%d-run", in.RetryBase),
				Valid: true, Success: in.RetryBase > 0}, nil
		})
	var published [][]string
	env.OnActivity(rec.Publish, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.PublishInput) (activities.PublishResult, error) {
			if !in.Rerun {
				t.Error("Publish called without Rerun")
			}
			var tries []string
			var res activities.PublishResult
			for _, a := range in.Tries {
				tries = append(tries, a.EpisodeID+"/"+a.Try)
				var retry int32
				fmt.Sscanf(a.Try, "try%d-run", &retry)
				if a.EpisodeID == corrupt && retry < refuseBelow {
					res.Corrupt = append(res.Corrupt, activities.CorruptTry{EpisodeID: a.EpisodeID, Try: a.Try, Reason: "truncated"})
					continue
				}
				res.Published++
			}
			slices.Sort(tries)
			published = append(published, tries)
			return res, nil
		})
	var dropped []string
	env.OnActivity(rec.DropStaged, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.DropStagedInput) (activities.DropStagedResult, error) {
			dropped = append(dropped, in.Episodes...)
			return activities.DropStagedResult{Episodes: len(in.Episodes)}, nil
		})
	var cells []api.Cell
	for g := range int32(3) {
		cells = append(cells, api.Cell{Group: g, Task: schemas.Task{ID: 1, Name: "b"}, InitID: 11})
	}
	env.ExecuteWorkflow(Episodes, api.EpisodesInput{Run: "r", Round: 1, Phase: schemas.PhaseTrain, WeightsID: "w0", Cells: cells, InfraTries: 2,
		StartToClose: time.Minute, Heartbeat: 10 * time.Second})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("episodes failed: %v", err)
	}
	var tally api.Tally
	if err := env.GetWorkflowResult(&tally); err != nil {
		t.Fatal(err)
	}
	return tally, runs, published, dropped
}

// TestCorruptTryIsRunAgain: an accepted try whose staged records Publish
// refuses is run again under a new retry number, and only the rerun's try
// is published and counted; then the staged tries of all three go.
func TestCorruptTryIsRunAgain(t *testing.T) {
	bad := schemas.EpisodeID(1, schemas.PhaseTrain, 1, 0)
	tally, runs, published, dropped := corruptEnv(t, bad, 1)
	if len(runs) != 4 || runs[3].Group != 1 || runs[3].RetryBase != 1 {
		t.Fatalf("RunEpisode ran %+v; want the 3 cells, then group 1 again with RetryBase 1", runs)
	}
	want := [][]string{
		{schemas.EpisodeID(1, schemas.PhaseTrain, 0, 0) + "/try0-run", bad + "/try0-run", schemas.EpisodeID(1, schemas.PhaseTrain, 2, 0) + "/try0-run"},
		{bad + "/try1-run"},
	}
	if fmt.Sprint(published) != fmt.Sprint(want) {
		t.Errorf("published %v, want %v", published, want)
	}
	if (tally != api.Tally{Total: 3, Done: 3, Valid: 3, Successes: 1, Reruns: 1}) {
		t.Errorf("tally %+v; want 3 done and valid, 1 success (the rerun's), 1 rerun", tally)
	}
	if want := []string{schemas.EpisodeID(1, schemas.PhaseTrain, 0, 0), bad, schemas.EpisodeID(1, schemas.PhaseTrain, 2, 0)}; fmt.Sprint(dropped) != fmt.Sprint(want) {
		t.Errorf("DropStaged given %v, want %v once, after the last Publish", dropped, want)
	}
}

// TestCorruptTryRerunsAreBounded: an episode whose every try is refused is
// rerun maxReruns times, then counted lost, and the chunk still completes;
// the lost episode's staged tries are kept.
func TestCorruptTryRerunsAreBounded(t *testing.T) {
	bad := schemas.EpisodeID(1, schemas.PhaseTrain, 2, 0)
	tally, runs, published, dropped := corruptEnv(t, bad, 100)
	if len(runs) != 3+maxReruns || len(published) != 1+maxReruns {
		t.Errorf("%d RunEpisode and %d Publish calls, want %d and %d", len(runs), len(published), 3+maxReruns, 1+maxReruns)
	}
	if (tally != api.Tally{Total: 3, Done: 3, Valid: 2, Lost: 1, Reruns: maxReruns}) {
		t.Errorf("tally %+v; want 2 valid, 1 lost after %d reruns", tally, maxReruns)
	}
	if want := []string{schemas.EpisodeID(1, schemas.PhaseTrain, 0, 0), schemas.EpisodeID(1, schemas.PhaseTrain, 1, 0)}; fmt.Sprint(dropped) != fmt.Sprint(want) {
		t.Errorf("DropStaged given %v, want the two published episodes only", dropped)
	}
}
