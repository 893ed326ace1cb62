package episode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/env"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/episode"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/server"
	"github.com/roundhouse-rl/roundhouse/internal/outcome"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func load(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.Load("../weights/w0/policy.json")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkEpisode asserts the invariants every outcome and transcript keep.
func checkEpisode(t *testing.T, out episode.Outcome, msgs []policy.Message, maxTurns int) {
	t.Helper()
	if out.Success != out.Terminated || out.Success != (out.Termination == episode.GoalReached) {
		t.Fatalf("success %v, terminated %v, termination %s disagree", out.Success, out.Terminated, out.Termination)
	}
	if (out.Reward == 1) != out.Success || (out.Reward != 0 && out.Reward != 1) {
		t.Fatalf("reward %v with success %v", out.Reward, out.Success)
	}
	if out.Turns > maxTurns || out.Calls != out.Turns || (out.Termination == episode.MaxTurns) != (out.Turns == maxTurns && !out.Success && !out.FinishClaimed) {
		t.Fatalf("turns %d calls %d termination %s", out.Turns, out.Calls, out.Termination)
	}
	if msgs[0].Role != "system" || msgs[1].Role != "user" || len(msgs) != 2+2*out.Turns {
		t.Fatalf("transcript of %d messages for %d turns", len(msgs), out.Turns)
	}
	for i := 2; i < len(msgs); i += 2 {
		a, r := msgs[i], msgs[i+1]
		if a.Role != "assistant" || len(a.ToolCalls) != 1 || r.Role != "tool" || r.ToolCallID != a.ToolCalls[0].ID {
			t.Fatalf("turn at %d: %+v then %+v", i, a, r)
		}
	}
	if out.FinishClaimed != (msgs[len(msgs)-2].ToolCalls[0].Function.Name == env.Finish) {
		t.Fatalf("finish_claimed %v but last call %s", out.FinishClaimed, msgs[len(msgs)-2].ToolCalls[0].Function.Name)
	}
}

// TestRunOverHTTP plays episodes against the vLLM-like server and checks the
// harness asks only for what RPent asks for.
func TestRunOverHTTP(t *testing.T) {
	p := load(t)
	h := server.New(p, "toy", "w0").Handler()
	var mu sync.Mutex
	var bodies []map[string]any
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		json.Unmarshal(b, &m)
		mu.Lock()
		bodies = append(bodies, m)
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	one := 1.0
	pl := &episode.OpenAI{BaseURL: ts.URL + "/v1", Model: "toy", Client: episode.NewHTTPClient(10 * time.Second), Temperature: &one}
	terminations := map[string]int{}
	for task := range env.NumTasks() {
		for seed := 11; seed <= 16; seed++ {
			e, _ := env.New(task, seed)
			out, msgs := episode.Run(context.Background(), pl, e, env.DefaultMaxTurns)
			checkEpisode(t, out, msgs, env.DefaultMaxTurns)
			terminations[out.Termination]++
		}
	}
	if terminations[episode.GoalReached] == 0 || terminations[episode.GoalReached] == 36 || terminations[episode.ModelError] > 0 {
		t.Errorf("terminations %v: want some successes, some failures, no errors", terminations)
	}
	for _, b := range bodies {
		for _, k := range []string{"logprobs", "top_logprobs", "return_token_ids", "stream"} {
			if _, ok := b[k]; ok {
				t.Fatalf("the harness asked for %s; that is the proxy's business", k)
			}
		}
		if b["temperature"] != 1.0 || len(b["tools"].([]any)) != len(env.Skills) {
			t.Fatalf("request %v", b)
		}
	}
}

func TestModelErrors(t *testing.T) {
	e, _ := env.New(0, 11)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
	}))
	defer ts.Close()
	out, msgs := episode.Run(context.Background(), &episode.OpenAI{BaseURL: ts.URL + "/v1", Model: "toy", Client: episode.NewHTTPClient(10 * time.Second)}, e, 8)
	if out.Termination != episode.ModelError || out.Success || out.Calls != 1 || out.Turns != 0 || !strings.Contains(out.Error, "500") || len(msgs) != 2 {
		t.Fatalf("500 from the model: %+v", out)
	}

	// A model that never answers: the request timeout ends the episode.
	stop := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // lets the server notice the client hanging up
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer hang.Close()
	defer close(stop)
	out, _ = episode.Run(context.Background(), &episode.OpenAI{BaseURL: hang.URL + "/v1", Model: "toy", Client: episode.NewHTTPClient(50 * time.Millisecond)}, e.Clone(), 8)
	if out.Termination != episode.ModelError || out.Error == "" {
		t.Fatalf("hanging model: %+v", out)
	}
}

