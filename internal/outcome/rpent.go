package outcome

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Files RPent writes into its --output-dir (docs/design.md §5).
const (
	rpentTranscriptGlob = "transcript_*.json"
	rpentStates         = "states.json"
	// rpentSnippetGlob: code mode's record of each code snippet, in our own
	// format (harnesses/rpent_libero/README.md, "Code as policy").
	rpentSnippetGlob = "code_policy/*.json"
)

// Task failure reasons of RPent's code mode: how the episode's last code
// snippet failed, when it did.
const (
	ReasonCodeError    = "code_error"     // it raised
	ReasonCodeTimeout  = "code_timeout"   // it ran past --code-timeout-s
	ReasonCodeMaxCalls = "code_max_calls" // it tried more than --code-max-calls robo calls
)

// Task failure reasons from RPent's finish call, when the env did not
// terminate (without one: not_terminated).
const (
	ReasonFinishClaimed = "finish_claimed" // the model said it succeeded
	ReasonGaveUp        = "gave_up"        // the model said it failed
)

// rpentTranscript holds the fields of transcript_<tag>.json the adapter
// reads. finish is the model's own claim and is only quoted, never trusted.
type rpentTranscript struct {
	Finish   json.RawMessage `json:"finish"`
	Error    json.RawMessage `json:"error"`
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
	} `json:"messages"`
}

