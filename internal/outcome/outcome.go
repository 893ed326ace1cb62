// Package outcome turns an episode's exit and output dir into its outcome:
// success and reward from the environment's own signal (never the planner's
// claim), or an invalid episode with the cause of its infrastructure failure.
package outcome

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Result is what an adapter decides.
type Result struct {
	Valid        bool
	Success      bool
	Reward       float64
	FailureClass string
	Termination  string
	// Reason is a task failure's countable cause (schemas.Episode.Reason).
	Reason string
	// EndsAtSuccess says the episode stops the moment the environment
	// reports success, so no call follows it (the post-success filter then
	// drops nothing). Adapters that cannot tell leave it false: unknown.
	EndsAtSuccess bool
	// SuccessTurn is the 1-based planner turn (model call) whose action the
	// environment answered with success, 0 when unknown: calls from index
	// SuccessTurn on came after success, which the post-success filter drops.
	SuccessTurn int
}

// Exit is how the episode process ended, and what the rollout worker saw
// of the components outside the planner while it ran.
type Exit struct {
	Code     int
	TimedOut bool
	Err      error // it could not run at all
	Health   Health
}

// Health is the evidence that a failure was a component's, not the
// planner's: the proxy's records of the episode's model calls and the
// state of the host's services after it.
type Health struct {
	// ModelFailures counts calls the model server failed: unreachable, no
	// answer in time, 5xx, 429 (overloaded), or 401, 403, 404 (its
	// configuration: credentials, the served model's name). Other 4xx
	// (400, 413, 422) are the planner's own malformed requests.
	ModelFailures     int
	FirstModelFailure string
	// ServicesDown names harness services (the model server included) that
	// were no longer running when the episode ended.
	ServicesDown []string
	// NoCalls: the planner never asked the model anything. Whatever ended
	// such an episode, it was not the model's behaviour.
	NoCalls bool
}

// failed describes the component failures, "" when there were none.
func (h Health) failed() string {
	var parts []string
	if h.ModelFailures > 0 {
		parts = append(parts, fmt.Sprintf("the model server failed %d call(s), first: %s", h.ModelFailures, h.FirstModelFailure))
	}
	if len(h.ServicesDown) > 0 {
		parts = append(parts, "service(s) down: "+strings.Join(h.ServicesDown, ", "))
	}
	return strings.Join(parts, "; ")
}

// HealthOf gathers the model-call evidence from the proxy's records.
func HealthOf(calls []schemas.Call) Health {
	h := Health{NoCalls: len(calls) == 0}
	for _, c := range calls {
		if s := c.HTTPStatus; s >= 500 || s == 429 || s == 401 || s == 403 || s == 404 {
			if h.ModelFailures == 0 {
				h.FirstModelFailure = fmt.Sprintf("call %d: HTTP %d %s", c.CallIndex, c.HTTPStatus, c.Error)
			}
			h.ModelFailures++
		}
	}
	return h
}

// finding is what an adapter read in the episode's files, before the rules
// of origin (classify) turn it into a result.
type finding struct {
	success       bool
	reward        *float64
	successTurn   int // 1-based planner turn the env answered with success; 0 unknown
	endsAtSuccess bool
	termination   string
	// plannerError: the planner reported an error or exited non-zero.
	plannerError string
	// serviceError: a component (VLA, SAM3, env server) reported an error
	// to the planner, first at serviceTurn (1-based; 0 unknown).
	serviceError string
	serviceTurn  int
	// missing: an output the harness promises is missing or unreadable.
	missing string
	// reason: how an episode without success ran out, as the adapter
	// names it (the toy's termination code, RPent's not_terminated).
	reason string
}

// Task failure reasons the rules themselves give.
const (
	ReasonOutOfTime    = "out_of_time"
	ReasonPlannerError = "planner_error"
)

// Decide applies the adapter the harness names, then the rules of origin
// (docs/design.md §7): only a failure outside the planner makes an episode
// invalid; the planner's own behaviour — wrong actions, malformed calls,
// errors, running out of turns or of time while everything else was
// healthy — is a task failure; the environment's success stands against
// what happened after it.
func Decide(spec schemas.OutcomeSpec, dir string, exit Exit) Result {
	if exit.Err != nil {
		return infra("could not run: " + exit.Err.Error())
	}
	var f finding
	switch spec.Adapter {
	case "rpent_libero":
		f = rpentLibero(dir, exit)
	case "json":
		f = jsonFields(spec, dir, exit)
	default:
		f = minimal(spec, dir, exit)
	}
	return classify(f, exit)
}

