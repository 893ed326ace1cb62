package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// scanCases are inputs for the scanner, valid or not as json.Valid says
// (the tests check that they agree).
var scanCases = []string{
	// strings past eight bytes, with what str must look at on either side
	// of a word boundary (it reads eight bytes at a time)
	`{"0123456789abcdef":"0123456\"89abcdef0123456789","k":"01234567\\9abcdé0123456"}`,
	`["0123456789abcdefghi\u00e9jklmnopqrstuvwxyz","abcdefg","abcdefgh","abcdefghi"]`,
	"[\"0123456789ab\x01cdef\"]", "[\"0123456789abcdefgh\x7f\x80\xffxyz\"]", `["0123456789abcdef\`,
	// valid
	`{}`, `[]`, `""`, `0`, `-0`, `null`, `true`, `false`, ` {} `, "\t\n\r {\n\"a\" :\t1 }\r\n",
	`{"a":"}\"{[","b":[1,{"c":"\\"}],"d":"\\\"}"}`,
	`{"k\"ey":"v\u00e9\ud83d\ude00","e\u0301":"\/\b\f\n\r\t"}`,
	`{"lone":"\ud800","low":"\udc00x","pair-ish":"\ud800\u0041","bad-utf8":"a` + "\xff\xfe" + `b"}`,
	`[0,-0,1,-1,0.5,-0.5e-3,1E+10,1e10,123456789012345678901234567890,1.7976931348623157e309]`,
	`[[[[[]]]],{"a":{"b":{"c":[{}]}}}]`, `[1,22,333,999999999,1000000000,-5, 7 ,0]`, `[01]`, `[1,2,]`,
	`{"a":1,"a":2}`, `"é"`, `"\uD83D\uDE00\u00C9\u00cF\uFFFF\uABCD\u0000"`,
	// invalid
	``, ` `, `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,"a":1}`, `[1,]`, `[,1]`, `[1 2]`, `{"a":1 "b":2}`,
	`{a:1}`, `{'a':1}`, `{"a":1}}`, `{} {}`, `{}x`, `[`, `]`, `"abc`, `"a\"`, `"\x"`, `"\u12G4"`, `"\u123"`,
	"\"a\x01b\"", "\"tab\tin\"", `01`, `1.`, `.5`, `+1`, `1e`, `1e+`, `-`, `--1`, `0x1`, `1.5.2`, `NaN`, `Infinity`,
	`tru`, `nul`, `nulll`, `True`, `[true false]`, "\x00", `{"a":1}` + "\x00", `"\u00"`,
}

func TestScannerAgreesWithJSONValid(t *testing.T) {
	for _, in := range scanCases {
		if got, want := validJSON([]byte(in)), json.Valid([]byte(in)); got != want {
			t.Errorf("validJSON(%q) = %v, json.Valid = %v", in, got, want)
		}
	}
	deep := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	tooDeep := "[" + deep + "]"
	if !validJSON([]byte(deep)) || validJSON([]byte(tooDeep)) || json.Valid([]byte(tooDeep)) {
		t.Errorf("nesting limit differs from encoding/json's")
	}
}