// rpentLibero reads an RPent/LIBERO episode's output dir (the rules of
// origin are classify's):
//
//   - success iff some step of states.json has `terminated: true`
//     (LIBERO's own success signal), at that step's planner turn. `finish`
//     never decides anything;
//   - a tool result `{"error": …}` is a component's failure (VLA, SAM3,
//     env server) reported to the planner, at its turn;
//   - a transcript `error` or a non-zero exit is the planner's error;
//   - a missing or unreadable transcript or states.json is a missing
//     output (rpent stopped before it could report);
//   - in code mode (code_policy/*.json present) the snippets are the
//     evidence instead of the transcript's tool results: a robo call that
//     met a service error is a component's failure at its snippet's turn;
//     a snippet that raised, ran out of time or of calls is the planner's
//     own code (the reason, when it was the last snippet).
func rpentLibero(dir string, exit Exit) finding {
	code, bad := rpentCode(dir)
	if bad != "" {
		return finding{missing: bad}
	}
	paths, err := filepath.Glob(filepath.Join(dir, rpentTranscriptGlob))
	if err != nil {
		return finding{missing: fmt.Sprintf("transcript pattern: %v", err)}
	}
	// One output dir per try, so there is normally one transcript; should
	// there be several, the first error or service error of any counts.
	sort.Strings(paths)
	var f finding
	var claim, claimReason string
	for _, p := range paths {
		name := filepath.Base(p)
		b, err := os.ReadFile(p)
		if err != nil {
			return finding{missing: fmt.Sprintf("unreadable %s: %v", name, err)}
		}
		var t rpentTranscript
		if err := json.Unmarshal(b, &t); err != nil {
			return finding{missing: fmt.Sprintf("%s is not a transcript: %v", name, err)}
		}
		if msg := errorText(t.Error); msg != "" && f.plannerError == "" {
			f.plannerError = fmt.Sprintf("exit code %d: %s", exit.Code, msg)
		}
		// In code mode a tool result may be a snippet's, whose error is the
		// planner's code: the snippets' own records say which is which.
		if n, first, turn := serviceErrors(t); n > 0 && f.serviceError == "" && code.snippets == 0 {
			f.serviceError = fmt.Sprintf("%d tool result(s) carry service errors; first: %s", n, first)
			f.serviceTurn = turn
		}
		claim, claimReason = finishClaim(t.Finish)
	}
	if code.serviceError != "" {
		f.serviceError, f.serviceTurn = code.serviceError, code.serviceTurn
	}
	if exit.Code != 0 && f.plannerError == "" {
		f.plannerError = fmt.Sprintf("rpent exited with code %d and no transcript error; see run.log", exit.Code)
	}
	b, err := os.ReadFile(filepath.Join(dir, rpentStates))
	switch {
	case len(paths) == 0:
		f.missing = fmt.Sprintf("rpent wrote no %s (exit code %d): it stopped before the episode ran; see run.log", rpentTranscriptGlob, exit.Code)
		if err != nil {
			return f
		}
	case errors.Is(err, os.ErrNotExist):
		f.missing = fmt.Sprintf("rpent wrote a transcript but no %s: the environment's outcome is unknown", rpentStates)
		return f
	case err != nil:
		f.missing = fmt.Sprintf("unreadable %s: %v", rpentStates, err)
		return f
	}
	var states struct {
		Steps *[]struct {
			Turn       int  `json:"turn"`
			Terminated bool `json:"terminated"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(b, &states); err != nil {
		f.missing = fmt.Sprintf("%s is not valid JSON: %v", rpentStates, err)
		return f
	}
	if states.Steps == nil {
		f.missing = fmt.Sprintf("%s has no steps list", rpentStates)
		return f
	}
	steps := *states.Steps
	for i, s := range steps {
		if s.Terminated {
			f.success = true
			f.termination = fmt.Sprintf("terminated at step %d of %d", i+1, len(steps))
			// A step's turn is the planner call whose tool call ran it; a
			// states.json without turns leaves the success call unknown.
			f.successTurn = max(s.Turn, 0)
			return f
		}
	}
	// The reason names how it ran out: the model claimed success
	// (finish_claimed, as the toy's), gave up (finish with success false),
	// or never called finish (not_terminated: out of turns or env steps).
	f.termination, f.reason = fmt.Sprintf("not terminated after %d steps", len(steps)), cmp.Or(claimReason, "not_terminated")
	if code.failed > 0 {
		f.termination += fmt.Sprintf("; %d of %d code snippet(s) failed, last: %s", code.failed, code.snippets, code.lastFailure)
	}
	if code.lastReason != "" {
		f.reason = code.lastReason
	}
	if claim != "" {
		f.termination += "; " + claim + " (not counted)"
	}
	return f
}

// errorText is the message of an error field: "" for null, false, "" or {}.
func errorText(raw json.RawMessage) string {
	var v any
	if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &v) != nil {
		return ""
	}
	switch e := v.(type) {
	case nil:
		return ""
	case bool:
		if e {
			return "true"
		}
		return ""
	case string:
		return strings.TrimSpace(e)
	case map[string]any:
		if len(e) == 0 {
			return ""
		}
		if m, ok := e["message"].(string); ok && m != "" {
			return m
		}
	}
	return string(bytes.TrimSpace(raw))
}

// serviceErrors counts tool results whose content is a JSON object with a
// non-empty "error", the way RPent reports VLA/SAM3/env failures to the
// model, and returns the first and its turn (the number of assistant
// messages up to it: the planner call whose tool call met the error).
func serviceErrors(t rpentTranscript) (int, string, int) {
	n, first, turn, turns := 0, "", 0, 0
	for _, m := range t.Messages {
		if m.Role == "assistant" {
			turns++
		}
		if m.Role != "tool" {
			continue
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(contentText(m.Content)), &obj) != nil {
			continue
		}
		msg := errorText(obj["error"])
		if msg == "" {
			continue
		}
		if n == 0 {
			first, turn = msg, turns
			if m.ToolCallID != "" {
				first = m.ToolCallID + ": " + msg
			}
		}
		n++
	}
	return n, first, turn
}

// contentText is a message's text: a string, or the text parts of an array.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strings.TrimSpace(s)
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return strings.TrimSpace(b.String())
}

// finishClaim describes the model's finish call for the termination text,
// and the task-failure reason it gives when the env did not terminate.
func finishClaim(raw json.RawMessage) (string, string) {
	var v any
	if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return "", ""
	}
	if m, ok := v.(map[string]any); ok {
		switch m["success"] {
		case true:
			return "the model claimed success", ReasonFinishClaimed
		case false:
			return "the model claimed failure", ReasonGaveUp
		}
	}
	return "the model called finish", ReasonFinishClaimed
}

// rpentSnippet holds the fields of code_policy/snippet_NNN.json the adapter
// reads.
type rpentSnippet struct {
	Snippet int `json:"snippet"`
	Turn    int `json:"turn"`
	Calls   []struct {
		Tool   string          `json:"tool"`
		Result json.RawMessage `json:"result"`
	} `json:"calls"`
	Error     json.RawMessage `json:"error"`
	ErrorKind string          `json:"error_kind"`
}

// codeEvidence is what code mode's snippets say.
type codeEvidence struct {
	snippets int
	// serviceError: the first robo call that met a component's failure,
	// at serviceTurn (its snippet's planner turn; 0 unknown).
	serviceError string
	serviceTurn  int
	// failed counts snippets the planner's own code stopped; lastFailure
	// describes the last, and lastReason is set when it was the episode's
	// last snippet.
	failed      int
	lastFailure string
	lastReason  string
}

// rpentCode reads code_policy/*.json in the order the snippets ran; the
// string is a missing output when one is unreadable. An error_kind it does
// not know is counted as the planner's exception: only a component's
// failure that the record shows makes an episode invalid.
func rpentCode(dir string) (codeEvidence, string) {
	var c codeEvidence
	paths, err := filepath.Glob(filepath.Join(dir, rpentSnippetGlob))
	if err != nil {
		return c, fmt.Sprintf("snippet pattern: %v", err)
	}
	snippets := make([]rpentSnippet, len(paths))
	for i, p := range paths {
		name := filepath.Join("code_policy", filepath.Base(p))
		b, err := os.ReadFile(p)
		if err != nil {
			return c, fmt.Sprintf("unreadable %s: %v", name, err)
		}
		if err := json.Unmarshal(b, &snippets[i]); err != nil {
			return c, fmt.Sprintf("%s is not a code snippet record: %v", name, err)
		}
	}
	sort.SliceStable(snippets, func(i, j int) bool {
		if snippets[i].Turn != snippets[j].Turn {
			return snippets[i].Turn < snippets[j].Turn
		}
		return snippets[i].Snippet < snippets[j].Snippet
	})
	c.snippets = len(snippets)
	for i, s := range snippets {
		msg := errorText(s.Error)
		where := fmt.Sprintf("snippet %d (turn %d)", s.Snippet, s.Turn)
		service := s.ErrorKind == "service"
		if (service && msg == "") || (s.ErrorKind == "" && msg == "") {
			// The failed call's result says what failed; a snippet that went
			// on past a failed call (no error of its own) still met it.
			for _, call := range s.Calls {
				var obj map[string]json.RawMessage
				if json.Unmarshal(call.Result, &obj) == nil && errorText(obj["error"]) != "" {
					service, msg = true, "robo."+call.Tool+": "+errorText(obj["error"])
					break
				}
			}
		}
		switch {
		case service:
			if c.serviceError == "" {
				c.serviceError, c.serviceTurn = where+": a robo call met a service error: "+msg, s.Turn
			}
		case s.ErrorKind != "" || msg != "":
			kind, reason := s.ErrorKind, ReasonCodeError
			switch kind {
			case "timeout":
				reason = ReasonCodeTimeout
			case "max_calls":
				reason = ReasonCodeMaxCalls
			case "":
				kind = "exception"
			}
			c.failed++
			c.lastFailure = fmt.Sprintf("%s %s: %s", where, kind, msg)
			if i == len(snippets)-1 {
				c.lastReason = reason
			}
		}
	}
	return c, ""
}