// classify is the table of docs/design.md §7, row by row.
func classify(f finding, exit Exit) Result {
	broken := exit.Health.failed()
	switch {
	case f.success && f.serviceError != "" && (f.serviceTurn == 0 || f.successTurn == 0 || f.serviceTurn <= f.successTurn):
		// A component failed before (or we cannot tell whether before) the
		// env's success: what the robot did was not the planner's alone.
		return infra("service error before success: " + f.serviceError)
	case f.success:
		r := valid(true, f.reward, f.termination)
		r.SuccessTurn, r.EndsAtSuccess = f.successTurn, f.endsAtSuccess
		if f.serviceError != "" {
			r.Termination += "; a service error after success (not counted): " + f.serviceError
		}
		return r
	case broken != "":
		if exit.TimedOut {
			broken = "timed out; " + broken
		}
		return infra(broken)
	case f.serviceError != "":
		return infra(f.serviceError)
	case exit.Health.NoCalls && (exit.TimedOut || f.plannerError != "" || f.missing != ""):
		why := f.plannerError + f.missing
		if exit.TimedOut {
			why = "timed out"
		}
		return infra("the planner failed before asking the model anything (its setup, not its behaviour): " + why)
	case exit.TimedOut:
		return task("ran out of time (episode.timeout) while the model server and services were healthy", ReasonOutOfTime)
	case f.missing != "":
		return infra(f.missing)
	case f.plannerError != "":
		return task("planner error, no component failed: "+f.plannerError, ReasonPlannerError)
	}
	r := valid(false, f.reward, f.termination)
	r.Reason = f.reason
	if r.Reason == "" {
		r.Reason = "unknown" // counted under its own name, never as infrastructure
	}
	return r
}

func infra(why string) Result { return Result{FailureClass: schemas.FailureInfra, Termination: why} }

// task is a valid episode the environment did not call a success.
func task(why, reason string) Result {
	return Result{Valid: true, FailureClass: schemas.FailureTask, Termination: why, Reason: reason}
}

// valid is a completed episode: success from the environment.
func valid(success bool, reward *float64, termination string) Result {
	r := Result{Valid: true, Success: success, Termination: termination}
	switch {
	case reward != nil:
		r.Reward = *reward
	case success:
		r.Reward = 1
	}
	if !success {
		r.FailureClass = schemas.FailureTask
	}
	return r
}

func readJSON(dir, file string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func missing(file string, err error, exit Exit) finding {
	if errors.Is(err, os.ErrNotExist) {
		return finding{missing: fmt.Sprintf("no %s (exit code %d): the episode program did not report its outcome", file, exit.Code)}
	}
	return finding{missing: fmt.Sprintf("unreadable %s: %v", file, err)}
}

// minimal reads the toy's outcome.json; `terminated` is the env's success.
// Its `error` is the planner's (a model error the proxy saw as 5xx is in
// Exit.Health).
func minimal(spec schemas.OutcomeSpec, dir string, exit Exit) finding {
	var o struct {
		Terminated  bool   `json:"terminated"`
		Termination string `json:"termination"`
		Error       string `json:"error"`
	}
	if err := readJSON(dir, spec.File, &o); err != nil {
		return missing(spec.File, err, exit)
	}
	// The toy's episode loop exits when the env terminates with success.
	f := finding{success: o.Terminated, endsAtSuccess: o.Terminated, termination: o.Termination, reason: o.Termination}
	if exit.Code != 0 || o.Error != "" {
		f.plannerError = fmt.Sprintf("exit %d: %s", exit.Code, o.Error)
	}
	return f
}

// jsonFields reads the fields a harness names by dotted path. The error
// field reports a component's failure (the harness says so by naming it).
func jsonFields(spec schemas.OutcomeSpec, dir string, exit Exit) finding {
	var doc any
	if err := readJSON(dir, spec.File, &doc); err != nil {
		return missing(spec.File, err, exit)
	}
	var f finding
	if spec.Error != "" {
		if v, ok := lookup(doc, spec.Error); ok && v != nil && v != false && v != "" {
			f.serviceError = fmt.Sprintf("%s at %s: %v", spec.File, spec.Error, v)
		}
	}
	if exit.Code != 0 {
		f.plannerError = fmt.Sprintf("episode exited with code %d", exit.Code)
	}
	v, ok := lookup(doc, spec.Success)
	success, isBool := v.(bool)
	if !ok || !isBool {
		f.missing = fmt.Sprintf("%s has no boolean at %s (the harness's outcome.success)", spec.File, spec.Success)
		return f
	}
	if spec.Reward != "" {
		rv, ok := lookup(doc, spec.Reward)
		r, isNum := rv.(float64)
		if !ok || !isNum {
			f.missing = fmt.Sprintf("%s has no number at %s (the harness's outcome.reward)", spec.File, spec.Reward)
			return f
		}
		f.reward = &r
	}
	f.success, f.reason = success, "not_successful"
	if success && spec.SuccessTurn != "" {
		tv, ok := lookup(doc, spec.SuccessTurn)
		n, isNum := tv.(float64)
		if !ok || !isNum || n < 1 || n != float64(int(n)) {
			return finding{missing: fmt.Sprintf("%s has no positive whole number at %s (the harness's outcome.success_turn)", spec.File, spec.SuccessTurn)}
		}
		f.successTurn = int(n)
	}
	return f
}

// lookup follows a dotted path (a.b.0.c) through decoded JSON.
func lookup(doc any, path string) (any, bool) {
	cur := doc
	for _, part := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[part]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}
