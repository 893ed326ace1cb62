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
	// EndsAtSuccess says the episode stops the moment the environment
	// reports success, so no call follows it (the post-success filter then
	// drops nothing). Adapters that cannot tell leave it false: unknown.
	EndsAtSuccess bool
	// SuccessTurn is the 1-based planner turn (model call) whose action the
	// environment answered with success, 0 when unknown: calls from index
	// SuccessTurn on came after success, which the post-success filter drops.
	SuccessTurn int
}

// Exit is how the episode process ended.
type Exit struct {
	Code     int
	TimedOut bool
	Err      error // it could not run at all
}

// Decide applies the adapter the harness names.
func Decide(spec schemas.OutcomeSpec, dir string, exit Exit) Result {
	switch {
	case exit.Err != nil:
		return infra("could not run: " + exit.Err.Error())
	case exit.TimedOut:
		return Result{FailureClass: schemas.FailureTimeout, Termination: "episode timed out"}
	}
	switch spec.Adapter {
	case "rpent_libero":
		return rpentLibero(dir, exit)
	case "json":
		return jsonFields(spec, dir, exit)
	default:
		return minimal(spec, dir, exit)
	}
}

func infra(why string) Result { return Result{FailureClass: schemas.FailureInfra, Termination: why} }

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

func missing(file string, err error, exit Exit) Result {
	if errors.Is(err, os.ErrNotExist) {
		return infra(fmt.Sprintf("no %s (exit code %d)", file, exit.Code))
	}
	return infra(fmt.Sprintf("unreadable %s: %v", file, err))
}

// minimal reads the toy's outcome.json; `terminated` is the env's success.
func minimal(spec schemas.OutcomeSpec, dir string, exit Exit) Result {
	var o struct {
		Terminated  bool   `json:"terminated"`
		Termination string `json:"termination"`
		Error       string `json:"error"`
	}
	if err := readJSON(dir, spec.File, &o); err != nil {
		return missing(spec.File, err, exit)
	}
	if exit.Code != 0 || o.Error != "" {
		return infra(fmt.Sprintf("planner error (exit %d): %s", exit.Code, o.Error))
	}
	r := valid(o.Terminated, nil, o.Termination)
	// The toy's episode loop exits when the env terminates with success.
	r.EndsAtSuccess = o.Terminated
	return r
}

// jsonFields reads the fields a harness names by dotted path.
func jsonFields(spec schemas.OutcomeSpec, dir string, exit Exit) Result {
	var doc any
	if err := readJSON(dir, spec.File, &doc); err != nil {
		return missing(spec.File, err, exit)
	}
	if spec.Error != "" {
		if v, ok := lookup(doc, spec.Error); ok && v != nil && v != false && v != "" {
			return infra(fmt.Sprintf("%s at %s: %v", spec.File, spec.Error, v))
		}
	}
	if exit.Code != 0 {
		return infra(fmt.Sprintf("episode exited with code %d", exit.Code))
	}
	v, ok := lookup(doc, spec.Success)
	success, isBool := v.(bool)
	if !ok || !isBool {
		return infra(fmt.Sprintf("%s has no boolean at %s (the harness's outcome.success)", spec.File, spec.Success))
	}
	var reward *float64
	if spec.Reward != "" {
		rv, ok := lookup(doc, spec.Reward)
		f, isNum := rv.(float64)
		if !ok || !isNum {
			return infra(fmt.Sprintf("%s has no number at %s (the harness's outcome.reward)", spec.File, spec.Reward))
		}
		reward = &f
	}
	r := valid(success, reward, "")
	if success && spec.SuccessTurn != "" {
		tv, ok := lookup(doc, spec.SuccessTurn)
		f, isNum := tv.(float64)
		if !ok || !isNum || f < 1 || f != float64(int(f)) {
			return infra(fmt.Sprintf("%s has no positive whole number at %s (the harness's outcome.success_turn)", spec.File, spec.SuccessTurn))
		}
		r.SuccessTurn = int(f)
	}
	return r
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
