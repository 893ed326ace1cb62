package policy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Special tokens. They are ordinary entries of the vocabulary; the template
// and the feature rule find them by these strings.
const (
	ImStart    = "<|im_start|>"
	ImEnd      = "<|im_end|>"
	Unk        = "<unk>"
	ToolsOpen  = "<tools>"
	ToolsClose = "</tools>"
)

// Specials lists the special tokens every vocabulary starts with.
var Specials = []string{Unk, ImStart, ImEnd, ToolsOpen, ToolsClose}

// Message is an OpenAI chat message. Content is the text; on the wire it is a
// string, null, or an array of {"type":"text","text":…} parts (joined with a
// space here).
type Message struct {
	Role       string
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
	Name       string
}

// ToolCall is an assistant's function call.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its JSON-encoded arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is an OpenAI tool definition.
type Tool struct {
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

// Function describes a callable tool.
type Function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Name       string          `json:"name,omitempty"`
}

// MarshalJSON writes content as null for an assistant message that only
// calls tools, as OpenAI and vLLM do, and as a string otherwise.
func (m Message) MarshalJSON() ([]byte, error) {
	w := wireMessage{Role: m.Role, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name}
	if m.Content == "" && len(m.ToolCalls) > 0 {
		w.Content = json.RawMessage("null")
	} else {
		b, err := json.Marshal(m.Content)
		if err != nil {
			return nil, err
		}
		w.Content = b
	}
	return json.Marshal(w)
}

// UnmarshalJSON accepts string, null and text-part-array content.
func (m *Message) UnmarshalJSON(b []byte) error {
	var w wireMessage
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*m = Message{Role: w.Role, ToolCalls: w.ToolCalls, ToolCallID: w.ToolCallID, Name: w.Name}
	c := strings.TrimSpace(string(w.Content))
	switch {
	case c == "" || c == "null":
	case c[0] == '"':
		return json.Unmarshal(w.Content, &m.Content)
	case c[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(w.Content, &parts); err != nil {
			return fmt.Errorf("content parts: %w", err)
		}
		var texts []string
		for _, p := range parts {
			if p.Type == "text" {
				texts = append(texts, p.Text)
			}
		}
		m.Content = strings.Join(texts, " ")
	default:
		return fmt.Errorf("content must be a string, null or an array of parts, got %.20s", c)
	}
	return nil
}

// wordRe splits lowercased text into special-looking tokens, words and single
// punctuation characters. Whitespace only separates.
var wordRe = regexp.MustCompile(`<\|[a-z_]+\|>|</?[a-z_]+>|[a-z0-9_]+|[^\sa-z0-9_]`)

// Words splits text the way the tokenizer does, before vocabulary lookup.
func Words(text string) []string {
	return wordRe.FindAllString(strings.ToLower(text), -1)
}

// Encode maps text to token ids; words outside the vocabulary become <unk>.
func (p *Policy) Encode(text string) []int {
	words := Words(text)
	ids := make([]int, len(words))
	for i, w := range words {
		id, ok := p.index[w]
		if !ok {
			id = p.unk
		}
		ids[i] = id
	}
	return ids
}

// Render applies the chat template to messages and tools and appends the
// generation prompt. Every message renders on its own as
//
//	<|im_start|> role content-words <|im_end|>
//
// The system turn (first, or synthesised when tools are given) also lists
// the tools between <tools> and </tools> (name and description words). An
// assistant message renders its content words followed, for each tool call,
// by the function name and, unless they are empty or "{}", the argument
// words; so a prompt plus the completion [name, <|im_end|>] is a prefix of
// the next prompt. The generation prompt is "<|im_start|> assistant".
func (p *Policy) Render(msgs []Message, tools []Tool) ([]int, error) {
	var out []int
	turn := func(role string, body ...[]int) {
		out = append(out, p.imStart)
		out = append(out, p.Encode(role)...)
		for _, b := range body {
			out = append(out, b...)
		}
		out = append(out, p.imEnd)
	}
	rest := msgs
	if (len(msgs) > 0 && msgs[0].Role == "system") || len(tools) > 0 {
		var sys []int
		if len(msgs) > 0 && msgs[0].Role == "system" {
			sys = p.Encode(msgs[0].Content)
			rest = msgs[1:]
		}
		var tl []int
		if len(tools) > 0 {
			tl = append(tl, p.index[ToolsOpen])
			for _, t := range tools {
				tl = append(tl, p.Encode(t.Function.Name)...)
				tl = append(tl, p.Encode(t.Function.Description)...)
			}
			tl = append(tl, p.index[ToolsClose])
		}
		turn("system", sys, tl)
	}
	for i, m := range rest {
		switch m.Role {
		case "system", "user", "tool":
			turn(m.Role, p.Encode(m.Content))
		case "assistant":
			body := p.Encode(m.Content)
			for _, tc := range m.ToolCalls {
				body = append(body, p.Encode(tc.Function.Name)...)
				if a := strings.TrimSpace(tc.Function.Arguments); a != "" && a != "{}" {
					body = append(body, p.Encode(a)...)
				}
			}
			turn("assistant", body)
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	out = append(out, p.imStart)
	out = append(out, p.Encode("assistant")...)
	return out, nil
}
