// Package episode runs one minimal-harness episode: the planner loop that
// RPent plays for LIBERO. It builds the chat (system prompt with the tools,
// the task instruction, then assistant tool calls and tool results), asks a
// Planner for the next reply, executes the tool calls in the environment and
// stops when the environment terminates (success), the model calls finish,
// the turn budget is spent, or the planner fails.
package episode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/env"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
)

// Termination reasons written to outcome.json.
const (
	GoalReached   = "goal_reached"
	FinishClaimed = "finish_claimed"
	MaxTurns      = "max_turns"
	ModelError    = "model_error"
)

// Outcome is outcome.json.
type Outcome struct {
	Success       bool    `json:"success"`
	Reward        float64 `json:"reward"`
	Terminated    bool    `json:"terminated"`
	FinishClaimed bool    `json:"finish_claimed"`
	Turns         int     `json:"turns"` // assistant turns executed
	Calls         int     `json:"calls"` // model requests made (a failed one included)
	Termination   string  `json:"termination"`
	Error         string  `json:"error"`
}

// Planner produces the assistant's next message.
type Planner interface {
	Complete(ctx context.Context, msgs []policy.Message, tools []policy.Tool) (policy.Message, error)
}

// Tools returns the environment's skills as OpenAI tool definitions.
func Tools() []policy.Tool {
	out := make([]policy.Tool, len(env.Skills))
	for i, s := range env.Skills {
		out[i] = policy.Tool{Type: "function", Function: policy.Function{
			Name:        s.Name,
			Description: s.Description,
			Parameters:  json.RawMessage(`{"type":"object","properties":{}}`),
		}}
	}
	return out
}

// FirstUser is the message that opens the episode: the instruction, with
// the camera image for tasks that have one. The chat keeps it, so every
// later request sends the image again (stored once, by content).
func FirstUser(e *env.Env) policy.Message {
	m := policy.Message{Role: "user", Content: e.Instruction()}
	if png := e.Image(); png != nil {
		m.Images = []string{policy.ImageURL(png)}
	}
	return m
}

// Run plays one episode of e with at most maxTurns model calls. It returns
// the outcome and the transcript. A planner error ends the episode with
// termination model_error; it is reported in the outcome, not as an error,
// because the transcript up to that point is still worth writing.
func Run(ctx context.Context, pl Planner, e *env.Env, maxTurns int) (Outcome, []policy.Message) {
	tools := Tools()
	msgs := []policy.Message{{Role: "system", Content: env.SystemPrompt}, FirstUser(e)}
	var out Outcome
	end := func(reason string) (Outcome, []policy.Message) {
		out.Termination = reason
		out.Terminated = e.Terminated()
		out.FinishClaimed = e.Claimed()
		out.Success = e.Terminated()
		if out.Success {
			out.Reward = 1
		}
		return out, msgs
	}
	for out.Turns < maxTurns {
		out.Calls++
		reply, err := pl.Complete(ctx, msgs, tools)
		if err == nil && len(reply.ToolCalls) == 0 {
			// The harness always offers tools; a reply without a call is a
			// protocol failure of the model, not a task outcome.
			err = fmt.Errorf("reply has no tool call (content %q)", reply.Content)
		}
		if err != nil {
			out.Error = err.Error()
			return end(ModelError)
		}
		reply.Role = "assistant"
		msgs = append(msgs, reply)
		out.Turns++
		for _, tc := range reply.ToolCalls {
			r := e.Step(tc.Function.Name)
			msgs = append(msgs, policy.Message{Role: "tool", ToolCallID: tc.ID, Content: r.Text})
			if r.Terminated {
				return end(GoalReached)
			}
			if r.Finished {
				return end(FinishClaimed)
			}
		}
	}
	return end(MaxTurns)
}

// WriteFiles writes outcome.json and transcript.json into dir.
func WriteFiles(dir string, out Outcome, msgs []policy.Message) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("episode: %w", err)
	}
	var errs []error
	for name, v := range map[string]any{"outcome.json": out, "transcript.json": msgs} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("episode: write %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
