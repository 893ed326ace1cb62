// Package env is the minimal harness's toy robot task: a table with a drawer,
// a cabinet, a plate, a cube and a bowl, manipulated through skill tools.
//
// Six tasks each need 2–4 skill calls; the init id (seed) picks one of a
// task's initial states (drawer already open or not, bowl in the cabinet or
// on the table, …), so the right sequence depends on it. Some wrong skills
// are no-ops (opening with a full gripper), some are irreversible (placing
// into a closed drawer drops and breaks the object).
//
// The environment alone decides success: a step that reaches the goal state
// terminates the episode (like LIBERO's terminated flag). The model's finish
// call is only a claim and never makes an episode successful.
//
// Every observation names a situation token "t<task>s<n>" that identifies the
// (task, state) pair, so the linear toy policy can represent the optimal
// policy, followed by plain words describing the state.
package env

import (
	"fmt"
	"slices"
	"strings"
)

// DefaultMaxTurns bounds the model calls of an episode unless configured.
const DefaultMaxTurns = 8

// Finish is the tool with which the model claims the task is done.
const Finish = "finish"

// Skill is a tool the planner may call. None takes arguments.
type Skill struct {
	Name        string
	Description string
}

// Skills lists the tools in a fixed order; Finish is last.
var Skills = []Skill{
	{"open_drawer", "open the drawer. the gripper must be empty."},
	{"close_drawer", "close the drawer. the gripper must be empty."},
	{"open_cabinet", "open the cabinet. the gripper must be empty."},
	{"close_cabinet", "close the cabinet. the gripper must be empty."},
	{"pick_cube", "pick up the cube with the empty gripper."},
	{"pick_bowl", "pick up the bowl with the empty gripper."},
	{"place_in_drawer", "place the held object in the drawer."},
	{"place_in_cabinet", "place the held object in the cabinet."},
	{"place_on_plate", "place the held object on the plate."},
	{Finish, "declare that the task is complete."},
}

// SystemPrompt is the harness's system message.
const SystemPrompt = "you control a robot arm at a table with a drawer, a cabinet, a plate, a cube and a bowl. " +
	"call exactly one tool per turn. the gripper holds one object at a time and must be empty to open or close the drawer or the cabinet. " +
	"an object placed in a closed drawer or cabinet, or on an occupied plate, falls to the floor and breaks. " +
	"call finish when the task is complete."

type loc uint8

const (
	table loc = iota
	plate
	drawer
	cabinet
	gripper
	floor
)

var where = [...]string{
	table:   "on the table",
	plate:   "on the plate",
	drawer:  "in the drawer",
	cabinet: "in the cabinet",
	gripper: "in the gripper",
	floor:   "broken on the floor",
}

// State is the whole world. It is a comparable value.
type State struct {
	DrawerOpen, CabinetOpen bool
	Cube, Bowl              loc
	// Marked is the container (drawer or cabinet) painted red in the
	// camera image of the vision task; table (zero) elsewhere. No text
	// names it: observations describe the visible state only.
	Marked loc
}

// visible is what the text observations can tell apart.
func (s State) visible() State { s.Marked = table; return s }

type task struct {
	name     string
	goal     func(State) bool
	variants []State
	// camera: every request of the episode carries the camera image
	// (Image), the only place the marked container shows.
	camera bool
}

var closed = State{Cube: table, Bowl: table}

func with(f func(*State)) State {
	s := closed
	f(&s)
	return s
}

var tasks = []task{
	{"put the cube in the drawer", func(s State) bool { return s.Cube == drawer }, []State{
		closed,
		with(func(s *State) { s.DrawerOpen = true }),
		with(func(s *State) { s.Cube = plate }),
		with(func(s *State) { s.Cube, s.DrawerOpen = plate, true }),
	}, false},
	{"put the cube in the drawer and close the drawer", func(s State) bool { return s.Cube == drawer && !s.DrawerOpen }, []State{
		closed,
		with(func(s *State) { s.DrawerOpen = true }),
	}, false},
	{"put the bowl on the plate", func(s State) bool { return s.Bowl == plate }, []State{
		closed,
		with(func(s *State) { s.Bowl = cabinet }),
		with(func(s *State) { s.Bowl, s.CabinetOpen = cabinet, true }),
	}, false},
	{"put the bowl in the cabinet", func(s State) bool { return s.Bowl == cabinet }, []State{
		closed,
		with(func(s *State) { s.CabinetOpen = true }),
		with(func(s *State) { s.Bowl = plate }),
	}, false},
	{"put the cube in the cabinet and close the cabinet", func(s State) bool { return s.Cube == cabinet && !s.CabinetOpen }, []State{
		closed,
		with(func(s *State) { s.CabinetOpen = true }),
	}, false},
	{"put the cube on the plate", func(s State) bool { return s.Cube == plate }, []State{
		closed,
		with(func(s *State) { s.Cube = drawer }),
		with(func(s *State) { s.Cube, s.DrawerOpen = drawer, true }),
	}, false},
	// The vision task: which container is right exists only in the image.
	// The unmarked one has no bottom: the cube falls through and breaks, so
	// guessing caps success at one half.
	{"put the cube in the marked container", func(s State) bool { return s.Cube == s.Marked }, []State{
		with(func(s *State) { s.Marked, s.DrawerOpen, s.CabinetOpen = drawer, true, true }),
		with(func(s *State) { s.Marked, s.DrawerOpen, s.CabinetOpen = cabinet, true, true }),
		with(func(s *State) { s.Marked = drawer }),
		with(func(s *State) { s.Marked = cabinet }),
	}, true},
}

