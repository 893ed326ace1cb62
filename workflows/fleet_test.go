package workflows

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// fleetEnv runs the fleet workflow; notes collects the notes it sends,
// by Episodes workflow.
func fleetEnv() (*testsuite.TestWorkflowEnvironment, map[string][]string) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(Fleet)
	env.RegisterActivity(&activities.Records{})
	notes := map[string][]string{}
	var mu sync.Mutex
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", api.FleetNoteSignal, mock.Anything).Return(
		func(_, id, _, _ string, arg interface{}) error {
			mu.Lock()
			defer mu.Unlock()
			n := arg.(api.FleetNote)
			if n.Waiting {
				n.Text += " [long wait]"
			}
			notes[id] = append(notes[id], n.Text)
			return nil
		}).Maybe()
	return env, notes
}

// The fleet assigns a reporting host the most urgent weights, answers it
// by query, and drops demand whose Episodes workflow closed unannounced.
func TestFleetAssignsByPriority(t *testing.T) {
	env, notes := fleetEnv()
	var rec *activities.Records
	env.OnActivity(rec.ClosedWorkflows, mock.Anything, mock.Anything).Return(
		func(_ context.Context, ids []string) ([]string, error) {
			if slices.Contains(ids, "ep-train") {
				return []string{"ep-train"}, nil // terminated
			}
			return nil, nil
		})
	report := func() {
		env.SignalWorkflow(api.ReportSignal, api.HostReport{Host: fleet.Host{Name: "h1", Slots: 4, Servers: 1}})
	}
	assigned := func() []string {
		v, err := env.QueryWorkflow(api.AssignmentQuery, "h1")
		if err != nil {
			t.Fatal(err)
		}
		var a api.Assignment
		if err := v.Get(&a); err != nil {
			t.Fatal(err)
		}
		return a.Weights
	}
	var first, afterCheck []string
	env.RegisterDelayedCallback(func() {
		report()
		env.SignalWorkflow(api.DemandSignal, api.DemandChange{Demand: fleet.Demand{Key: "ep-eval", Run: "ev", Weights: "ev/w3", Priority: fleet.EvalPriority, Episodes: 30}})
		env.SignalWorkflow(api.DemandSignal, api.DemandChange{Demand: fleet.Demand{Key: "ep-train", Run: "tr", Weights: "tr/w0", Priority: fleet.TrainPriority, Episodes: 64}})
	}, time.Second)
	env.RegisterDelayedCallback(func() { first = assigned() }, 2*time.Second)
	for at := 10 * time.Second; at < 90*time.Second; at += 10 * time.Second {
		env.RegisterDelayedCallback(report, at)
	}
	env.RegisterDelayedCallback(func() { afterCheck = assigned() }, 75*time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, 90*time.Second)
	env.ExecuteWorkflow(Fleet, api.FleetInput{})
	if !reflect.DeepEqual(first, []string{"tr/w0"}) {
		t.Errorf("first assignment %v, want training's weights", first)
	}
	if !reflect.DeepEqual(afterCheck, []string{"ev/w3"}) {
		t.Errorf("after the terminated training's demand was dropped: %v, want the evaluation's", afterCheck)
	}
	// Each Episodes workflow hears where its weights stand, once per change.
	ev := notes["ep-eval"]
	// It came first and was served, training took the host, and it was
	// served again when training's demand went; the wait, past
	// api.LongWait, was said again as long. (The test environment
	// delivers signals from goroutines: their order is not kept.)
	count := func(notes []string, part string) (n int) {
		for _, x := range notes {
			if strings.Contains(x, part) {
				n++
			}
		}
		return n
	}
	if len(ev) != 4 || count(ev, "served by h1") != 2 || count(ev, "`ev/w3` (priority 3): waiting for a rollout host since") != 2 || count(ev, "[long wait]") != 1 {
		t.Errorf("the evaluation's notes: %q", ev)
	}
	if tr := notes["ep-train"]; len(tr) == 0 || !strings.Contains(tr[len(tr)-1], "`tr/w0` (priority 1): served by h1 · run tr on the fleet: 0 model-server loads") {
		t.Errorf("training's notes: %q", tr)
	}
}

