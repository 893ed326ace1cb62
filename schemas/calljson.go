package schemas

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends c as a JSON object, as json.Marshal writes it but
// without reflection: the rollout worker spools every call this way
// (internal/spool), and json.Marshal took 17–20 µs a planner call, most of
// the proxy's cost per call. json.Unmarshal reads it back into the same
// Call (TestCallAppendJSON fills every field, so a field added to Call and
// not here fails it). Unlike json.Marshal it does not escape <, > and &,
// and writes null for a float that is not finite instead of failing.
func (c *Call) AppendJSON(b []byte) []byte {
	b = append(b, `{"run":`...)
	b = appendString(b, c.Run)
	b = append(b, `,"round":`...)
	b = strconv.AppendInt(b, int64(c.Round), 10)
	b = append(b, `,"phase":`...)
	b = appendString(b, c.Phase)
	b = append(b, `,"episode_id":`...)
	b = appendString(b, c.EpisodeID)
	b = append(b, `,"group":`...)
	b = strconv.AppendInt(b, int64(c.Group), 10)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(c.Attempt), 10)
	b = append(b, `,"retry":`...)
	b = strconv.AppendInt(b, int64(c.Retry), 10)
	b = append(b, `,"call_index":`...)
	b = strconv.AppendInt(b, int64(c.CallIndex), 10)
	b = append(b, `,"weights_id":`...)
	b = appendString(b, c.WeightsID)
	b = append(b, `,"model":`...)
	b = appendString(b, c.Model)
	b = append(b, `,"started_at_ms":`...)
	b = strconv.AppendInt(b, c.StartedAtMS, 10)
	b = append(b, `,"latency_ms":`...)
	b = appendFloat(b, c.LatencyMS, 64)
	b = append(b, `,"http_status":`...)
	b = strconv.AppendInt(b, int64(c.HTTPStatus), 10)
	b = append(b, `,"error":`...)
	b = appendString(b, c.Error)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, c.Stream)
	b = append(b, `,"request":`...)
	b = appendString(b, c.Request)
	if c.Seed != nil {
		b = append(b, `,"seed":`...)
		b = strconv.AppendInt(b, *c.Seed, 10)
	}
	if c.SeedInjected {
		b = append(b, `,"seed_injected":true`...)
	}
	b = append(b, `,"images":`...)
	b = appendStrings(b, c.Images)
	b = append(b, `,"prompt_token_ids":`...)
	b = appendInt32s(b, c.PromptTokenIDs)
	b = append(b, `,"completion_token_ids":`...)
	b = appendInt32s(b, c.CompletionTokenIDs)
	b = append(b, `,"completion_logprobs":`...)
	if c.CompletionLogprobs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, f := range c.CompletionLogprobs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendFloat(b, float64(f), 32)
		}
		b = append(b, ']')
	}
	b = append(b, `,"finish_reason":`...)
	b = appendString(b, c.FinishReason)
	b = append(b, `,"tool_calls":`...)
	b = appendString(b, c.ToolCalls)
	b = append(b, `,"content":`...)
	b = appendString(b, c.Content)
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(c.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(c.CompletionTokens), 10)
	s := &c.Sampling
	b = append(b, `,"temperature":`...)
	b = appendFloat(b, s.Temperature, 64)
	b = append(b, `,"top_p":`...)
	b = appendFloat(b, s.TopP, 64)
	b = append(b, `,"top_k":`...)
	b = strconv.AppendInt(b, int64(s.TopK), 10)
	b = append(b, `,"min_p":`...)
	b = appendFloat(b, s.MinP, 64)
	b = append(b, `,"repetition_penalty":`...)
	b = appendFloat(b, s.RepetitionPenalty, 64)
	b = append(b, `,"presence_penalty":`...)
	b = appendFloat(b, s.PresencePenalty, 64)
	b = append(b, `,"frequency_penalty":`...)
	b = appendFloat(b, s.FrequencyPenalty, 64)
	b = append(b, `,"sampling_defaulted":`...)
	b = appendStrings(b, s.Defaulted)
	b = append(b, `,"sampling_constraints":`...)
	b = appendStrings(b, s.Constraints)
	b = append(b, `,"logprobs_mode":`...)
	b = appendString(b, s.LogprobsMode)
	b = append(b, `,"trainable":`...)
	b = strconv.AppendBool(b, c.Trainable)
	if c.UntrainableReason != "" {
		b = append(b, `,"untrainable_reason":`...)
		b = appendString(b, c.UntrainableReason)
	}
	return append(b, '}')
}

func appendInt32s(b []byte, v []int32) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, n := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendInt32(b, n)
	}
	return append(b, ']')
}

// appendInt32 is strconv.AppendInt for an int32, two digits a step into a
// stack buffer: a call's few hundred token ids through strconv were half
// of AppendJSON's time.
func appendInt32(b []byte, n int32) []byte {
	u := uint32(n)
	if n < 0 {
		b = append(b, '-')
		u = uint32(-int64(n))
	}
	var buf [10]byte
	i := len(buf)
	for u >= 100 {
		q := u / 100
		d := (u - q*100) * 2
		i -= 2
		buf[i], buf[i+1] = twoDigits[d], twoDigits[d+1]
		u = q
	}
	if u >= 10 {
		i -= 2
		buf[i], buf[i+1] = twoDigits[u*2], twoDigits[u*2+1]
	} else {
		i--
		buf[i] = byte('0' + u)
	}
	return append(b, buf[i:]...)
}

const twoDigits = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

func appendStrings(b []byte, v []string) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendFloat writes the shortest text that reads back as f at its size.
func appendFloat(b []byte, f float64, size int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, size)
}

// appendString writes s as a JSON string. Runs of bytes that need no escape
// are copied whole, found eight at a time: a request is kilobytes of JSON
// whose quotes are the only bytes to escape. Invalid UTF-8 becomes U+FFFD,
// as json.Marshal writes it.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) {
			if m := needsEscape(binary.LittleEndian.Uint64([]byte(s[i : i+8]))); m == 0 {
				i += 8
				continue
			} else {
				i += bits.TrailingZeros64(m) / 8
			}
		}
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
			i++
		case c == '\n':
			b = append(b, `\n`...)
			i++
		case c == '\r':
			b = append(b, `\r`...)
			i++
		case c == '\t':
			b = append(b, `\t`...)
			i++
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
			i++
		default: // non-ASCII: kept if valid UTF-8
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
		}
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// needsEscape marks, by the high bit of its byte, each of the eight bytes
// of w (little-endian) that appendString must look at: a quote, a
// backslash, a control character or a non-ASCII byte. The lowest mark is
// exact; a borrow may also mark bytes above it.
func needsEscape(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	zero := func(x uint64) uint64 { return (x - ones) &^ x & highs }
	return (w-0x20*ones)&^w&highs | zero(w^'"'*ones) | zero(w^'\\'*ones) | w&highs
}