// Camera reports whether task i's episodes send the camera image.
func Camera(i int) bool { return tasks[i].camera }

// NumTasks is the number of tasks; tasks are numbered from 0.
func NumTasks() int { return len(tasks) }

// TaskName is the instruction of task i.
func TaskName(i int) string { return tasks[i].name }

// step applies a skill to s. It returns the new state and the sentence
// describing what happened.
func step(s State, skill string) (State, string) {
	held := func() (string, *loc) {
		switch {
		case s.Cube == gripper:
			return "cube", &s.Cube
		case s.Bowl == gripper:
			return "bowl", &s.Bowl
		}
		return "", nil
	}
	name, obj := held()
	door := func(what string, open *bool, want bool) string {
		verb := map[bool]string{true: "open", false: "close"}[want]
		state := map[bool]string{true: "open", false: "closed"}[want]
		switch {
		case obj != nil:
			return "nothing happened: the gripper is full."
		case *open == want:
			return fmt.Sprintf("nothing happened: the %s is already %s.", what, state)
		}
		*open = want
		return fmt.Sprintf("you %sed the %s.", strings.TrimSuffix(verb, "e"), what)
	}
	pick := func(what string, l *loc) string {
		switch {
		case obj != nil:
			return "nothing happened: the gripper is full."
		case *l == floor:
			return fmt.Sprintf("nothing happened: the %s is broken.", what)
		case *l == drawer && !s.DrawerOpen, *l == cabinet && !s.CabinetOpen:
			return fmt.Sprintf("nothing happened: the %s is not reachable.", what)
		}
		*l = gripper
		return fmt.Sprintf("you picked up the %s.", what)
	}
	place := func(to loc, ok bool, why string) string {
		if obj == nil {
			return "nothing happened: the gripper is empty."
		}
		if ok && s.Marked != table && (to == drawer || to == cabinet) && to != s.Marked {
			ok, why = false, "that is not the marked container"
		}
		if !ok {
			*obj = floor
			return fmt.Sprintf("%s: the %s fell to the floor and broke.", why, name)
		}
		*obj = to
		return fmt.Sprintf("you placed the %s %s.", name, where[to])
	}
	var msg string
	switch skill {
	case "open_drawer":
		msg = door("drawer", &s.DrawerOpen, true)
	case "close_drawer":
		msg = door("drawer", &s.DrawerOpen, false)
	case "open_cabinet":
		msg = door("cabinet", &s.CabinetOpen, true)
	case "close_cabinet":
		msg = door("cabinet", &s.CabinetOpen, false)
	case "pick_cube":
		msg = pick("cube", &s.Cube)
	case "pick_bowl":
		msg = pick("bowl", &s.Bowl)
	case "place_in_drawer":
		msg = place(drawer, s.DrawerOpen, "the drawer is closed")
	case "place_in_cabinet":
		msg = place(cabinet, s.CabinetOpen, "the cabinet is closed")
	case "place_on_plate":
		msg = place(plate, s.Cube != plate && s.Bowl != plate, "the plate is occupied")
	default:
		msg = fmt.Sprintf("error: unknown tool %s. nothing happened.", skill)
	}
	return s, msg
}

// situations maps the reachable states of each task to their situation
// numbers, given in breadth-first order from its initial states, which
// makes the tokens deterministic. States that differ only in what the text
// cannot show (the marked container) share a number.
var situations = func() []map[State]int {
	out := make([]map[State]int, len(tasks))
	for i, t := range tasks {
		seen, ids := map[State]int{}, map[State]int{}
		var queue []State
		add := func(s State) {
			if _, ok := seen[s]; ok {
				return
			}
			id, ok := ids[s.visible()]
			if !ok {
				id = len(ids)
				ids[s.visible()] = id
			}
			seen[s] = id
			queue = append(queue, s)
		}
		for _, v := range t.variants {
			add(v)
		}
		for len(queue) > 0 {
			s := queue[0]
			queue = queue[1:]
			if t.goal(s) {
				continue // the episode ends here
			}
			for _, sk := range Skills[:len(Skills)-1] {
				n, _ := step(s, sk.Name)
				add(n)
			}
		}
		out[i] = seen
	}
	return out
}()

// Situation is the token naming (task, state).
func Situation(task int, s State) string {
	return fmt.Sprintf("t%ds%d", task, situations[task][s])
}

