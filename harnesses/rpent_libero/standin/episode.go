package standin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config holds rpent's flags (the subset a batch LIBERO episode uses).
type Config struct {
	Robot, LiberoType, Suite string
	Task, Seed               int
	Planner, Model, BaseURL  string
	MaxTurns                 int
	MaxEpisodeSteps          int
	OutputDir                string
	EnvEndpoint              string
	VLAEndpoint              string
	SAM3Endpoint             string
	// PolicyMode is tool (one tool call a turn) or code (Python snippets
	// calling robo.<tool>(), code.go); the two limits bound each snippet.
	PolicyMode   string
	CodeTimeoutS float64
	CodeMaxCalls int
}

// Exit codes: 0 the episode ran to an end, 1 planner error (the transcript
// says which), 2 bad usage.
const (
	ExitOK      = 0
	ExitPlanner = 1
	ExitUsage   = 2
)

// ParseArgs parses rpent's command line. Unknown flags are errors, so a
// typo in a harness file fails the stand-in test instead of being ignored.
func ParseArgs(args []string, stderr io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("rpent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Robot, "robot", "", "robot family (the stand-in knows libero)")
	fs.StringVar(&c.LiberoType, "libero-type", "", "LIBERO variant, e.g. pro")
	fs.StringVar(&c.Suite, "suite", "", "LIBERO suite, e.g. libero_object_swap")
	fs.IntVar(&c.Task, "task", 0, "task number in the suite")
	fs.IntVar(&c.Seed, "seed", 0, "seed: the env server maps it to the task's init state")
	fs.StringVar(&c.Planner, "planner", "", "planner backend (the stand-in knows api)")
	fs.StringVar(&c.Model, "model", "", "model, e.g. openai-chat:NAME")
	fs.StringVar(&c.BaseURL, "base-url", "", "OpenAI-compatible base URL ending in /v1")
	fs.IntVar(&c.MaxTurns, "max-turns", 100, "planner turns allowed")
	fs.IntVar(&c.MaxEpisodeSteps, "max-episode-steps", 10000, "environment steps allowed")
	fs.StringVar(&c.OutputDir, "output-dir", "", "directory for transcript_<tag>.json, states.json and run.log")
	fs.StringVar(&c.EnvEndpoint, "env-endpoint", "", "[http|socket://]HOST:PORT of a running env service (default: spawn one)")
	fs.StringVar(&c.VLAEndpoint, "vla-endpoint", "", "[http|socket://]HOST:PORT of a running VLA service (default: spawn one)")
	fs.StringVar(&c.SAM3Endpoint, "sam3-endpoint", "", "[http|socket://]HOST:PORT of a running SAM3 service (default: spawn one)")
	fs.StringVar(&c.PolicyMode, "policy-mode", "tool", "tool (tool calls) or code (Python snippets calling robo.<tool>())")
	fs.Float64Var(&c.CodeTimeoutS, "code-timeout-s", 120, "code mode: seconds each snippet may run")
	fs.IntVar(&c.CodeMaxCalls, "code-max-calls", 100, "code mode: robot tool calls each snippet may make")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case c.Robot != "libero":
		return c, fmt.Errorf("--robot %q: the stand-in runs libero only", c.Robot)
	case c.Planner != "api":
		return c, fmt.Errorf("--planner %q: the stand-in runs the api planner only", c.Planner)
	case !strings.HasPrefix(c.Model, "openai-chat:") || c.Model == "openai-chat:":
		return c, fmt.Errorf("--model %q: the api planner wants openai-chat:NAME", c.Model)
	case c.BaseURL == "":
		return c, errors.New("--base-url is required with --planner api")
	case c.Suite == "" || c.LiberoType == "":
		return c, errors.New("--suite and --libero-type are required")
	case c.Task < 0 || c.Seed < 0:
		return c, errors.New("--task and --seed must be non-negative")
	case c.MaxTurns < 1 || c.MaxEpisodeSteps < 1:
		return c, errors.New("--max-turns and --max-episode-steps must be positive")
	case c.OutputDir == "":
		return c, errors.New("--output-dir is required")
	case c.PolicyMode != "tool" && c.PolicyMode != "code":
		return c, fmt.Errorf("--policy-mode %q: use tool or code", c.PolicyMode)
	case !(c.CodeTimeoutS > 0) || c.CodeMaxCalls < 1:
		return c, fmt.Errorf("--code-timeout-s %g and --code-max-calls %d: both must be positive (defaults 120 and 100)", c.CodeTimeoutS, c.CodeMaxCalls)
	}
	return c, nil
}