func TestScannerValues(t *testing.T) {
	in := ` { "a" : "}\"{[" , "b":[1, {"c":"\\"}] ,"n": -1.5e3,"u":"\u00e9\ud83d\ude00", "t":true }  `
	ms, err := decodeObject([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []member{{"a", json.RawMessage(`"}\"{["`)}, {"b", json.RawMessage(`[1, {"c":"\\"}]`)},
		{"n", json.RawMessage(`-1.5e3`)}, {"u", json.RawMessage(`"\u00e9\ud83d\ude00"`)}, {"t", json.RawMessage(`true`)}}
	if !reflect.DeepEqual(ms, want) {
		t.Fatalf("decodeObject = %q\nwant %q", ms, want)
	}
	s := scanner{b: []byte(`"\u00e9\ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t \ud800 \udc00\u0041 ` + "\xff" + `"`)}
	if got, want := s.text(), "é😀 \"q\" \\ / \b\f\n\r\t \uFFFD \uFFFDA \uFFFD"; got != want || s.end() != nil {
		t.Errorf("text = %q (%v), want %q", got, s.err, want)
	}
	for _, bad := range []string{`{"a":1,}`, `{"a" 1}`, `{"a":"x}`, `{"a":[1,2}`, `{"a":1} x`} {
		if ms, err := decodeObject([]byte(bad)); err == nil {
			t.Errorf("decodeObject(%q) = %q, want an error", bad, ms)
		}
	}
	if _, err := decodeObject([]byte(`[1, 2]`)); !errors.Is(err, errNotObject) {
		t.Errorf("decodeObject of an array: %v", err)
	}
}

func TestScannerNumbers(t *testing.T) {
	for _, c := range []struct {
		in   string
		bits int
		want int64
		ok   bool
	}{
		{"0", 32, 0, true}, {"-0", 32, 0, true}, {"2147483647", 32, 2147483647, true},
		{"-2147483648", 32, -2147483648, true}, {"2147483648", 32, 0, false}, {"-2147483649", 32, 0, false},
		{"9223372036854775807", 64, 9223372036854775807, true}, {"-9223372036854775808", 64, -9223372036854775808, true},
		{"9223372036854775808", 64, 0, false}, {"99999999999999999999", 64, 0, false}, {"1.0", 32, 0, false},
		{"1e2", 32, 0, false}, {`"1"`, 32, 0, false}, {"01", 32, 0, false},
	} {
		s := scanner{b: []byte(c.in)}
		got := s.integer(c.bits)
		if err := s.end(); (err == nil) != c.ok || got != c.want {
			t.Errorf("integer(%s, %d) = %d, %v; want %d, ok %v", c.in, c.bits, got, err, c.want, c.ok)
		}
	}
	for _, in := range []string{"[]", "[0]", "[ 1 , 2 ]", "[1,-2,3]", "[999999999,1000000000,2147483647,-2147483648]",
		"[01]", "[1,]", "[,1]", "[2147483648]", "[12345678901]", "[1.0]", "[1e2]", "[1", "[1,2", "[1 2]", "[1]x", "[0,00]"} {
		var want []int32
		wantErr := json.Unmarshal([]byte(in), &want)
		s := scanner{b: []byte(in)}
		got := s.int32s()
		if err := s.end(); (err == nil) != (wantErr == nil) || err == nil && !slices.Equal(got, want) {
			t.Errorf("int32s(%s) = %v, %v; json: %v, %v", in, got, err, want, wantErr)
		}
	}
	s := scanner{b: []byte("[1,null]")}
	if s.int32s(); s.err == nil {
		t.Errorf("int32s took a null element: json.Unmarshal makes it 0, so it must give up")
	}
	for _, in := range []string{"-0.1234567890123456789", "1e-400", "5e-324", "1.7976931348623157e308", "1e309", "-2"} {
		var want float64
		wantErr := json.Unmarshal([]byte(in), &want)
		s := scanner{b: []byte(in)}
		got := s.float()
		if err := s.end(); (err == nil) != (wantErr == nil) || got != want && wantErr == nil {
			t.Errorf("float(%s) = %v, %v; json: %v, %v", in, got, err, want, wantErr)
		}
	}
}

// decodeObjectRef is decodeObject as it was written on json.Decoder: the
// reference for the scanner.
func decodeObjectRef(raw []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil {
		return nil, err
	} else if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errNotObject
	}
	var ms []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		ms = append(ms, member{key: tok.(string), val: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON object")
	}
	return ms, nil
}

// FuzzScanner checks the scanner against encoding/json: the same inputs are
// valid, objects split into the same members, strings decode alike.
func FuzzScanner(f *testing.F) {
	for _, c := range scanCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		valid := json.Valid(in)
		if got := validJSON(in); got != valid {
			t.Fatalf("validJSON = %v, json.Valid = %v", got, valid)
		}
		ms, err := decodeObject(in)
		want, wantErr := decodeObjectRef(in)
		if (err == nil) != (wantErr == nil) || err == nil && !reflect.DeepEqual(ms, want) {
			t.Fatalf("decodeObject = %q, %v\nreference %q, %v", ms, err, want, wantErr)
		}
		if bytes.HasPrefix(bytes.TrimSpace(in), []byte(`[`)) {
			vs, err := decodeArray(in)
			var want []json.RawMessage
			wantErr := json.Unmarshal(in, &want)
			if (err == nil) != (wantErr == nil) || fmt.Sprintf("%q", vs) != fmt.Sprintf("%q", want) {
				t.Fatalf("decodeArray = %q, %v\njson.Unmarshal %q, %v", vs, err, want, wantErr)
			}
			var wantIDs []int32
			wantErr = json.Unmarshal(in, &wantIDs)
			s := scanner{b: in}
			ids := s.int32s()
			if err := s.end(); err == nil && (wantErr != nil || !slices.Equal(ids, wantIDs)) {
				t.Fatalf("int32s = %v; json.Unmarshal %v, %v", ids, wantIDs, wantErr)
			}
		}
		if valid && bytes.HasPrefix(bytes.TrimSpace(in), []byte(`"`)) {
			var want string
			_ = json.Unmarshal(in, &want)
			s := scanner{b: in}
			if got := s.text(); got != want {
				t.Fatalf("text = %q, json.Unmarshal = %q", got, want)
			}
		}
	})
}

