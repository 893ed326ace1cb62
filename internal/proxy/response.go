package proxy

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
)

// response is a chat completion or stream chunk from the model server, read
// once: decoded into chatResponse, with the places of the values the proxy
// may have to hide noted so that hiding them is splicing in null.
type response struct {
	chatResponse
	raw    []byte
	walked bool   // decoded by walkResponse; added is valid
	added  []span // non-null values the proxy may have added, in order
}

// span is a value in response.raw.
type span struct {
	start, end int
	logprobs   bool // choices[].logprobs; otherwise prompt or completion token ids
}

// parseResponse decodes a chat completion or stream chunk. walkResponse
// handles what vLLM sends in one pass; whatever it leaves (including invalid
// JSON) goes to json.Unmarshal, so the result and the error are json's
// either way.
func parseResponse(raw []byte) (r response, err error) {
	err = r.parse(raw)
	return r, err
}

// parse is parseResponse into r, reusing the memory of r's choices, their
// logprobs and token ids, and spans: a stream's relay decodes each of its
// chunks into one response, so that a chunk of one token does not allocate
// them anew. Nothing keeps a decoded chunk past the next
// (streamAssembly.add copies what it keeps); what does keep one (a record
// keeps an answer's token ids) calls reset before r is parsed into again.
func (r *response) parse(raw []byte) (err error) {
	choices, added := r.Choices[:0], r.added[:0]
	// The model's name is kept when the next chunk names the same model:
	// walkResponse then does not copy it again.
	*r = response{raw: raw, chatResponse: chatResponse{Model: r.Model}}
	if r.added, err = walkResponse(raw, &r.chatResponse, choices, added); err == nil {
		r.walked = true
		return nil
	}
	r.added = nil
	var cr chatResponse // not r's field: that would put every r on the heap
	err = json.Unmarshal(raw, &cr)
	r.chatResponse = cr
	return err
}

// reset lets go of everything r refers to but the memory parse reuses (its
// choices' logprobs and its spans), so that a pooled response holds no
// answer or record alive.
func (r *response) reset() {
	for i := range r.Choices {
		r.Choices[i] = respChoice{Logprobs: r.Choices[i].Logprobs}
	}
	*r = response{chatResponse: chatResponse{Choices: r.Choices[:0]}, added: r.added[:0]}
}

// stripped returns the response without what s hides, and whether that
// changed anything (see stripResponse). Everything else stays byte for byte.
func (r *response) stripped(s strip) (out []byte, changed bool, err error) {
	out, changed, err = r.appendStripped(nil, s)
	if !changed || err != nil {
		return r.raw, changed, err
	}
	return out, true, nil
}

// appendStripped appends the response without what s hides to dst when
// that changes anything (changed), and returns dst as it was otherwise:
// the caller then sends raw itself, uncopied.
func (r *response) appendStripped(dst []byte, s strip) (out []byte, changed bool, err error) {
	if !s.any() {
		return dst, false, nil
	}
	if !r.walked {
		b, changed, err := stripResponse(r.raw, s)
		if !changed || err != nil {
			return dst, changed, err
		}
		return append(dst, b...), true, nil
	}
	hide := func(sp span) bool { return sp.logprobs && s.logprobs || !sp.logprobs && s.tokenIDs }
	if !slices.ContainsFunc(r.added, hide) {
		return dst, false, nil
	}
	last := 0
	for _, sp := range r.added {
		if hide(sp) {
			dst = append(append(dst, r.raw[last:sp.start]...), "null"...)
			last = sp.end
		}
	}
	return append(dst, r.raw[last:]...), true, nil
}

// The fields walkResponse decodes into each struct; see field.
var (
	responseFields = []string{"model", "choices", "usage", "prompt_token_ids", "error"}
	choiceFields   = []string{"index", "message", "delta", "logprobs", "finish_reason", "token_ids"}
	usageFields    = []string{"prompt_tokens", "completion_tokens"}
	logprobsFields = []string{"content"}
	logprobFields  = []string{"logprob"}
	messageFields  = []string{"content", "tool_calls"}
	toolCallFields = []string{"index", "id", "type", "function"}
	functionFields = []string{"name", "arguments"}
)