// Weights every host failed to load are named to their Episodes
// workflows, once, with the host's cause.
func TestFleetTellsUnservable(t *testing.T) {
	env, _ := fleetEnv()
	var rec *activities.Records
	env.OnActivity(rec.ClosedWorkflows, mock.Anything, mock.Anything).Return([]string{}, nil).Maybe()
	var told []api.Unservable
	env.OnSignalExternalWorkflow(mock.Anything, "ep-1", "", api.UnservableSignal, mock.Anything).Return(
		func(_, _, _, _ string, arg interface{}) error {
			told = append(told, arg.(api.Unservable))
			return nil
		})
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(api.DemandSignal, api.DemandChange{Demand: fleet.Demand{Key: "ep-1", Run: "tr", Weights: "tr/w0", Priority: 1}})
		env.SignalWorkflow(api.ReportSignal, api.HostReport{Host: fleet.Host{Name: "h1", Slots: 4, Servers: 1,
			Failed: map[string]fleet.Failure{"tr/w0": {At: env.Now(), Cause: "model did not become ready"}}}})
	}, time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, 20*time.Second)
	env.ExecuteWorkflow(Fleet, api.FleetInput{})
	if len(told) != 1 || told[0].Weights != "tr/w0" || !strings.Contains(told[0].Cause, "h1: model did not become ready") {
		t.Errorf("told %+v, want tr/w0 once with h1's cause", told)
	}
}

// An Episodes workflow told its weights are unservable cancels its queued
// episodes, counts them lost and says why; the demand it registered is
// removed.
func TestUnservableStopsEpisodes(t *testing.T) {
	env := bareEnv()
	var ro *activities.Rollout
	env.OnActivity(ro.RunEpisode, mock.Anything, mock.Anything).Return(activities.EpisodeResult{}, nil).After(time.Hour)
	demands := recordDemands(env)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(api.UnservableSignal, api.Unservable{Weights: "r/w0", Cause: "h1: out of memory"})
	}, time.Minute)
	cells := []api.Cell{{Task: schemas.Task{ID: 0, Name: "a"}, InitID: 1}, {Task: schemas.Task{ID: 0, Name: "a"}, InitID: 2, Group: 1}}
	env.ExecuteWorkflow(Episodes, api.EpisodesInput{Run: "r", Round: 1, Phase: schemas.PhaseTrain, WeightsID: "w0", Cells: cells,
		InfraTries: 1, StartToClose: 2 * time.Hour, Heartbeat: time.Minute, Priority: fleet.TrainPriority})
	var tl api.Tally
	if err := env.GetWorkflowResult(&tl); err != nil {
		t.Fatal(err)
	}
	if tl.Lost != 2 || !strings.Contains(tl.Unservable, "weights w0 could not be loaded on any rollout host: h1: out of memory") {
		t.Errorf("tally %+v", tl)
	}
	changes := slices.DeleteFunc(demands(), func(c api.DemandChange) bool { return c.Left })
	if len(changes) != 2 || changes[0].Done || !changes[1].Done || changes[0].Demand.Weights != "r/w0" || changes[0].Demand.Priority != fleet.TrainPriority || changes[0].Demand.Episodes != 2 {
		t.Errorf("demand changes %+v", changes)
	}
}

