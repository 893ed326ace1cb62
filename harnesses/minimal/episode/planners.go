package episode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/env"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
)

// Call is what a recording proxy would store about one model request.
type Call struct {
	Prompt     []int
	Completion []int
	Logprobs   []float64
	Images     []string // the request's image URLs, in prompt order
}

// Local samples from a policy in process (temperature 1) and records every
// call, standing in for model server plus recording proxy in tests.
type Local struct {
	Policy *policy.Policy
	Rand   *rand.Rand
	Calls  []Call
}

// Complete renders the chat, samples an action and returns it as a tool call.
func (l *Local) Complete(_ context.Context, msgs []policy.Message, tools []policy.Tool) (policy.Message, error) {
	prompt, images, err := l.Policy.Render(msgs, tools)
	if err != nil {
		return policy.Message{}, err
	}
	c := l.Policy.Sample(prompt, 1, -1, l.Rand, images...)
	var urls []string
	for _, m := range msgs {
		urls = append(urls, m.Images...)
	}
	l.Calls = append(l.Calls, Call{Prompt: prompt, Completion: c.IDs, Logprobs: c.Logprobs, Images: urls})
	return policy.Message{Role: "assistant", ToolCalls: []policy.ToolCall{{
		ID:       fmt.Sprintf("chatcmpl-tool-%016x", l.Rand.Uint64()),
		Type:     "function",
		Function: policy.FunctionCall{Name: l.Policy.ActionName(c.Action), Arguments: "{}"},
	}}}, nil
}

// OpenAI asks an OpenAI Chat Completions endpoint, as RPent's api planner
// does. It asks for nothing but the reply: token ids and logprobs are the
// recording proxy's business.
type OpenAI struct {
	BaseURL string // ends in /v1
	Model   string
	Client  *http.Client // must carry a timeout
	// Temperature is the request's "temperature"; nil leaves it out, so
	// the model server's default applies.
	Temperature *float64
}

// Complete POSTs {base}/chat/completions with the tools and the temperature.
func (o *OpenAI) Complete(ctx context.Context, msgs []policy.Message, tools []policy.Tool) (policy.Message, error) {
	payload := map[string]any{
		"model":       o.Model,
		"messages":    msgs,
		"tools":       tools,
		"tool_choice": "auto",
	}
	if o.Temperature != nil {
		payload["temperature"] = *o.Temperature
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return policy.Message{}, fmt.Errorf("encode request: %w", err)
	}
	url := strings.TrimSuffix(o.BaseURL, "/") + "/chat/completions"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return policy.Message{}, fmt.Errorf("request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer EMPTY")
	resp, err := o.Client.Do(req)
	if err != nil {
		return policy.Message{}, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return policy.Message{}, fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return policy.Message{}, fmt.Errorf("POST %s: %s: %.500s", url, resp.Status, b)
	}
	var r struct {
		Choices []struct {
			Message      policy.Message `json:"message"`
			FinishReason string         `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return policy.Message{}, fmt.Errorf("decode response: %w", err)
	}
	if len(r.Choices) == 0 {
		return policy.Message{}, fmt.Errorf("response has no choices: %.500s", b)
	}
	return r.Choices[0].Message, nil
}

// NewHTTPClient is the client the episode command uses: every request is
// bounded by timeout.
func NewHTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout}
}

// SuccessProb is the exact probability that p solves task from init id seed
// within maxTurns calls, by dynamic programming over the environment. It
// holds because the policy only sees the last message, and that message
// determines the state (its situation token). Validation samples; this is
// the noiseless number behind it, used to set and check the prior.
func SuccessProb(p *policy.Policy, task, seed, maxTurns int) (float64, error) {
	e, err := env.New(task, seed)
	if err != nil {
		return 0, err
	}
	type key struct {
		text string
		left int
	}
	memo := map[key]float64{}
	dists := map[string][]float64{} // log π per last message
	// The camera image is the same all episode: its features join every
	// decision (the policy reads the prompt's last image).
	var images [][]float64
	if first := FirstUser(e); len(first.Images) > 0 {
		var err error
		if _, images, err = p.Render([]policy.Message{first}, nil); err != nil {
			return 0, err
		}
	}
	var value func(e *env.Env, last policy.Message, left int) (float64, error)
	value = func(e *env.Env, last policy.Message, left int) (float64, error) {
		if left == 0 {
			return 0, nil
		}
		text := last.Role + "\x00" + last.Content
		k := key{text, left}
		if v, ok := memo[k]; ok {
			return v, nil
		}
		dist, ok := dists[text]
		if !ok {
			// The features are the last message and the generation prompt,
			// so the earlier turns need not be rendered.
			prompt, _, err := p.Render([]policy.Message{{Role: last.Role, Content: last.Content}}, nil)
			if err != nil {
				return 0, err
			}
			dist = p.LogProbs(prompt, images...)
			dists[text] = dist
		}
		var v float64
		for a, lp := range dist {
			name := p.ActionName(a)
			if name == env.Finish {
				continue // a claim ends the episode unsolved
			}
			n := e.Clone()
			r := n.Step(name)
			if r.Terminated {
				v += math.Exp(lp)
				continue
			}
			w, err := value(n, policy.Message{Role: "tool", Content: r.Text}, left-1)
			if err != nil {
				return 0, err
			}
			v += math.Exp(lp) * w
		}
		memo[k] = v
		return v, nil
	}
	return value(e, FirstUser(e), maxTurns)
}