// walkResponse decodes raw into cr exactly as json.Unmarshal would, in one
// pass over the bytes, and returns the spans of the non-null
// prompt_token_ids, choices[].token_ids and choices[].logprobs. It validates
// all of raw on the way. It gives up (an error) on anything where matching
// json.Unmarshal would take more code than it is worth and that vLLM does not
// send: a field of an unexpected type, null inside choices or arrays,
// duplicate fields, keys that only match a field ignoring case or that need
// unescaping. The caller then falls back to json.Unmarshal.
//
// choices and spans, when not nil, are memory to reuse: cr's choices and the
// spans returned are appended to them from their start.
//
// cr.Model, when set, is taken to be the previous chunk's: it stays if raw
// names the same model, and is replaced or cleared otherwise.
func walkResponse(raw []byte, cr *chatResponse, choices []respChoice, spans []span) ([]span, error) {
	s := &scanner{b: raw}
	spans = spans[:0]
	prevModel := cr.Model
	cr.Model = ""
	var seen uint
	s.open('{')
	for first := true; s.next('}', first); first = false {
		switch s.field(responseFields, &seen) {
		case "model":
			if !s.null() {
				if t := s.textPiece(); t.plain && string(t.raw) == prevModel {
					cr.Model = prevModel
				} else {
					cr.Model = t.String()
				}
			}
		case "choices":
			if s.null() || !s.open('[') {
				break
			}
			cr.Choices = choices[:0]
			if cr.Choices == nil {
				cr.Choices = []respChoice{} // "choices":[] decodes to empty, not nil
			}
			for first := true; s.next(']', first); first = false {
				// A reused choice's logprobs and token ids are reused too
				// (see parse).
				var lp *respLogprobs
				var ids []int32
				if n := len(cr.Choices); n < cap(cr.Choices) {
					lp, ids = cr.Choices[:n+1][n].Logprobs, cr.Choices[:n+1][n].TokenIDs
				}
				cr.Choices = append(cr.Choices, respChoice{})
				s.choice(&cr.Choices[len(cr.Choices)-1], &spans, lp, ids)
			}
		case "usage":
			if !s.null() {
				cr.Usage = &respUsage{}
				s.usage(cr.Usage)
			}
		case "prompt_token_ids":
			if start := s.at(); !s.null() {
				cr.PromptTokenIDs = s.int32s()
				spans = append(spans, span{start: start, end: s.i})
			}
		case "error":
			cr.Error = s.value()
		default:
			s.value()
		}
	}
	return spans, s.end()
}

// choice reads a choice into c; reuse and ids, when not nil, are memory
// for its logprobs and token ids.
func (s *scanner) choice(c *respChoice, spans *[]span, reuse *respLogprobs, ids []int32) {
	var seen uint
	s.open('{')
	for first := true; s.next('}', first); first = false {
		switch s.field(choiceFields, &seen) {
		case "index":
			if !s.null() {
				c.Index = int(s.integer(strconv.IntSize))
			}
		case "message":
			c.Message = s.value()
		case "delta":
			c.Delta = s.value()
		case "logprobs":
			if start := s.at(); !s.null() {
				if reuse != nil {
					spare := reuse.Content
					if spare == nil {
						spare = reuse.spare
					}
					*reuse = respLogprobs{spare: spare[:0]}
					c.Logprobs = reuse
				} else {
					c.Logprobs = &respLogprobs{}
				}
				s.logprobs(c.Logprobs)
				*spans = append(*spans, span{start: start, end: s.i, logprobs: true})
			}
		case "finish_reason":
			if !s.null() {
				f := s.text()
				c.FinishReason = &f
			}
		case "token_ids":
			if start := s.at(); !s.null() {
				c.TokenIDs = s.int32sInto(ids)
				*spans = append(*spans, span{start: start, end: s.i})
			}
		default:
			s.value()
		}
	}
}

