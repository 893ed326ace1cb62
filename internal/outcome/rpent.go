package outcome

import (
	"bytes"
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

// rpentLibero decides an RPent/LIBERO episode from its output dir:
//
//   - infrastructure failure when the transcript is missing or unreadable,
//     the planner errored (transcript `error`, or a non-zero exit), or any
//     tool result is a service error `{"error": …}` — a VLA or SAM3 failure
//     changes what the robot did, so the episode says nothing about the
//     policy, even when it happened to succeed;
//   - otherwise success iff some step of states.json has `terminated: true`
//     (LIBERO's own success signal). `finish` never decides anything.
func rpentLibero(dir string, exit Exit) Result {
	paths, err := filepath.Glob(filepath.Join(dir, rpentTranscriptGlob))
	if err != nil {
		return infra(fmt.Sprintf("transcript pattern: %v", err))
	}
	if len(paths) == 0 {
		return infra(fmt.Sprintf("rpent wrote no %s (exit code %d): it stopped before the episode ran; see run.log", rpentTranscriptGlob, exit.Code))
	}
	// One output dir per try, so there is normally one transcript; should
	// there be several, any of them failing fails the episode.
	sort.Strings(paths)
	var claim string
	for _, p := range paths {
		name := filepath.Base(p)
		b, err := os.ReadFile(p)
		if err != nil {
			return infra(fmt.Sprintf("unreadable %s: %v", name, err))
		}
		var t rpentTranscript
		if err := json.Unmarshal(b, &t); err != nil {
			return infra(fmt.Sprintf("%s is not a transcript: %v", name, err))
		}
		if msg := errorText(t.Error); msg != "" {
			return infra(fmt.Sprintf("planner error (exit code %d): %s", exit.Code, msg))
		}
		if n, first := serviceErrors(t); n > 0 {
			return infra(fmt.Sprintf("%d tool result(s) carry service errors; first: %s", n, first))
		}
		claim = finishClaim(t.Finish)
	}
	if exit.Code != 0 {
		return infra(fmt.Sprintf("rpent exited with code %d and no transcript error; see run.log", exit.Code))
	}
	b, err := os.ReadFile(filepath.Join(dir, rpentStates))
	if errors.Is(err, os.ErrNotExist) {
		return infra(fmt.Sprintf("rpent wrote a transcript but no %s: the environment's outcome is unknown", rpentStates))
	}
	if err != nil {
		return infra(fmt.Sprintf("unreadable %s: %v", rpentStates, err))
	}
	var states struct {
		Steps *[]struct {
			Turn       int  `json:"turn"`
			Terminated bool `json:"terminated"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(b, &states); err != nil {
		return infra(fmt.Sprintf("%s is not valid JSON: %v", rpentStates, err))
	}
	if states.Steps == nil {
		return infra(fmt.Sprintf("%s has no steps list", rpentStates))
	}
	steps := *states.Steps
	for i, s := range steps {
		if s.Terminated {
			r := valid(true, nil, fmt.Sprintf("terminated at step %d of %d", i+1, len(steps)))
			// A step's turn is the planner call whose tool call ran it; a
			// states.json without turns leaves the success call unknown.
			r.SuccessTurn = max(s.Turn, 0)
			return r
		}
	}
	why := fmt.Sprintf("not terminated after %d steps", len(steps))
	if claim != "" {
		why += "; " + claim + " (not counted)"
	}
	return valid(false, nil, why)
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
// model, and returns the first.
func serviceErrors(t rpentTranscript) (int, string) {
	n, first := 0, ""
	for _, m := range t.Messages {
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
			first = msg
			if m.ToolCallID != "" {
				first = m.ToolCallID + ": " + msg
			}
		}
		n++
	}
	return n, first
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

// finishClaim describes the model's finish call for the termination text.
func finishClaim(raw json.RawMessage) string {
	var v any
	if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return ""
	}
	if m, ok := v.(map[string]any); ok {
		switch m["success"] {
		case true:
			return "the model claimed success"
		case false:
			return "the model claimed failure"
		}
	}
	return "the model called finish"
}
