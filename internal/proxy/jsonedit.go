package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// This file edits JSON objects member by member: an object is split into its
// members in document order, values stay raw bytes, and only objects on the
// path of an edit are re-encoded (compactly). It is the general path for
// stripping a response that the one-pass walk in response.go leaves to
// encoding/json; vLLM emits compact JSON, so there too an edited response
// differs from the original only in the edited values.

var errNotObject = errors.New("not a JSON object")

// member is one key/value pair of a JSON object.
type member struct {
	key string
	val json.RawMessage
}

// decodeObject splits a JSON object into its members, in order. Values are
// sub-slices of raw.
func decodeObject(raw []byte) ([]member, error) {
	s := scanner{b: raw}
	if s.peek() != '{' {
		if s.value(); s.end() == nil {
			return nil, errNotObject
		}
		return nil, fmt.Errorf("read object: %w", s.err)
	}
	var ms []member
	s.open('{')
	for first := true; s.next('}', first); first = false {
		k, plain := s.key()
		v := s.value()
		if s.err == nil {
			ms = append(ms, member{key: decodeKey(k, plain), val: v})
		}
	}
	if err := s.end(); err != nil {
		return nil, fmt.Errorf("read object: %w", err)
	}
	return ms, nil
}

// decodeArray splits a JSON array into its elements, sub-slices of raw.
func decodeArray(raw []byte) ([]json.RawMessage, error) {
	s := scanner{b: raw}
	var vs []json.RawMessage
	if s.open('[') {
		for first := true; s.next(']', first); first = false {
			vs = append(vs, s.value())
		}
	}
	if err := s.end(); err != nil {
		return nil, fmt.Errorf("read array: %w", err)
	}
	return vs, nil
}

// decodeKey turns the bytes between a key's quotes, as scanner.key returns
// them, into the key.
func decodeKey(k []byte, plain bool) string {
	if plain {
		return string(k)
	}
	return unquote(k)
}

// encodeObject is the inverse of decodeObject (compact).
func encodeObject(ms []member) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(encodeKey(m.key))
		b.WriteByte(':')
		b.Write(m.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func encodeKey(k string) []byte {
	if plainKey(k) {
		return []byte(`"` + k + `"`)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // Python's json does not escape <, >, &
	_ = enc.Encode(k)        // a string always encodes
	return bytes.TrimRight(b.Bytes(), "\n")
}

// plainKey reports whether k encodes as itself between quotes: printable
// ASCII without quote or backslash (every key vLLM and OpenAI clients use).
func plainKey(k string) bool {
	for i := range len(k) {
		if c := k[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func encodeArray(vs []json.RawMessage) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, v := range vs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(v)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// get returns the value of key (the first occurrence).
func get(ms []member, key string) (json.RawMessage, bool) {
	for _, m := range ms {
		if m.key == key {
			return m.val, true
		}
	}
	return nil, false
}

// set replaces the value of key, or appends the member when absent.
func set(ms []member, key string, val json.RawMessage) []member {
	for i := range ms {
		if ms[i].key == key {
			ms[i].val = val
			return ms
		}
	}
	return append(ms, member{key: key, val: val})
}

// nullify sets key to null when it is present and not already null; it
// reports whether it changed anything. A key that is absent stays absent.
func nullify(ms []member, key string) bool {
	for i := range ms {
		if ms[i].key == key && !isNull(ms[i].val) {
			ms[i].val = json.RawMessage("null")
			return true
		}
	}
	return false
}

func isNull(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) == 0 || bytes.Equal(v, []byte("null"))
}

func isTrue(v json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(v), []byte("true"))
}

// isEmptyObject reports whether v is an object whose members are all null
// (vLLM's DeltaMessage() serialises as {}).
func isEmptyObject(v json.RawMessage) bool {
	if isNull(v) {
		return true
	}
	s := scanner{b: v}
	s.open('{')
	for first := true; s.next('}', first); first = false {
		if s.key(); !s.null() {
			return false
		}
	}
	return s.end() == nil
}

// strip says which fields the proxy added to the request and must therefore
// hide from the client again.
type strip struct {
	tokenIDs bool // prompt_token_ids (top level) and choices[].token_ids
	logprobs bool // choices[].logprobs
}

func (s strip) any() bool { return s.tokenIDs || s.logprobs }

// stripResponse turns a response or stream chunk produced for the augmented
// request back into what the client's own request would have produced. It is
// the general path of response.stripped.
// vLLM emits these fields as null when they were not requested (non-streamed:
// model_dump(); streamed: model_dump_json(exclude_unset=True) on fields the
// server passes explicitly as None), so the proxy sets them to null rather than
// deleting them; an absent key stays absent.
func stripResponse(raw []byte, s strip) (out []byte, changed bool, err error) {
	if !s.any() {
		return raw, false, nil
	}
	ms, err := decodeObject(raw)
	if err != nil {
		return nil, false, err
	}
	if s.tokenIDs {
		changed = nullify(ms, "prompt_token_ids")
	}
	if v, ok := get(ms, "choices"); ok && !isNull(v) {
		choices, err := decodeArray(v)
		if err != nil {
			return nil, false, fmt.Errorf("choices: %w", err)
		}
		choicesChanged := false
		for i, c := range choices {
			cms, err := decodeObject(c)
			if err != nil {
				return nil, false, fmt.Errorf("choice %d: %w", i, err)
			}
			cc := false
			if s.tokenIDs && nullify(cms, "token_ids") {
				cc = true
			}
			if s.logprobs && nullify(cms, "logprobs") {
				cc = true
			}
			if cc {
				choices[i] = encodeObject(cms)
				choicesChanged = true
			}
		}
		if choicesChanged {
			ms = set(ms, "choices", encodeArray(choices))
			changed = true
		}
	}
	if !changed {
		return raw, false, nil
	}
	return encodeObject(ms), true, nil
}