// Knobs are the stand-in's own settings, from the environment so the
// command line stays RPent's.
type Knobs struct {
	// HangTasks: task ids (or "*") whose episodes hang after the first
	// model call, for timeout tests (RPENT_STANDIN_HANG_TASKS).
	HangTasks string
	// HangFor bounds the hang (RPENT_STANDIN_HANG_FOR, default 10m).
	HangFor time.Duration
	// RPCService is the rpc-service binary spawned for endpoints not given
	// (RPENT_STANDIN_RPC_SERVICE, default: next to this executable).
	RPCService string
	// ModelSeed, when set, makes episodes reproducible for tests: each
	// chat request carries a sampling seed derived from it, the output
	// dir's name (Roundhouse names it after the episode and try) and the
	// turn (RPENT_STANDIN_MODEL_SEED, an integer).
	ModelSeed *int64
	// ModelTimeout and ServiceTimeout bound each request.
	ModelTimeout, ServiceTimeout time.Duration
	APIKey                       string // OPENAI_API_KEY
}

// KnobsFromEnv reads Knobs from the environment.
func KnobsFromEnv() (Knobs, error) {
	k := Knobs{HangTasks: os.Getenv("RPENT_STANDIN_HANG_TASKS"), HangFor: 10 * time.Minute,
		RPCService: os.Getenv("RPENT_STANDIN_RPC_SERVICE"), ModelTimeout: 2 * time.Minute,
		ServiceTimeout: 30 * time.Second, APIKey: os.Getenv("OPENAI_API_KEY")}
	if v := os.Getenv("RPENT_STANDIN_HANG_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return k, fmt.Errorf("RPENT_STANDIN_HANG_FOR=%q: %w", v, err)
		}
		k.HangFor = d
	}
	if v := os.Getenv("RPENT_STANDIN_MODEL_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return k, fmt.Errorf("RPENT_STANDIN_MODEL_SEED=%q: want an integer, or leave it empty for unseeded sampling: %w", v, err)
		}
		k.ModelSeed = &n
	}
	if k.RPCService == "" {
		exe, err := os.Executable()
		if err != nil {
			return k, fmt.Errorf("find rpc-service: %w", err)
		}
		k.RPCService = filepath.Join(filepath.Dir(exe), "rpc-service")
	}
	return k, nil
}

func (k Knobs) hangs(task int) bool {
	for _, f := range strings.Split(k.HangTasks, ",") {
		f = strings.TrimSpace(f)
		if f == "*" || f == strconv.Itoa(task) {
			return true
		}
	}
	return false
}

