package standin

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"image"
	"image/color"
	"image/png"
	"math"
)

// Instructions are LIBERO-like task instructions; a task id picks one.
var Instructions = []string{
	"pick up the alphabet soup and place it in the basket",
	"pick up the cream cheese and place it in the basket",
	"pick up the salad dressing and place it in the basket",
	"pick up the bbq sauce and place it in the basket",
	"pick up the ketchup and place it in the basket",
	"pick up the tomato sauce and place it in the basket",
	"pick up the butter and place it in the basket",
	"pick up the milk and place it in the basket",
	"pick up the chocolate pudding and place it in the basket",
	"pick up the orange juice and place it in the basket",
}

// Env is the stand-in LIBERO environment, pinned like RPent's env server to
// one (suite, task, seed, max episode steps). It only sees action chunks.
//
// Success: the task needs Required "progress" events (1 or 2, from the
// seed). An action chunk makes progress from the current level when a hash
// of (suite, task, seed, level, chunk) is even, so from a given state some
// instructions (which the VLA turns into chunks) work and others do not, the
// same instruction always gives the same result, and the planner's choices
// matter. Reaching Required terminates the episode: LIBERO's success.
type Env struct {
	Suite      string
	Task, Seed int
	MaxSteps   int
	Required   int

	progress   int
	steps      int
	terminated bool
	truncated  bool
}

// NewEnv returns the environment of one (suite, task, seed).
func NewEnv(suite string, task, seed, maxSteps int) *Env {
	return &Env{Suite: suite, Task: task, Seed: seed, MaxSteps: maxSteps,
		Required: 1 + int(hash(suite, task, seed)%2)}
}

// Instruction is the task's language instruction.
func (e *Env) Instruction() string {
	return Instructions[((e.Task%len(Instructions))+len(Instructions))%len(Instructions)]
}

// StepResult is what one chunk did.
type StepResult struct {
	Terminated bool `json:"terminated"`
	Truncated  bool `json:"truncated"`
	Progress   int  `json:"progress"`
	Required   int  `json:"required"`
	EnvSteps   int  `json:"env_steps"`
}

// Step executes an action chunk (one env step per action).
func (e *Env) Step(actions [][]float64) (StepResult, error) {
	if e.terminated || e.truncated {
		return e.result(), fmt.Errorf("episode is over (terminated=%v truncated=%v): reset first", e.terminated, e.truncated)
	}
	if len(actions) == 0 {
		return e.result(), fmt.Errorf("empty action chunk")
	}
	for _, a := range actions {
		if len(a) != 7 {
			return e.result(), fmt.Errorf("action has %d dims, want 7 (xyz, rpy, gripper)", len(a))
		}
	}
	e.steps += len(actions)
	if hash(e.Suite, e.Task, e.Seed, e.progress, chunkKey(actions))%2 == 0 {
		e.progress++
	}
	e.terminated = e.progress >= e.Required
	e.truncated = !e.terminated && e.steps >= e.MaxSteps
	return e.result(), nil
}

func (e *Env) result() StepResult {
	return StepResult{Terminated: e.terminated, Truncated: e.truncated, Progress: e.progress, Required: e.Required, EnvSteps: e.steps}
}

// Observation is a small camera image (PNG) that reflects the state, so
// images change over the episode as LIBERO's do.
func (e *Env) Observation() string {
	img := image.NewRGBA(image.Rect(0, 0, 16, 16))
	h := hash(e.Suite, e.Task, e.Seed, e.progress)
	for y := 0; y < 16; y++ {
		for x := 0; x < 16; x++ {
			v := uint8(h >> ((x + y) % 56))
			img.Set(x, y, color.RGBA{v, uint8(x * 16), uint8(y * 16), 255})
		}
	}
	var b bytes.Buffer
	_ = png.Encode(&b, img) // encoding into memory cannot fail
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// ChunkFor is the stand-in VLA: an instruction becomes a deterministic
// chunk of 5 actions (xyz, rpy, gripper), like Pi0.5's first five of ten.
func ChunkFor(instruction string) [][]float64 {
	out := make([][]float64, 5)
	for i := range out {
		a := make([]float64, 7)
		for j := range a {
			a[j] = float64(hash(instruction, i, j)%2001)/1000 - 1 // [-1, 1]
		}
		a[6] = math.Copysign(1, a[6]) // the gripper is open or closed
		out[i] = a
	}
	return out
}

func chunkKey(actions [][]float64) string {
	return fmt.Sprintf("%.3f", actions)
}

func hash(parts ...any) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		fmt.Fprintf(h, "\x00%v", p)
	}
	return h.Sum64()
}