// stubResponses are answers and stream chunks of the test stub, all the
// shapes it has, with and without the added fields.
func stubResponses() [][]byte {
	var out [][]byte
	up := &stub{tokenIDs: true, logprobs: true}
	for _, tools := range []bool{false, true} {
		for _, added := range []bool{false, true} {
			for _, top := range []int{0, 2} {
				req := stubRequest{Model: "toy", Logprobs: added, ReturnTokenIDs: added, TopLogprobs: top}
				req.Messages = append(req.Messages, struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				}{"user", "say \"hi\"\n in ünïcode"})
				if tools {
					req.Tools = []json.RawMessage{json.RawMessage(`{}`)}
				}
				g := generate(req)
				out = append(out, up.completion(req, g))
				req.StreamOptions = &struct {
					IncludeUsage bool `json:"include_usage"`
				}{true}
				rr := httptest.NewRecorder()
				up.stream(rr, httptest.NewRequest("POST", "/v1/chat/completions", nil), req, g, nil, nil)
				for ev := range strings.SplitSeq(rr.Body.String(), "\n\n") {
					if p, ok := strings.CutPrefix(ev, "data: "); ok && p != "[DONE]" {
						out = append(out, []byte(p))
					}
				}
			}
		}
	}
	return out
}

// The fast path must take what vLLM sends; the fuzz tests below check that
// it decodes like json.Unmarshal whenever it does.
func TestWalkTakesVLLMShapes(t *testing.T) {
	for _, raw := range stubResponses() {
		var cr chatResponse
		if _, err := walkResponse(raw, &cr, nil, nil); err != nil {
			t.Errorf("walkResponse gave up on %s: %v", raw, err)
		}
		for _, c := range cr.Choices {
			for _, m := range []json.RawMessage{c.Message, c.Delta} {
				var rm respMessage
				if m != nil && walkMessage(m, &rm) != nil {
					t.Errorf("walkMessage gave up on %s", m)
				}
				if _, err := walkToolCallDeltas(rm.ToolCalls); !isNull(rm.ToolCalls) && err != nil {
					t.Errorf("walkToolCallDeltas gave up on %s", rm.ToolCalls)
				}
			}
			var a streamAssembly
			if !isNull(c.Delta) && !a.walkDelta(c.Delta) {
				t.Errorf("walkDelta gave up on %s", c.Delta)
			}
		}
	}
}

var strips = []strip{{tokenIDs: true}, {logprobs: true}, {tokenIDs: true, logprobs: true}}

// FuzzResponse checks the one-pass response reader against what it
// replaces: json.Unmarshal into chatResponse, and stripResponse, which
// re-encodes the edited objects (compactly, hence the comparison after
// json.Compact).
// reusedBefore are what a reused response decodes before the input in
// FuzzResponse: choices with logprobs, with null content, and more of them.
var reusedBefore = []string{
	`{"choices":[{"index":0,"delta":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[]}]},"token_ids":[5]}]}`,
	`{"choices":[{"index":0,"logprobs":{"content":null}},{"index":1,"logprobs":{"content":[{"logprob":-1}]}},{"index":2}]}`,
}

// withoutSpare is cr without the memory kept for reuse, which
// json.Unmarshal does not fill.
func withoutSpare(cr chatResponse) chatResponse {
	cr.Choices = slices.Clone(cr.Choices)
	for i, c := range cr.Choices {
		if c.Logprobs != nil {
			lp := *c.Logprobs
			lp.spare = nil
			cr.Choices[i].Logprobs = &lp
		}
	}
	return cr
}