// A chunk tells the fleet how many episodes it has left each time the
// count falls to three quarters of what it last told, before it ends;
// the fleet takes the count for a standing demand only.
func TestEpisodesTellWhatIsLeft(t *testing.T) {
	env := bareEnv()
	var ro *activities.Rollout
	var rec *activities.Records
	var cells []api.Cell
	for i := range 12 {
		cells = append(cells, api.Cell{Task: schemas.Task{ID: 0, Name: "a"}, InitID: 45, Group: int32(i)})
		// Episode i ends after i+1 minutes of the test's clock.
		env.OnActivity(ro.RunEpisode, mock.Anything, mock.MatchedBy(func(in activities.EpisodeInput) bool { return in.Group == int32(i) })).
			Return(activities.EpisodeResult{Valid: true, Try: "try0-x"}, nil).After(time.Duration(i+1) * time.Minute)
	}
	env.OnActivity(rec.Publish, mock.Anything, mock.Anything).Return(activities.PublishResult{}, nil)
	env.OnActivity(rec.DropStaged, mock.Anything, mock.Anything).Return(activities.DropStagedResult{}, nil)
	demands := recordDemands(env)
	env.ExecuteWorkflow(Episodes, api.EpisodesInput{Run: "r", Round: 1, Phase: schemas.PhaseTrain, WeightsID: "w0",
		Cells: cells, InfraTries: 1, StartToClose: time.Hour, Heartbeat: time.Minute})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	changes := demands()
	if len(changes) < 3 || changes[0].Left || changes[0].Done || !changes[len(changes)-1].Done {
		t.Fatalf("demand changes %+v: want the demand, updates, then done", changes)
	}
	last := len(cells)
	for _, c := range changes[1 : len(changes)-1] {
		if !c.Left || c.Demand.Remaining <= 0 || c.Demand.Remaining > last*3/4 {
			t.Errorf("update %+v after telling %d left", c, last)
		}
		// Episodes end a minute apart on the test's clock.
		if c.Demand.Pace != time.Minute {
			t.Errorf("update %+v: pace %v, want 1m0s", c, c.Demand.Pace)
		}
		last = c.Demand.Remaining
	}
	if last > 2 {
		t.Errorf("the last update said %d left of 12", last)
	}

	// The fleet takes an update for a standing demand, keeping its
	// Since, and ignores one that comes after the demand ended.
	fenv, _ := fleetEnv()
	var rec2 *activities.Records
	fenv.OnActivity(rec2.ClosedWorkflows, mock.Anything, mock.Anything).Return([]string{}, nil).Maybe()
	var before, during, after map[string]fleet.Demand
	status := func() map[string]fleet.Demand { return fleetStatus(t, fenv).State.Demands }
	fenv.RegisterDelayedCallback(func() {
		fenv.SignalWorkflow(api.DemandSignal, changes[0])
	}, time.Second)
	fenv.RegisterDelayedCallback(func() { before = status() }, 2*time.Second)
	fenv.RegisterDelayedCallback(func() {
		fenv.SignalWorkflow(api.DemandSignal, changes[1])
	}, 5*time.Second)
	fenv.RegisterDelayedCallback(func() { during = status() }, 6*time.Second)
	fenv.RegisterDelayedCallback(func() {
		fenv.SignalWorkflow(api.DemandSignal, changes[len(changes)-1])
		fenv.SignalWorkflow(api.DemandSignal, changes[1])
	}, 7*time.Second)
	fenv.RegisterDelayedCallback(func() { after = status() }, 8*time.Second)
	fenv.RegisterDelayedCallback(fenv.CancelWorkflow, 9*time.Second)
	fenv.ExecuteWorkflow(Fleet, api.FleetInput{})
	key := changes[0].Demand.Key
	d, ok := during[key]
	if !ok || d.Remaining != changes[1].Demand.Remaining || d.Pace != time.Minute || d.Episodes != 12 || !d.Since.Equal(before[key].Since) {
		t.Errorf("demand after the update: %+v (present %v)", d, ok)
	}
	if len(after) != 0 {
		t.Errorf("an update after the end brought the demand back: %+v", after)
	}
}

// A validation chunk followed by collection on the same weights says so
// when it ends, and the fleet keeps their server expected.
func TestDemandEndsWithAgain(t *testing.T) {
	env := bareEnv()
	var ro *activities.Rollout
	var rec *activities.Records
	env.OnActivity(ro.RunEpisode, mock.Anything, mock.Anything).Return(activities.EpisodeResult{Valid: true, Try: "try0-x"}, nil)
	env.OnActivity(rec.Publish, mock.Anything, mock.Anything).Return(activities.PublishResult{}, nil)
	env.OnActivity(rec.DropStaged, mock.Anything, mock.Anything).Return(activities.DropStagedResult{}, nil)
	demands := recordDemands(env)
	env.ExecuteWorkflow(Episodes, api.EpisodesInput{Run: "r", Round: 1, Phase: schemas.PhaseVal, WeightsID: "w0",
		Cells: []api.Cell{{Task: schemas.Task{ID: 0, Name: "a"}, InitID: 45}}, InfraTries: 1, StartToClose: time.Hour, Heartbeat: time.Minute, Again: true})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	changes := demands()
	if len(changes) != 2 || !changes[1].Done || !changes[1].Again {
		t.Fatalf("demand changes %+v, want the last Done and Again", changes)
	}

	fenv, _ := fleetEnv()
	var expected map[string]time.Time
	fenv.RegisterDelayedCallback(func() {
		fenv.SignalWorkflow(api.DemandSignal, changes[0])
		fenv.SignalWorkflow(api.DemandSignal, changes[1])
	}, time.Second)
	fenv.RegisterDelayedCallback(func() { expected = fleetStatus(t, fenv).State.Expected }, 3*time.Second)
	fenv.RegisterDelayedCallback(fenv.CancelWorkflow, 5*time.Second)
	fenv.ExecuteWorkflow(Fleet, api.FleetInput{})
	if _, ok := expected["r/w0"]; !ok {
		t.Errorf("fleet expects %v, want r/w0", expected)
	}
}

