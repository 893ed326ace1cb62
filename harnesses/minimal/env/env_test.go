package env

import (
	"strings"
	"testing"
)

// TestOracleSolves follows the oracle from every initial state: each task is
// solved in 2–4 skill calls, and the env says so by terminating.
func TestOracleSolves(t *testing.T) {
	for task := range NumTasks() {
		firsts := map[string]bool{}
		for seed := 1; seed <= 49; seed++ {
			e, err := New(task, seed)
			if err != nil {
				t.Fatal(err)
			}
			var calls []string
			for !e.Terminated() && len(calls) < 10 {
				best := Best(task, e.State())
				if len(best) == 0 {
					t.Fatalf("task %d seed %d: no way to the goal from %+v", task, seed, e.State())
				}
				calls = append(calls, best[0])
				r := e.Step(best[0])
				if r.Terminated != e.Terminated() || r.Finished {
					t.Fatalf("task %d: result %+v disagrees with the env", task, r)
				}
			}
			if n := len(calls); n < 2 || n > 4 {
				t.Errorf("task %d seed %d: solved in %d calls %v, want 2–4", task, seed, n, calls)
			}
			if !strings.Contains(e.Instruction(), TaskName(task)) {
				t.Errorf("instruction %q lacks the task name", e.Instruction())
			}
			first, _ := New(task, seed)
			firsts[Best(task, first.State())[0]] = true
		}
		if len(firsts) < 2 && task != 1 && task != 4 {
			t.Errorf("task %d: the init id never changes the right first call %v", task, firsts)
		}
	}
}

// TestInitIDsMatter checks the init id changes the initial state, also
// within the validation ids, and deterministically.
func TestInitIDsMatter(t *testing.T) {
	for task := range NumTasks() {
		states := map[State]bool{}
		for seed := 11; seed <= 49; seed++ {
			a, _ := New(task, seed)
			b, _ := New(task, seed)
			if a.State() != b.State() {
				t.Fatalf("task %d seed %d: two different initial states", task, seed)
			}
			states[a.State()] = true
		}
		if len(states) < 2 {
			t.Errorf("task %d: every init id gives the same initial state", task)
		}
	}
	if _, err := New(NumTasks(), 1); err == nil {
		t.Error("task out of range: want error")
	}
}

func TestFinishIsOnlyAClaim(t *testing.T) {
	e, _ := New(0, 11)
	r := e.Step(Finish)
	if !r.Finished || r.Terminated || e.Terminated() || !e.Claimed() {
		t.Fatalf("finish: %+v terminated=%v claimed=%v", r, e.Terminated(), e.Claimed())
	}
	if r := e.Step("open_drawer"); !strings.HasPrefix(r.Text, "error") {
		t.Errorf("step after finish: %q", r.Text)
	}
}

func TestNoOpsAndIrreversibleFailures(t *testing.T) {
	e := &Env{task: 0, state: closed} // cube on the table, drawer closed
	e.Step("pick_cube")
	held := e.State()
	if r := e.Step("open_drawer"); !strings.Contains(r.Text, "nothing happened") || e.State() != held {
		t.Fatalf("opening with a full gripper: %q, state %+v", r.Text, e.State())
	}
	if r := e.Step("place_in_drawer"); !strings.Contains(r.Text, "broke") || e.State().Cube != floor {
		t.Fatalf("placing into the closed drawer: %q", r.Text)
	}
	if best := Best(0, e.State()); best != nil {
		t.Errorf("a broken cube still has a way to the goal: %v", best)
	}
	if r := e.Step("pick_cube"); !strings.Contains(r.Text, "broken") {
		t.Errorf("picking the broken cube: %q", r.Text)
	}
}

// TestSituations checks the situation token names (task, visible state)
// one to one — states differing only in the marked container share it, so
// no text tells them apart — and appears in every observation.
func TestSituations(t *testing.T) {
	for task := range NumTasks() {
		seen := map[string]State{}
		for _, s := range States(task) {
			tok := Situation(task, s)
			if prev, dup := seen[tok]; dup && prev.visible() != s.visible() {
				t.Fatalf("%s names both %+v and %+v", tok, prev, s)
			}
			seen[tok] = s
		}
		e, _ := New(task, 20)
		if r := e.Step("pick_bowl"); !strings.Contains(r.Text, "situation "+Situation(task, e.State())+".") {
			t.Errorf("result %q lacks its situation token", r.Text)
		}
	}
}

// TestVisionTask: the marked container shows in the camera image and
// nowhere in the text; placing into the other one breaks the cube.
func TestVisionTask(t *testing.T) {
	const task = 6
	if !Camera(task) || Camera(0) {
		t.Fatal("only the vision task has a camera")
	}
	images := map[loc]map[string]bool{drawer: {}, cabinet: {}}
	for seed := 11; seed <= 49; seed++ {
		e, _ := New(task, seed)
		m := e.State().Marked
		if images[m] == nil {
			t.Fatalf("seed %d marks %v", seed, m)
		}
		images[m][string(e.Image())] = true
	}
	for img := range images[drawer] {
		if images[cabinet][img] {
			t.Error("the same camera image shows either container marked")
		}
	}
	if len(images[drawer]) == 0 || len(images[cabinet]) == 0 {
		t.Fatalf("init ids 11-49 do not mark both containers: %v", images)
	}
	for _, v := range tasks[task].variants {
		w := v
		w.Marked = drawer + cabinet - v.Marked
		if describe(task, v) != describe(task, w) {
			t.Errorf("the text tells the marked container: %q vs %q", describe(task, v), describe(task, w))
		}
	}
	e := &Env{task: task, state: with(func(s *State) { s.Marked, s.DrawerOpen, s.CabinetOpen = drawer, true, true })}
	e.Step("pick_cube")
	if r := e.Step("place_in_cabinet"); !strings.Contains(r.Text, "not the marked container") || e.State().Cube != floor || r.Terminated {
		t.Fatalf("placing into the unmarked cabinet: %+v", r)
	}
	e = &Env{task: task, state: with(func(s *State) { s.Marked, s.DrawerOpen, s.CabinetOpen = drawer, true, true })}
	e.Step("pick_cube")
	if r := e.Step("place_in_drawer"); !r.Terminated {
		t.Fatalf("placing into the marked drawer: %+v", r)
	}
	if Image := (&Env{task: 0}).Image(); Image != nil {
		t.Error("a task without a camera sends an image")
	}
}