func FuzzResponse(f *testing.F) {
	for _, r := range stubResponses() {
		f.Add(r)
	}
	for _, c := range []string{
		`{"b":1,"prompt_token_ids":[1,2],"a":{"x" : [1, 2]},"choices":[{"index":0,"logprobs":{"content":[]},"token_ids":[3]},{"index":1,"token_ids":null}]}`,
		`{ "choices" : [ { "index" : 0 , "token_ids" : [ 1 , 2 ] , "logprobs" : { "content" : [ { "logprob" : -1e-3 } ] } } ] , "prompt_token_ids" : [ ] }`,
		`{"choices":[null]}`, `{"choices":{}}`, `{"Model":"x"}`, `{"mod\u0065l":"x"}`, `{"model":"a","model":"b"}`,
		`{"model":1}`, `{"usage":{"prompt_tokens":1.0}}`, `{"usage":null,"error":null}`, `{"error":{"message":"x"}}`,
		`{"prompt_token_ids":[2147483648]}`, `{"prompt_token_ids":[1,null]}`, `{"choices":[{"index":"0"}]}`,
		`{"choices":[{"logprobs":{"content":[null]}}]}`, `{"choices":[{"logprobs":{"content":[{"logprob":1e999}]}}]}`,
		`{"choices":[{"finish_reason":"st\u006fp","message":{"content":"a\"b"}}]}`, `null`, `[]`, `{}`, `{"choices":[]}`,
		`{"choices":[{"delta":{"content":"\u00e9\n","tool_calls":[{"index":1,"id":"c\u0031","type":"function","function":{"name":"n","arguments":"{\"a\""}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[null]}}]}`, `{"choices":[{"delta":{"tool_calls":{}}}]}`, `{"choices":[{"delta":{"content":1}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":null},{"index":0,"function":{"arguments":null,"name":"x"}}]}}]}`,
		`{"choices":[{"delta":{"content":"a","content":"b"}}]}`, `{"choices":[{"delta":{"tool_calls":[{"Index":2}]}}]}`,
	} {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want chatResponse
		wantErr := json.Unmarshal(raw, &want)
		r, err := parseResponse(raw)
		if (err == nil) != (wantErr == nil) || err == nil && !reflect.DeepEqual(r.chatResponse, want) {
			t.Fatalf("parseResponse = %+v, %v\njson.Unmarshal %+v, %v", r, err, want, wantErr)
		}
		// Decoded into a response that held another chunk before, as the
		// stream relay does, the result is the same.
		for _, prev := range reusedBefore {
			var again response
			_ = again.parse([]byte(prev))
			err := again.parse(raw)
			if (err == nil) != (wantErr == nil) || err == nil && (!reflect.DeepEqual(withoutSpare(again.chatResponse), want) || !slices.Equal(again.added, r.added)) {
				t.Fatalf("parse after %s = %+v, %v\njson.Unmarshal %+v, %v", prev, again, err, want, wantErr)
			}
		}
		if err != nil || !r.walked {
			return
		}
		if !json.Valid(raw) {
			t.Fatal("walked invalid JSON")
		}
		for _, s := range strips {
			got, changed, err := r.stripped(s)
			ref, refChanged, refErr := stripResponse(raw, s)
			if err != nil || refErr != nil || changed != refChanged || !bytes.Equal(compact(t, got), compact(t, ref)) {
				t.Fatalf("strip %+v:\n got %s, %v, %v\nwant %s, %v, %v", s, got, changed, err, ref, refChanged, refErr)
			}
		}
		for _, c := range want.Choices {
			for _, m := range []json.RawMessage{c.Message, c.Delta} {
				if isNull(m) {
					continue
				}
				var got, want respMessage
				err, wantErr := parseMessage(m, &got), json.Unmarshal(m, &want)
				if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
					t.Fatalf("parseMessage(%s) = %+v, %v; json: %+v, %v", m, got, err, want, wantErr)
				}
				// The stream's one-pass delta reader adds what addDelta adds,
				// or nothing (and addDelta then does).
				var walked, ref streamAssembly
				walked.addDelta([]byte(`{"content":"before","tool_calls":[{"index":0,"id":"x","function":{"arguments":"{"}}]}`))
				ref.addDelta([]byte(`{"content":"before","tool_calls":[{"index":0,"id":"x","function":{"arguments":"{"}}]}`))
				if !walked.walkDelta(m) {
					if walked.content.String() != "before" || len(walked.calls) != 1 || walked.calls[0].args.String() != "{" {
						t.Fatalf("walkDelta(%s) gave up having added to the assembly", m)
					}
					walked.addDelta(m)
				}
				ref.addDelta(m)
				if walked.content.String() != ref.content.String() || !slices.Equal(walked.errs, ref.errs) ||
					!slices.EqualFunc(walked.calls, ref.calls, sameCall) {
					t.Fatalf("delta %s: walked %q %v %s; addDelta %q %v %s", m, walked.content.String(), walked.errs, callsOf(walked.calls),
						ref.content.String(), ref.errs, callsOf(ref.calls))
				}
				if isNull(got.ToolCalls) {
					continue
				}
				tds, err := parseToolCallDeltas(got.ToolCalls)
				var wantTDs []toolCallDelta
				wantErr = json.Unmarshal(got.ToolCalls, &wantTDs)
				if (err == nil) != (wantErr == nil) || err == nil && !reflect.DeepEqual(tds, wantTDs) {
					t.Fatalf("parseToolCallDeltas(%s) = %+v, %v; json: %+v, %v", got.ToolCalls, tds, err, wantTDs, wantErr)
				}
			}
		}
	})
}

