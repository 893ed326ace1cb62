package policy

import (
	"encoding/json"
	"errors"
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

// Image placeholder tokens, as Qwen2-VL's tokenizer spells them: an image
// renders as <|vision_start|>, one <|image_pad|> per patch, <|vision_end|>
// (vLLM returns prompt token ids with the pads expanded the same way). Only
// weights with a vision section need them.
const (
	VisionStart = "<|vision_start|>"
	ImagePad    = "<|image_pad|>"
	VisionEnd   = "<|vision_end|>"
)

// VisionSpecials are the tokens a vision-capable vocabulary adds.
var VisionSpecials = []string{VisionStart, ImagePad, VisionEnd}

// Message is an OpenAI chat message. Content is the text; on the wire it is a
// string, null, or an array of parts: {"type":"text","text":…} parts are
// joined with a space into Content, {"type":"image_url","image_url":{"url":…}}
// parts are Images, in order. Images render after the text.
type Message struct {
	Role       string
	Content    string
	Images     []string // image URLs (data:image/png;base64,… for the toy)
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
	if len(m.Images) > 0 {
		var parts []any
		if m.Content != "" {
			parts = append(parts, map[string]string{"type": "text", "text": m.Content})
		}
		for _, u := range m.Images {
			parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]string{"url": u}})
		}
		b, err := json.Marshal(parts)
		if err != nil {
			return nil, err
		}
		w.Content = b
		return json.Marshal(w)
	}
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
			Type     string `json:"type"`
			Text     string `json:"text"`
			ImageURL struct {
				URL string `json:"url"`
			} `json:"image_url"`
		}
		if err := json.Unmarshal(w.Content, &parts); err != nil {
			return fmt.Errorf("content parts: %w", err)
		}
		var texts []string
		for _, p := range parts {
			switch p.Type {
			case "text":
				texts = append(texts, p.Text)
			case "image_url":
				m.Images = append(m.Images, p.ImageURL.URL)
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
// generation prompt. It returns the token ids and, per image in prompt
// order, its features (ImageFeatures). Every message renders on its own as
//
//	<|im_start|> role content-words images <|im_end|>
//
// where each image is <|vision_start|> <|image_pad|>×patches <|vision_end|>
// (Patches); weights without a vision section refuse images, as a
// text-only model server does.
//
// The system turn (first, or synthesised when tools are given) also lists
// the tools between <tools> and </tools> (name and description words). An
// assistant message renders its content words followed, for each tool call,
// by the function name and, unless they are empty or "{}", the argument
// words; so a prompt plus the completion [name, <|im_end|>] is a prefix of
// the next prompt. The generation prompt is "<|im_start|> assistant".
func (p *Policy) Render(msgs []Message, tools []Tool) ([]int, [][]float64, error) {
	var out []int
	var feats [][]float64
	images := func(i int, m Message) ([]int, error) {
		var ids []int
		for j, u := range m.Images {
			img, err := DecodeImageURL(u)
			if err != nil {
				return nil, fmt.Errorf("message %d image %d: %w", i, j, err)
			}
			if p.Vision == nil {
				return nil, fmt.Errorf("message %d image %d: this model reads no images (its weights have no vision section)", i, j)
			}
			ids = append(ids, p.index[VisionStart])
			for range p.Patches(img.Bounds().Dx(), img.Bounds().Dy()) {
				ids = append(ids, p.index[ImagePad])
			}
			ids = append(ids, p.index[VisionEnd])
			feats = append(feats, p.ImageFeatures(img))
		}
		return ids, nil
	}
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
			if len(msgs[0].Images) > 0 {
				return nil, nil, errors.New("message 0: the system message cannot carry images")
			}
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
		img, err := images(i, m)
		if err != nil {
			return nil, nil, err
		}
		switch m.Role {
		case "system", "user", "tool":
			turn(m.Role, p.Encode(m.Content), img)
		case "assistant":
			body := p.Encode(m.Content)
			for _, tc := range m.ToolCalls {
				body = append(body, p.Encode(tc.Function.Name)...)
				if a := strings.TrimSpace(tc.Function.Arguments); a != "" && a != "{}" {
					body = append(body, p.Encode(a)...)
				}
			}
			turn("assistant", append(body, img...))
		default:
			return nil, nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	out = append(out, p.imStart)
	out = append(out, p.Encode("assistant")...)
	return out, feats, nil
}