// fleetStatus asks the fleet under test for its status.
func fleetStatus(t *testing.T, env *testsuite.TestWorkflowEnvironment) api.FleetStatus {
	t.Helper()
	var st api.FleetStatus
	v, err := env.QueryWorkflow(api.FleetStatusQuery)
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// recordDemands records the demand changes an Episodes workflow sends the
// fleet; the func returns them so far.
func recordDemands(env *testsuite.TestWorkflowEnvironment) func() []api.DemandChange {
	var mu sync.Mutex
	var changes []api.DemandChange
	var rec *activities.Records
	env.OnActivity(rec.Demand, mock.Anything, mock.Anything).Return(
		func(_ context.Context, d api.DemandChange) error {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, d)
			return nil
		})
	return func() []api.DemandChange {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(changes)
	}
}

// notesParent runs one chunk of episodes the way Train and Eval do and
// answers, by query, the fleet line its details would show.
func notesParent(ctx workflow.Context, cells []api.Cell) (string, error) {
	note := watchFleetNotes(ctx, func() {}, false)
	if err := workflow.SetQueryHandler(ctx, "note", func() (string, error) { return note.text, nil }); err != nil {
		return "", err
	}
	runEpisodes(ctx, phaseRun{Run: "r", Round: 1, Phase: schemas.PhaseTrain, WeightsID: "w0", Harness: testHarness(),
		OnProgress: func(tl api.Tally) { note.fromChunk(tl) }}, cells, map[string]bool{})
	return note.text, nil
}

// A run's details show where its weights stand on the fleet without a
// signal to the run in the usual case: the chunk returns the fleet's last
// note. Only a wait of api.LongWait or more is passed on as it happens,
// and its end once.
func TestFleetNotesReachTheRun(t *testing.T) {
	env := bareEnv()
	env.RegisterWorkflow(notesParent)
	var ro *activities.Rollout
	var rec *activities.Records
	env.OnActivity(ro.RunEpisode, mock.Anything, mock.Anything).Return(activities.EpisodeResult{Valid: true, Try: "try0-x"}, nil).After(2 * time.Minute)
	env.OnActivity(rec.Publish, mock.Anything, mock.Anything).Return(activities.PublishResult{}, nil)
	env.OnActivity(rec.DropStaged, mock.Anything, mock.Anything).Return(activities.DropStagedResult{}, nil)
	env.OnActivity(rec.Demand, mock.Anything, mock.Anything).Return(nil)
	child := api.ChildID("default-test-workflow-id", 1, schemas.PhaseTrain, 0) // the test environment's workflow id
	const where = "weights `r/w0` (priority 1): "
	wait := api.FleetNote{Weights: "r/w0", Where: where + "waiting for a rollout host since 12:00:00 UTC"}
	wait.Text = wait.Where + " · run r on the fleet: 0 model-server loads"
	served := api.FleetNote{Weights: "r/w0", Where: where + "served by h1"}
	served.Text = served.Where + " · run r on the fleet: 1 model-server loads"
	signal := func(n api.FleetNote) {
		if err := env.SignalWorkflowByID(child, api.FleetNoteSignal, n); err != nil {
			t.Error(err)
		}
	}
	var seen []string
	look := func() {
		v, err := env.QueryWorkflow("note")
		if err != nil {
			t.Error(err)
			return
		}
		var s string
		if err := v.Get(&s); err != nil {
			t.Error(err)
		}
		seen = append(seen, s)
	}
	env.RegisterDelayedCallback(func() { signal(wait) }, 5*time.Second)
	env.RegisterDelayedCallback(look, 10*time.Second)
	env.RegisterDelayedCallback(func() { long := wait; long.Waiting = true; signal(long) }, 40*time.Second)
	env.RegisterDelayedCallback(look, 45*time.Second)
	env.RegisterDelayedCallback(func() { signal(served) }, 60*time.Second)
	env.RegisterDelayedCallback(look, 65*time.Second)
	env.ExecuteWorkflow(notesParent, []api.Cell{{Task: schemas.Task{ID: 0, Name: "a"}, InitID: 11}})
	var final string
	if err := env.GetWorkflowResult(&final); err != nil {
		t.Fatal(err)
	}
	want := []string{"", wait.Where, served.Where}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("the run's fleet line over time %q, want %q", seen, want)
	}
	if final != served.Text {
		t.Errorf("after the chunk: %q, want the chunk's last note %q", final, served.Text)
	}
}