func compact(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	return buf.Bytes()
}

// The request sent upstream is the harness's with logprobs and
// return_token_ids true: overwritten where the harness set them (never
// duplicated), appended where it did not, every other byte unchanged.
func TestParseChatRequestSplices(t *testing.T) {
	for _, c := range []struct {
		in, out       string
		logprobs, ids bool
	}{
		{`{"model": "toy", "messages": []}`, `{"model": "toy", "messages": [],"logprobs":true,"return_token_ids":true}`, false, false},
		{`{}`, `{"logprobs":true,"return_token_ids":true}`, false, false},
		{" { \n } ", ` { ` + "\n" + ` "logprobs":true,"return_token_ids":true} `, false, false},
		{`{"logprobs": false, "model": "toy"}`, `{"logprobs": true, "model": "toy","return_token_ids":true}`, false, false},
		{`{"return_token_ids":null,"logprobs":true}`, `{"return_token_ids":true,"logprobs":true}`, true, false},
		{`{"logprobs": true, "return_token_ids": true, "x": 1}`, `{"logprobs": true, "return_token_ids": true, "x": 1}`, true, true},
		{`{"logprobs":true,"logprobs":false}`, `{"logprobs":true,"logprobs":true,"return_token_ids":true}`, false, false},
		{`{"logprob\u0073": {"a": [1]}}`, `{"logprob\u0073": true,"return_token_ids":true}`, false, false},
		{`{"stream": true, "model": "m\u00f6del", "messages": [{"content": "{\"logprobs\": false}"}]}`,
			`{"stream": true, "model": "m\u00f6del", "messages": [{"content": "{\"logprobs\": false}"}],"logprobs":true,"return_token_ids":true}`, false, false},
	} {
		req, err := parseChatRequest([]byte(c.in))
		if err != nil || string(req.upstreamBody()) != c.out || req.wantLogprobs != c.logprobs || req.wantTokenIDs != c.ids {
			t.Errorf("parseChatRequest(%s) = %s, logprobs %v, ids %v, %v\nwant %s, %v, %v",
				c.in, req.upstreamBody(), req.wantLogprobs, req.wantTokenIDs, err, c.out, c.logprobs, c.ids)
		}
	}
	req, _ := parseChatRequest([]byte(`{"stream": true, "model": "m\u00f6del"}`))
	if !req.stream || req.model != "mödel" {
		t.Errorf("stream %v, model %q", req.stream, req.model)
	}
	for _, c := range []struct{ in, err string }{
		{`{"model": "toy", "messages": [`, "request body is not valid JSON"},
		{`{"model": "toy"}}`, "request body is not valid JSON"},
		{``, "request body is not valid JSON"},
		{`[1, 2]`, "request body: not a JSON object"},
		{`"x"`, "request body: not a JSON object"},
	} {
		if _, err := parseChatRequest([]byte(c.in)); err == nil || err.Error() != c.err {
			t.Errorf("parseChatRequest(%s): %v, want %q", c.in, err, c.err)
		}
	}
}