// Message is an OpenAI chat message; Content is a string, null or parts.
type Message struct {
	Role       string     `json:"role"`
	Content    any        `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is an assistant's function call.
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Tools are the stand-in planner's tools: RPent-like robot skills.
var Tools = []map[string]any{
	tool("execute_skill", "Run the Pi0.5 VLA policy on one short manipulation instruction, e.g. 'pick up the ketchup'.",
		`{"type":"object","properties":{"instruction":{"type":"string"}},"required":["instruction"]}`),
	tool("detect", "Find an object in the current camera image with SAM3; returns boxes and scores.",
		`{"type":"object","properties":{"object":{"type":"string"}},"required":["object"]}`),
	tool("finish", "End the task and say whether it succeeded.",
		`{"type":"object","properties":{"success":{"type":"boolean"},"summary":{"type":"string"}}}`),
}

func tool(name, desc, params string) map[string]any {
	return map[string]any{"type": "function", "function": map[string]any{"name": name, "description": desc, "parameters": json.RawMessage(params)}}
}

// SystemPrompt is the planner's system message.
const SystemPrompt = "You control a Franka robot arm in a LIBERO tabletop scene. Call exactly one tool per turn: " +
	"execute_skill runs a short manipulation instruction with the VLA policy, detect locates an object, " +
	"finish ends the task. Tool results report what happened."

// Step is one entry of states.json.
type Step struct {
	Turn        int     `json:"turn"`
	Tool        string  `json:"tool"`
	Instruction string  `json:"instruction"`
	EnvSteps    int     `json:"env_steps"`
	Progress    int     `json:"progress"`
	Terminated  bool    `json:"terminated"`
	Truncated   bool    `json:"truncated"`
	Error       *string `json:"error"`
}

// Transcript is transcript_<tag>.json.
type Transcript struct {
	Tag         string           `json:"tag"`
	Robot       string           `json:"robot"`
	LiberoType  string           `json:"libero_type"`
	Suite       string           `json:"suite"`
	Task        int              `json:"task"`
	Seed        int              `json:"seed"`
	Planner     string           `json:"planner"`
	Model       string           `json:"model"`
	Instruction string           `json:"instruction"`
	StartedAt   string           `json:"started_at"`
	EndedAt     string           `json:"ended_at"`
	Termination string           `json:"termination"` // env_terminated, env_truncated, finish_called, max_turns, planner_error
	Finish      map[string]any   `json:"finish"`      // the model's claim, null when it never called finish
	Stats       Stats            `json:"stats"`
	Error       *string          `json:"error"`
	Messages    []Message        `json:"messages"`
	Tools       []map[string]any `json:"tools"`
	// PolicyMode is set in code mode only, so tool mode's transcript keeps
	// its bytes.
	PolicyMode string `json:"policy_mode,omitempty"`
}

// Stats counts what the episode did.
type Stats struct {
	Turns            int     `json:"turns"`
	ModelCalls       int     `json:"model_calls"`
	ToolCalls        int     `json:"tool_calls"`
	VLACalls         int     `json:"vla_calls"`
	SAM3Calls        int     `json:"sam3_calls"`
	EnvSteps         int     `json:"env_steps"`
	ServiceErrors    int     `json:"service_errors"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	DurationS        float64 `json:"duration_s"`
	// CodeSnippets counts code mode's snippets (ToolCalls then counts
	// their robo calls); absent in tool mode.
	CodeSnippets int `json:"code_snippets,omitempty"`
}

// episode is one run of the planner loop.
type episode struct {
	cfg        Config
	knobs      Knobs
	log        io.Writer
	model      string
	httpModel  *http.Client
	env        *Client
	vla, sam3  *Client
	tr         Transcript
	steps      []Step
	obs        string
	terminated bool
	truncated  bool
	children   []*exec.Cmd
	// vars are code mode's variables; they persist between snippets.
	vars map[string]any
}

// Run plays one episode and writes RPent's output files. It returns the
// process exit code. stdout receives the log lines run.log also gets.
func Run(ctx context.Context, cfg Config, knobs Knobs, stdout io.Writer) int {
	if err := os.MkdirAll(cfg.OutputDir, 0o755); err != nil {
		fmt.Fprintf(stdout, "rpent: output dir: %v\n", err)
		return ExitPlanner
	}
	logf, err := os.Create(filepath.Join(cfg.OutputDir, "run.log"))
	if err != nil {
		fmt.Fprintf(stdout, "rpent: run.log: %v\n", err)
		return ExitPlanner
	}
	defer logf.Close()
	start := time.Now()
	e := &episode{cfg: cfg, knobs: knobs, log: io.MultiWriter(stdout, logf), model: strings.TrimPrefix(cfg.Model, "openai-chat:"),
		httpModel: &http.Client{Timeout: knobs.ModelTimeout}}
	e.tr = Transcript{Tag: start.UTC().Format("20060102T150405.000Z"), Robot: cfg.Robot, LiberoType: cfg.LiberoType, Suite: cfg.Suite,
		Task: cfg.Task, Seed: cfg.Seed, Planner: cfg.Planner, Model: cfg.Model, StartedAt: start.UTC().Format(time.RFC3339Nano),
		Messages: []Message{}, Tools: Tools}
	if e.codeMode() {
		// No tools are offered in code mode (code.go says why).
		e.tr.Tools, e.tr.PolicyMode, e.vars = []map[string]any{}, "code", map[string]any{}
	}
	defer e.stopChildren()
	code := ExitOK
	if err := e.play(ctx); err != nil {
		msg := err.Error()
		e.tr.Error, e.tr.Termination, code = &msg, "planner_error", ExitPlanner
		e.logf("error: %s", msg)
	}
	e.tr.EndedAt = time.Now().UTC().Format(time.RFC3339Nano)
	e.tr.Stats.DurationS = time.Since(start).Seconds()
	if err := e.write(); err != nil {
		e.logf("error: %v", err)
		return ExitPlanner
	}
	e.logf("episode done: %s, terminated=%v after %d turns", e.tr.Termination, e.terminated, e.tr.Stats.Turns)
	return code
}