func describe(task int, s State) string {
	open := map[bool]string{true: "open", false: "closed"}
	return fmt.Sprintf("situation %s. the drawer is %s. the cabinet is %s. the cube is %s. the bowl is %s.",
		Situation(task, s), open[s.DrawerOpen], open[s.CabinetOpen], where[s.Cube], where[s.Bowl])
}

// Env is one episode of one task. Copying it (Clone) forks the episode.
type Env struct {
	task       int
	state      State
	terminated bool
	claimed    bool
}

// Variant maps an init id to the index of the task's initial state. It is a
// fixed hash so neighbouring ids spread over the variants.
func Variant(task, seed int) int {
	x := uint64(task)<<32 ^ uint64(uint32(seed))
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return int(x % uint64(len(tasks[task].variants)))
}

// New starts task (0-based) from the initial state the init id maps to.
func New(task, seed int) (*Env, error) {
	if task < 0 || task >= len(tasks) {
		return nil, fmt.Errorf("env: task %d outside 0..%d", task, len(tasks)-1)
	}
	return &Env{task: task, state: tasks[task].variants[Variant(task, seed)]}, nil
}

// Clone returns an independent copy of the episode.
func (e *Env) Clone() *Env { c := *e; return &c }

// State is the current world state.
func (e *Env) State() State { return e.state }

// Instruction is the user message that opens the episode.
func (e *Env) Instruction() string {
	if tasks[e.task].camera {
		return fmt.Sprintf("task: %s. the camera image shows it in red. %s", tasks[e.task].name, describe(e.task, e.state))
	}
	return fmt.Sprintf("task: %s. %s", tasks[e.task].name, describe(e.task, e.state))
}

// Image is the camera image (PNG) the episode's requests carry, nil for
// tasks without a camera.
func (e *Env) Image() []byte {
	if !tasks[e.task].camera {
		return nil
	}
	return render(e.state)
}

// Terminated reports whether the goal state was reached.
func (e *Env) Terminated() bool { return e.terminated }

// Claimed reports whether the model called finish.
func (e *Env) Claimed() bool { return e.claimed }

// Result is the outcome of one tool call.
type Result struct {
	Text       string // the tool message content
	Terminated bool   // goal reached: success
	Finished   bool   // the model called finish: the episode ends
}

// Step executes one tool call.
func (e *Env) Step(tool string) Result {
	if e.terminated || e.claimed {
		return Result{Text: "error: the episode is over.", Terminated: e.terminated, Finished: e.claimed}
	}
	if tool == Finish {
		e.claimed = true
		return Result{Text: "finish requested. the episode ends.", Finished: true}
	}
	s, msg := step(e.state, tool)
	e.state = s
	text := msg + " " + describe(e.task, s)
	if tasks[e.task].goal(s) {
		e.terminated = true
		text += " the task is complete."
	}
	return Result{Text: text, Terminated: e.terminated}
}

// Best returns the skills that start a shortest path to the goal of task
// from state s (none when the goal is unreachable or already reached). It is
// the oracle the initial weights' prior and the tests use; the planner never
// sees it.
func Best(task int, s State) []string {
	goal := tasks[task].goal
	dist := func(from State) int {
		if goal(from) {
			return 0
		}
		seen := map[State]bool{from: true}
		frontier := []State{from}
		for d := 1; len(frontier) > 0; d++ {
			var next []State
			for _, s := range frontier {
				for _, sk := range Skills[:len(Skills)-1] {
					n, _ := step(s, sk.Name)
					if goal(n) {
						return d
					}
					if !seen[n] {
						seen[n] = true
						next = append(next, n)
					}
				}
			}
			frontier = next
		}
		return -1
	}
	d := dist(s)
	if d <= 0 {
		return nil
	}
	var best []string
	for _, sk := range Skills[:len(Skills)-1] {
		n, _ := step(s, sk.Name)
		if dist(n) == d-1 {
			best = append(best, sk.Name)
		}
	}
	return best
}

// States lists the states of task the episode can reach, in situation-token
// order (states sharing a token, which differ in the marked container
// only, ordered by it).
func States(task int) []State {
	out := make([]State, 0, len(situations[task]))
	for s := range situations[task] {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b State) int {
		if d := situations[task][a] - situations[task][b]; d != 0 {
			return d
		}
		return int(a.Marked) - int(b.Marked)
	})
	return out
}

// Texts returns every text the environment and harness can show the model:
// the system prompt, the tool descriptions, and every instruction and tool
// result reachable in any task. The initial weights build their vocabulary
// from it.
func Texts() []string {
	out := []string{SystemPrompt, "finish requested. the episode ends.", "error: the episode is over."}
	for _, sk := range Skills {
		out = append(out, sk.Name, sk.Description)
	}
	out = append(out, "the camera image shows it in red.")
	for i, t := range tasks {
		out = append(out, "task: "+t.name+".")
		for s := range situations[i] {
			out = append(out, describe(i, s))
			if t.goal(s) {
				continue
			}
			for _, sk := range Skills[:len(Skills)-1] {
				_, msg := step(s, sk.Name)
				out = append(out, msg+" the task is complete.")
			}
		}
	}
	return out
}
