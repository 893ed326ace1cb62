package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// This file edits JSON objects without disturbing anything the edit does not
// touch: an object is decoded into its members in document order, values stay
// raw bytes, and only objects on the path of an edit are re-encoded. vLLM emits
// compact JSON, so an edited response differs from the original only in the
// edited values.

var errNotObject = errors.New("not a JSON object")

// member is one key/value pair of a JSON object.
type member struct {
	key string
	val json.RawMessage
}

// decodeObject splits a JSON object into its members, in order.
func decodeObject(raw []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("read object: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errNotObject
	}
	var ms []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("read key: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("object key is %T, not a string", tok)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("read value of %q: %w", key, err)
		}
		ms = append(ms, member{key: key, val: v})
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return nil, fmt.Errorf("read object end: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON object")
	}
	return ms, nil
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
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // Python's json does not escape <, >, &
	_ = enc.Encode(k)        // a string always encodes
	return bytes.TrimRight(b.Bytes(), "\n")
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
	ms, err := decodeObject(v)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if !isNull(m.val) {
			return false
		}
	}
	return true
}

// strip says which fields the proxy added to the request and must therefore
// hide from the client again.
type strip struct {
	tokenIDs bool // prompt_token_ids (top level) and choices[].token_ids
	logprobs bool // choices[].logprobs
}

func (s strip) any() bool { return s.tokenIDs || s.logprobs }

// stripResponse turns a response or stream chunk produced for the augmented
// request back into what the client's own request would have produced.
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
		var choices []json.RawMessage
		if err := json.Unmarshal(v, &choices); err != nil {
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