// TestVocabularyCovers checks every word the harness shows the model is in
// the initial weights' vocabulary: an <unk> would hide state from the model.
func TestVocabularyCovers(t *testing.T) {
	p := load(t)
	unk, _ := p.ID(policy.Unk)
	rng := rand.New(rand.NewPCG(1, 1))
	for task := range env.NumTasks() {
		for seed := 11; seed <= 49; seed++ {
			e, _ := env.New(task, seed)
			pl := &episode.Local{Policy: p, Rand: rng}
			out, msgs := episode.Run(context.Background(), pl, e, env.DefaultMaxTurns)
			checkEpisode(t, out, msgs, env.DefaultMaxTurns)
			for _, c := range pl.Calls {
				for _, id := range c.Prompt {
					if id == unk {
						t.Fatalf("task %d seed %d: a prompt contains <unk>", task, seed)
					}
				}
			}
		}
	}
}

// TestSuccessProb checks the exact success probability against sampling.
func TestSuccessProb(t *testing.T) {
	p := load(t)
	rng := rand.New(rand.NewPCG(2, 2))
	for _, c := range []struct{ task, seed int }{{0, 45}, {3, 47}} {
		exact, err := episode.SuccessProb(p, c.task, c.seed, env.DefaultMaxTurns)
		if err != nil {
			t.Fatal(err)
		}
		const n = 3000
		wins := 0
		for range n {
			e, _ := env.New(c.task, c.seed)
			if out, _ := episode.Run(context.Background(), &episode.Local{Policy: p, Rand: rng}, e, env.DefaultMaxTurns); out.Success {
				wins++
			}
		}
		if got := float64(wins) / n; math.Abs(got-exact) > 0.03 {
			t.Errorf("task %d seed %d: sampled %.3f, exact %.3f", c.task, c.seed, got, exact)
		}
	}
}

func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	out := episode.Outcome{Success: true, Reward: 1, Terminated: true, Turns: 2, Calls: 2, Termination: episode.GoalReached}
	msgs := []policy.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}}
	if err := episode.WriteFiles(dir, out, msgs); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	b, _ := os.ReadFile(dir + "/outcome.json")
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"success", "reward", "terminated", "finish_claimed", "turns", "calls", "termination", "error"} {
		if _, ok := got[k]; !ok {
			t.Errorf("outcome.json lacks %q: %s", k, b)
		}
	}
	var tr []policy.Message
	b, _ = os.ReadFile(dir + "/transcript.json")
	if err := json.Unmarshal(b, &tr); err != nil || len(tr) != 2 {
		t.Errorf("transcript.json: %v %s", err, b)
	}
}

// looping calls the same tool every turn: a planner stuck in a loop.
type looping struct{ tool string }

func (l looping) Complete(context.Context, []policy.Message, []policy.Tool) (policy.Message, error) {
	return policy.Message{Role: "assistant", ToolCalls: []policy.ToolCall{{ID: "call", Type: "function",
		Function: policy.FunctionCall{Name: l.tool, Arguments: "{}"}}}}, nil
}

// A planner that loops until the turn budget is spent, with the model
// server answering every call, is a task failure: valid, reward 0, so it
// stays in the advantages and the rates (docs/design.md §7, row 10).
func TestLoopingPlannerIsATaskFailure(t *testing.T) {
	e, _ := env.New(0, 11)
	out, msgs := episode.Run(context.Background(), looping{"close_cabinet"}, e, 8)
	if out.Termination != episode.MaxTurns || out.Turns != 8 || out.Success {
		t.Fatalf("looping planner: %+v", out)
	}
	dir := t.TempDir()
	if err := episode.WriteFiles(dir, out, msgs); err != nil {
		t.Fatal(err)
	}
	healthy := make([]schemas.Call, out.Calls)
	for i := range healthy {
		healthy[i] = schemas.Call{CallIndex: int32(i), HTTPStatus: 200}
	}
	r := outcome.Decide(schemas.OutcomeSpec{Adapter: "minimal", File: "outcome.json"}, dir, outcome.Exit{Health: outcome.HealthOf(healthy)})
	if !r.Valid || r.Success || r.Reward != 0 || r.FailureClass != schemas.FailureTask || r.Termination != episode.MaxTurns {
		t.Fatalf("outcome %+v, want a valid task failure (max_turns)", r)
	}
}