func (s *scanner) usage(u *respUsage) {
	var seen uint
	s.open('{')
	for first := true; s.next('}', first); first = false {
		switch s.field(usageFields, &seen) {
		case "prompt_tokens":
			if !s.null() {
				u.PromptTokens = int32(s.integer(32))
			}
		case "completion_tokens":
			if !s.null() {
				u.CompletionTokens = int32(s.integer(32))
			}
		default:
			s.value()
		}
	}
}

func (s *scanner) logprobs(l *respLogprobs) {
	var seen uint
	var ok bool
	s.open('{')
	for first := true; s.next('}', first); first = false {
		if s.field(logprobsFields, &seen) != "content" {
			s.value()
			continue
		}
		if s.null() || !s.open('[') {
			continue
		}
		if l.Content = l.spare; l.Content == nil {
			l.Content = []respLogprob{}
		}
		for first := true; s.next(']', first); first = false {
			var e respLogprob
			if e.Logprob, ok = s.vllmLogprob(); ok {
				l.Content = append(l.Content, e)
				continue
			}
			var entrySeen uint
			s.open('{')
			for first := true; s.next('}', first); first = false {
				switch s.field(logprobFields, &entrySeen) {
				case "logprob":
					if !s.null() {
						e.Logprob = s.float()
					}
				default:
					s.value()
				}
			}
			l.Content = append(l.Content, e)
		}
	}
}

// vllmLogprob reads a logprob entry written exactly as vLLM writes one
// without top logprobs, compact and in its key order:
//
//	{"token":"…","logprob":-0.25,"bytes":[116,49],"top_logprobs":[]}
//
// and returns its logprob. Such an entry has no duplicate or case-folded
// keys and only valid JSON, so the general loop would decode it the same;
// that loop costs a field lookup per key and a value() per byte, most of a
// non-streamed answer's scan. At anything else it reads nothing and
// reports false, and the caller takes the general loop.
func (s *scanner) vllmLogprob() (lp float64, ok bool) {
	b, i := s.b, s.i
	if !bytes.HasPrefix(b[i:], []byte(`{"token":"`)) {
		return 0, false
	}
	s.i = i + len(`{"token":`)
	if _, _ = s.str(); s.err != nil || !bytes.HasPrefix(b[s.i:], []byte(`,"logprob":`)) {
		return s.restart(i)
	}
	s.i += len(`,"logprob":`)
	start := s.i
	if s.num(); s.err != nil {
		return s.restart(i)
	}
	num := b[start:s.i]
	j := s.i
	if !bytes.HasPrefix(b[j:], []byte(`,"bytes":[`)) {
		return s.restart(i)
	}
	j += len(`,"bytes":[`)
	for first := true; j < len(b) && b[j] != ']'; first = false {
		if !first {
			if b[j] != ',' {
				return s.restart(i)
			}
			j++
		}
		// An element is 0 or digits without a leading zero.
		k := digits(b, j)
		if k == j || b[j] == '0' && k > j+1 {
			return s.restart(i)
		}
		j = k
	}
	if j == len(b) {
		return s.restart(i)
	}
	j++
	if !bytes.HasPrefix(b[j:], []byte(`,"top_logprobs":[]}`)) {
		return s.restart(i)
	}
	lp, ok = atof(num)
	if !ok {
		return s.restart(i)
	}
	s.i = j + len(`,"top_logprobs":[]}`)
	return lp, true
}

// restart undoes a fast path that read from i and found something else
// (vllmLogprob), so that the general loop reads it again, errors and all.
func (s *scanner) restart(i int) (float64, bool) {
	s.i, s.err = i, nil
	return 0, false
}