func (e *episode) logf(format string, args ...any) {
	fmt.Fprintf(e.log, time.Now().UTC().Format("15:04:05.000")+" rpent: "+format+"\n", args...)
}

// play runs the loop; an error is a planner error (transcript error, exit 1).
func (e *episode) play(ctx context.Context) error {
	if e.knobs.APIKey == "" {
		return errors.New("OPENAI_API_KEY is not set: the api planner's OpenAI client needs a key (any value for a local server)")
	}
	if err := e.connect(ctx); err != nil {
		return err
	}
	var reset struct {
		Instruction string `json:"instruction"`
		Observation struct {
			Image string `json:"agentview_image"`
		} `json:"observation"`
	}
	if err := e.env.Call(ctx, "reset", map[string]any{}, &reset); err != nil {
		return fmt.Errorf("environment reset: %w", err)
	}
	e.tr.Instruction, e.obs = reset.Instruction, reset.Observation.Image
	system := SystemPrompt
	if e.codeMode() {
		system = CodeSystemPrompt(e.cfg.CodeTimeoutS, e.cfg.CodeMaxCalls)
	}
	e.tr.Messages = append(e.tr.Messages,
		Message{Role: "system", Content: system},
		Message{Role: "user", Content: []any{
			map[string]any{"type": "text", "text": "Task: " + reset.Instruction},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + e.obs}},
		}})
	e.logf("task %d seed %d: %s", e.cfg.Task, e.cfg.Seed, reset.Instruction)
	for e.tr.Stats.Turns < e.cfg.MaxTurns {
		reply, err := e.complete(ctx)
		if err != nil {
			return err
		}
		e.tr.Stats.Turns++
		if e.tr.Stats.Turns == 1 && e.knobs.hangs(e.cfg.Task) {
			e.logf("hanging for %s (RPENT_STANDIN_HANG_TASKS=%s)", e.knobs.HangFor, e.knobs.HangTasks)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(e.knobs.HangFor):
			}
		}
		e.tr.Messages = append(e.tr.Messages, reply)
		if e.codeMode() {
			end, err := e.runSnippet(ctx, reply)
			if err != nil {
				return err
			}
			if end != "" {
				e.tr.Termination = end
				return nil
			}
			continue
		}
		if len(reply.ToolCalls) == 0 {
			e.tr.Messages = append(e.tr.Messages, Message{Role: "user", Content: "No tool was called. Call exactly one tool."})
			continue
		}
		for _, tc := range reply.ToolCalls {
			e.tr.Stats.ToolCalls++
			result, end := e.execute(ctx, tc)
			e.tr.Messages = append(e.tr.Messages, Message{Role: "tool", ToolCallID: tc.ID, Content: result})
			if end != "" {
				e.tr.Termination = end
				return nil
			}
		}
	}
	e.tr.Termination = "max_turns"
	return nil
}

func (e *episode) codeMode() bool { return e.cfg.PolicyMode == "code" }