// FuzzParseChatRequest checks the spliced request against a decode with
// encoding/json: the same members, except that logprobs and
// return_token_ids are present once each (or as often as the harness gave
// them) and true; the harness's own values are the last ones it gave.
func FuzzParseChatRequest(f *testing.F) {
	for _, c := range []string{
		`{"model": "toy", "messages": [{"role": "user", "content": "hi"}], "stream": true}`,
		`{"logprobs": false, "return_token_ids": true, "top_logprobs": 2}`, `{}`, `{"logprobs":true,"logprobs":1}`,
		`[]`, `{"a":`, `{"logprob\u0073":true}`, ` {"return_token_ids" : false } `,
	} {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		req, err := parseChatRequest(in)
		ms, refErr := decodeObjectRef(in)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("parseChatRequest: %v, decode: %v", err, refErr)
		}
		if err != nil {
			return
		}
		var wantLogprobs, wantIDs bool
		var rest []member
		for _, m := range ms {
			switch m.key {
			case "logprobs":
				wantLogprobs = isTrue(m.val)
			case "return_token_ids":
				wantIDs = isTrue(m.val)
			default:
				rest = append(rest, m)
			}
		}
		if req.wantLogprobs != wantLogprobs || req.wantTokenIDs != wantIDs {
			t.Fatalf("wantLogprobs %v, wantTokenIDs %v; decode says %v, %v", req.wantLogprobs, req.wantTokenIDs, wantLogprobs, wantIDs)
		}
		up, err := decodeObjectRef(req.upstreamBody())
		if err != nil {
			t.Fatalf("upstream body %s: %v", req.upstreamBody(), err)
		}
		var upRest []member
		count := map[string]int{}
		for _, m := range ms {
			count[m.key]--
		}
		for _, m := range up {
			switch m.key {
			case "logprobs", "return_token_ids":
				count[m.key]++
				if string(m.val) != "true" {
					t.Fatalf("upstream %s = %s", m.key, m.val)
				}
			default:
				upRest = append(upRest, m)
			}
		}
		// Each is overwritten where the harness gave it, added once where not.
		for _, k := range []string{"logprobs", "return_token_ids"} {
			if added := count[k]; added != 0 && (added != 1 || slices.ContainsFunc(ms, func(m member) bool { return m.key == k })) {
				t.Fatalf("upstream body %s has %s %d times more than the harness's", req.upstreamBody(), k, added)
			}
		}
		if fmt.Sprint(upRest) != fmt.Sprint(rest) {
			t.Fatalf("other members changed:\n%q\n%q", upRest, rest)
		}
	})
}

// compactJSON must write what json.Compact writes, for any valid JSON.
func FuzzCompactJSON(f *testing.F) {
	for _, s := range []string{`[{"id":"c","function":{"arguments":"{\"x\": 1}"}}]`, "[ 1 ,\n2 ]", `{"a" : "b\\\" c"}`, `"\u2028 <&>"`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, raw); err != nil {
			t.Fatal(err)
		}
		got, ok := compactJSON(raw)
		if !ok || got != want.String() {
			t.Fatalf("compactJSON(%q) = %q, %v; json.Compact: %q", raw, got, ok, want.String())
		}
	})
}

func sameCall(a, b *toolCall) bool {
	return a.ID == b.ID && a.Type == b.Type && a.Function.Name == b.Function.Name && a.args.String() == b.args.String()
}

func callsOf(calls []*toolCall) string {
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "{%q %q %q %q}", c.ID, c.Type, c.Function.Name, c.args.String())
	}
	return b.String()
}

// benchIDs and benchLogprobs are shaped as the stub's answer: 350 prompt ids
// from a Qwen-sized vocabulary, and 50 logprobs as Python writes floats
// (shortest round-trip form, mostly 16-17 digits).
func benchIDs() []byte {
	b := []byte{'['}
	for i := range 350 {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(uint32(i*2654435761)%151_000), 10)
	}
	return append(b, ']')
}

func benchLogprobs() [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([][]byte, 50)
	for i := range out {
		out[i] = strconv.AppendFloat(nil, -rng.ExpFloat64()*0.3, 'g', -1, 64)
	}
	return out
}

func BenchmarkInt32s(b *testing.B) {
	in := benchIDs()
	var v []int32
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		s := scanner{b: in}
		if v = s.int32sInto(v); s.err != nil || len(v) != 350 {
			b.Fatal(s.err, len(v))
		}
	}
}

func BenchmarkFloats(b *testing.B) {
	in := benchLogprobs()
	for b.Loop() {
		for _, n := range in {
			if _, ok := atof(n); !ok {
				b.Fatal(string(n))
			}
		}
	}
}