// field reads a key of an object that json.Unmarshal would decode into a
// struct with the given fields and returns the field it names, or "" for
// any other key. seen collects the fields met so far, one bit each: a
// duplicate fails, as does a key that encoding/json would match to a field
// while this does not (it matches case-insensitively, after unescaping).
func (s *scanner) field(fields []string, seen *uint) string {
	k, plain := s.key()
	if s.err != nil {
		return ""
	}
	for i, f := range fields {
		if string(k) == f {
			if *seen&(1<<i) != 0 {
				s.fail("duplicate field " + f)
				return ""
			}
			*seen |= 1 << i
			return f
		}
	}
	if !plain {
		s.fail("key needs unescaping")
		return ""
	}
	for _, f := range fields {
		if equalFoldASCII(k, f) {
			s.fail("key differs from field " + f + " in case")
			return ""
		}
	}
	return ""
}

// equalFoldASCII compares k with a lower-case field name ignoring ASCII
// case, as encoding/json matches keys to fields.
func equalFoldASCII(k []byte, lower string) bool {
	if len(k) != len(lower) {
		return false
	}
	for i, c := range k {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// parseMessage decodes a choice's message or a chunk's delta as
// json.Unmarshal would, in one pass for what vLLM sends (see walkResponse).
func parseMessage(raw []byte, m *respMessage) error {
	if walkMessage(raw, m) == nil {
		return nil
	}
	var u respMessage // not m: that would move every caller's m to the heap
	err := json.Unmarshal(raw, &u)
	*m = u
	return err
}

func walkMessage(raw []byte, m *respMessage) error {
	s := scanner{b: raw}
	var seen uint
	s.open('{')
	for first := true; s.next('}', first); first = false {
		switch s.field(messageFields, &seen) {
		case "content":
			if !s.null() {
				c := s.text()
				m.Content = &c
			}
		case "tool_calls":
			m.ToolCalls = s.value()
		default:
			s.value()
		}
	}
	return s.end()
}

// parseToolCallDeltas decodes a delta's tool_calls as json.Unmarshal would,
// in one pass for what vLLM sends (see walkResponse).
func parseToolCallDeltas(raw []byte) ([]toolCallDelta, error) {
	if tds, err := walkToolCallDeltas(raw); err == nil {
		return tds, nil
	}
	var tds []toolCallDelta
	return tds, json.Unmarshal(raw, &tds)
}

func walkToolCallDeltas(raw []byte) ([]toolCallDelta, error) {
	s := scanner{b: raw}
	var tds []toolCallDelta
	if !s.null() && s.open('[') {
		tds = []toolCallDelta{}
		for first := true; s.next(']', first); first = false {
			var c callPiece
			s.callPiece(&c)
			td := toolCallDelta{Index: c.index, ID: c.id.String(), Type: c.typ.String()}
			if c.function {
				td.Function = &toolFunction{Name: c.name.String(), Arguments: c.arguments.String()}
			}
			tds = append(tds, td)
		}
	}
	return tds, s.end()
}

// callPiece reads one element of a delta's tool_calls into c, undecoded:
// walkDelta adds it to a stream's record as it is, walkToolCallDeltas
// decodes it into a toolCallDelta.
func (s *scanner) callPiece(c *callPiece) {
	var seen uint
	s.open('{')
	for first := true; s.next('}', first); first = false {
		switch s.field(toolCallFields, &seen) {
		case "index":
			if !s.null() {
				c.index = int(s.integer(strconv.IntSize))
			}
		case "id":
			if !s.null() {
				c.id = s.textPiece()
			}
		case "type":
			if !s.null() {
				c.typ = s.textPiece()
			}
		case "function":
			if s.null() {
				break
			}
			c.function = true
			var fseen uint
			s.open('{')
			for first := true; s.next('}', first); first = false {
				switch s.field(functionFields, &fseen) {
				case "name":
					if !s.null() {
						c.name = s.textPiece()
					}
				case "arguments":
					if !s.null() {
						c.arguments = s.textPiece()
					}
				default:
					s.value()
				}
			}
		default:
			s.value()
		}
	}
}