// complete asks the model for the next message, with the tools (tool mode)
// or without (code mode: the reply's content is the code).
func (e *episode) complete(ctx context.Context) (Message, error) {
	e.tr.Stats.ModelCalls++
	chat := map[string]any{"model": e.model, "messages": e.tr.Messages, "temperature": 1.0}
	if !e.codeMode() {
		chat["tools"], chat["tool_choice"] = Tools, "auto"
	}
	if e.knobs.ModelSeed != nil {
		chat["seed"] = int64(hash(*e.knobs.ModelSeed, filepath.Base(e.cfg.OutputDir), e.tr.Stats.ModelCalls) >> 1)
	}
	body, err := json.Marshal(chat)
	if err != nil {
		return Message{}, fmt.Errorf("encode chat request: %w", err)
	}
	url := strings.TrimSuffix(e.cfg.BaseURL, "/") + "/chat/completions"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Message{}, fmt.Errorf("chat request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.knobs.APIKey)
	resp, err := e.httpModel.Do(req)
	if err != nil {
		return Message{}, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return Message{}, fmt.Errorf("POST %s: read reply: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Message{}, fmt.Errorf("POST %s: %s: %.500s", url, resp.Status, b)
	}
	var r struct {
		Choices []struct {
			Message Message `json:"message"`
		} `json:"choices"`
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return Message{}, fmt.Errorf("POST %s: reply is not a chat completion: %w", url, err)
	}
	if len(r.Choices) == 0 {
		return Message{}, fmt.Errorf("POST %s: reply has no choices: %.500s", url, b)
	}
	e.tr.Stats.PromptTokens += r.Usage.Prompt
	e.tr.Stats.CompletionTokens += r.Usage.Completion
	m := r.Choices[0].Message
	m.Role = "assistant"
	return m, nil
}

// execute maps a tool call onto a LIBERO step and returns the tool result
// (JSON text) and, when the episode ends, why. Service failures become
// {"error": …} results: the model sees them and the episode goes on.
func (e *episode) execute(ctx context.Context, tc ToolCall) (string, string) {
	var args map[string]any
	_ = json.Unmarshal([]byte(tc.Function.Arguments), &args) // the toy sends "{}"; bad JSON means no arguments
	result, end, err := e.act(ctx, tc.Function.Name, args)
	if err != nil {
		return e.serviceError(err), ""
	}
	return jsonText(result), end
}

// act runs one robot tool, the one execution path of both modes: a tool
// call in tool mode, a robo.<name>(…) call in code mode. It returns the
// result, the episode's end when it ends, or the error of the service (VLA,
// SAM3, env server) that failed; a failed step is still recorded in
// states.json.
func (e *episode) act(ctx context.Context, name string, args map[string]any) (map[string]any, string, error) {
	str := func(k string) string { s, _ := args[k].(string); return strings.TrimSpace(s) }
	switch name {
	case "finish":
		claim := map[string]any{"success": true, "summary": str("summary"), "turn": e.tr.Stats.Turns}
		if v, ok := args["success"].(bool); ok {
			claim["success"] = v
		}
		e.tr.Finish = claim
		return map[string]any{"status": "finished"}, "finish_called", nil
	case "detect":
		var seg any
		e.tr.Stats.SAM3Calls++
		if err := e.sam3.Call(ctx, "segment", map[string]any{"text": str("object"), "image": e.obs}, &seg); err != nil {
			return nil, "", err
		}
		return map[string]any{"status": "ok", "detections": seg}, "", nil
	}
	// Any other tool is a manipulation primitive: execute_skill's
	// instruction, or the tool's own name ("pick_cube" → "pick cube").
	instr := str("instruction")
	if instr == "" {
		instr = strings.ReplaceAll(name, "_", " ")
	}
	step := Step{Turn: e.tr.Stats.Turns, Tool: name, Instruction: instr}
	record := func(err error) (map[string]any, string, error) {
		msg := err.Error()
		step.Error = &msg
		step.EnvSteps, step.Progress = e.lastSteps()
		e.steps = append(e.steps, step)
		return nil, "", err
	}
	words := strings.Fields(instr)
	target := instr
	if len(words) > 0 {
		target = words[len(words)-1]
	}
	e.tr.Stats.SAM3Calls++
	if err := e.sam3.Call(ctx, "segment", map[string]any{"text": target, "image": e.obs}, nil); err != nil {
		return record(err)
	}
	var chunk struct {
		Actions [][]float64 `json:"actions"`
	}
	e.tr.Stats.VLACalls++
	if err := e.vla.Call(ctx, "predict_action", map[string]any{"instruction": instr,
		"observation": map[string]any{"agentview_image": e.obs}}, &chunk); err != nil {
		return record(err)
	}
	var res struct {
		Step        StepResult `json:"step"`
		Observation struct {
			Image string `json:"agentview_image"`
		} `json:"observation"`
	}
	if err := e.env.Call(ctx, "step", map[string]any{"actions": chunk.Actions}, &res); err != nil {
		return record(err)
	}
	e.obs = res.Observation.Image
	e.terminated, e.truncated = res.Step.Terminated, res.Step.Truncated
	e.tr.Stats.EnvSteps = res.Step.EnvSteps
	step.EnvSteps, step.Progress, step.Terminated, step.Truncated = res.Step.EnvSteps, res.Step.Progress, res.Step.Terminated, res.Step.Truncated
	e.steps = append(e.steps, step)
	result := map[string]any{"status": "executed", "instruction": instr, "env_steps": res.Step.EnvSteps}
	switch {
	case res.Step.Terminated:
		return result, "env_terminated", nil
	case res.Step.Truncated:
		return result, "env_truncated", nil
	}
	return result, "", nil
}

func (e *episode) lastSteps() (int, int) {
	if len(e.steps) == 0 {
		return 0, 0
	}
	l := e.steps[len(e.steps)-1]
	return l.EnvSteps, l.Progress
}

func (e *episode) serviceError(err error) string {
	e.tr.Stats.ServiceErrors++
	e.logf("service error: %v", err)
	return jsonText(map[string]any{"error": err.Error()})
}

func jsonText(v any) string {
	b, _ := json.Marshal(v) // maps of plain values always encode
	return string(b)
}

// connect resolves the three endpoints, spawning the services not given.
func (e *episode) connect(ctx context.Context) error {
	hc := &http.Client{Timeout: e.knobs.ServiceTimeout}
	for _, s := range []struct {
		name, endpoint string
		dst            **Client
		extra          []string
	}{
		{"env", e.cfg.EnvEndpoint, &e.env, []string{"--suite", e.cfg.Suite, "--task", strconv.Itoa(e.cfg.Task),
			"--seed", strconv.Itoa(e.cfg.Seed), "--max-episode-steps", strconv.Itoa(e.cfg.MaxEpisodeSteps)}},
		{"vla", e.cfg.VLAEndpoint, &e.vla, []string{"--embodiment", "libero"}},
		{"sam3", e.cfg.SAM3Endpoint, &e.sam3, nil},
	} {
		url := ""
		if s.endpoint != "" {
			var err error
			if url, err = ParseEndpoint(s.endpoint); err != nil {
				return fmt.Errorf("--%s-endpoint: %w", s.name, err)
			}
			e.logf("%s: using %s", s.name, url)
		} else {
			var err error
			if url, err = e.spawn(ctx, s.name, s.extra); err != nil {
				return fmt.Errorf("start %s service: %w", s.name, err)
			}
		}
		*s.dst = &Client{Name: s.name, URL: url, HTTP: hc}
	}
	return e.writePIDs()
}

// spawn starts a local service, as RPent does for an endpoint not given,
// and waits (at most 30s) for its ready line. The child stays in rpent's
// process group and is not tied to rpent's life otherwise: whoever runs
// rpent must kill the group, as Roundhouse does.
func (e *episode) spawn(ctx context.Context, name string, extra []string) (string, error) {
	args := append([]string{"--component", name, "--transport", "http", "--host", "127.0.0.1", "--port", "0"}, extra...)
	cmd := exec.Command(e.knobs.RPCService, args...)
	cmd.Stderr = e.log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("%s: %w", e.knobs.RPCService, err)
	}
	e.children = append(e.children, cmd)
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintf(e.log, "[%s] %s\n", name, line)
			if u, ok := strings.CutPrefix(line, ReadyLine); ok && !sent {
				urls <- strings.TrimSpace(u)
				sent = true
			}
		}
		if !sent {
			close(urls)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case u, ok := <-urls:
		if !ok {
			return "", fmt.Errorf("%s exited before it was ready", name)
		}
		e.logf("%s: spawned pid %d at %s", name, cmd.Process.Pid, u)
		return u, nil
	case <-ctx.Done():
		return "", fmt.Errorf("%s not ready: %w", name, ctx.Err())
	}
}

// writePIDs records rpent's and its children's pids (pids.txt), so a test
// can check that a timeout killed the whole process group.
func (e *episode) writePIDs() error {
	pids := []string{strconv.Itoa(os.Getpid())}
	for _, c := range e.children {
		pids = append(pids, strconv.Itoa(c.Process.Pid))
	}
	return os.WriteFile(filepath.Join(e.cfg.OutputDir, "pids.txt"), []byte(strings.Join(pids, "\n")+"\n"), 0o644)
}

func (e *episode) stopChildren() {
	for _, c := range e.children {
		_ = c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
}

// write writes transcript_<tag>.json and states.json.
func (e *episode) write() error {
	steps := e.steps
	if steps == nil {
		steps = []Step{}
	}
	states := map[string]any{"suite": e.cfg.Suite, "task": e.cfg.Task, "seed": e.cfg.Seed,
		"max_episode_steps": e.cfg.MaxEpisodeSteps, "instruction": e.tr.Instruction, "steps": steps}
	for name, v := range map[string]any{"transcript_" + e.tr.Tag + ".json": e.tr, "states.json": states} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encode %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(e.cfg.OutputDir, name), append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}
