package proxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner reads JSON in place: values come back as sub-slices of the input,
// nothing is copied. The proxy reads every body once with it instead of
// json.Decoder, json.Valid and json.Unmarshal in turn (those scanned an 8 KB
// answer about six times and were most of the proxy's CPU).
//
// It accepts exactly what json.Valid accepts, so a successful scan is also
// the validation. Errors are sticky: after the first one every method
// returns zero values and next reports false, so callers check err once.
type scanner struct {
	b     []byte
	i     int // next byte to read
	depth int // open arrays and objects
	err   error
}

// maxDepth is encoding/json's nesting limit, so that both reject the same
// input.
const maxDepth = 10000

func (s *scanner) fail(msg string) {
	if s.err == nil {
		s.err = fmt.Errorf("invalid JSON at byte %d: %s", s.i, msg)
	}
	s.i = len(s.b)
}

// peek skips whitespace and returns the next byte, 0 at the end.
func (s *scanner) peek() byte {
	// Compact JSON, as a model server writes it, has no whitespace to skip:
	// one comparison, inlined at every call, before the loop.
	if s.i < len(s.b) && s.b[s.i] > ' ' {
		return s.b[s.i]
	}
	return s.skipSpace()
}

func (s *scanner) skipSpace() byte {
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\n', '\r':
		default:
			return c
		}
	}
	return 0
}

// open consumes c, '{' or '[', and enters that object or array.
func (s *scanner) open(c byte) bool {
	if s.peek() != c {
		s.fail("expected " + string(rune(c)))
		return false
	}
	s.i++
	if s.depth++; s.depth > maxDepth {
		s.fail("nested too deeply")
		return false
	}
	return true
}

// next moves to the next element of the object or array that open entered:
// it consumes the comma before the element, or the closing end ('}' or ']'),
// and reports whether there is an element. first is true on the first call:
//
//	for first := true; s.next('}', first); first = false { ... }
func (s *scanner) next(end byte, first bool) bool {
	if s.err != nil {
		return false
	}
	c := s.peek()
	if c == end {
		s.i++
		s.depth--
		return false
	}
	if !first {
		if c != ',' {
			s.fail("expected , or " + string(rune(end)))
			return false
		}
		s.i++
	}
	return true
}

// key reads an object key and the colon after it. It returns the bytes
// between the quotes; plain reports that they are the key as is (see str).
func (s *scanner) key() (k []byte, plain bool) {
	if s.peek() != '"' {
		s.fail("expected a string key")
		return nil, false
	}
	k, plain = s.str()
	if s.peek() != ':' {
		s.fail("expected :")
		return nil, false
	}
	s.i++
	return k, plain
}

// strPlain marks the bytes that stand for themselves inside a string.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads the string whose opening quote is at s.i and returns the bytes
// between the quotes. plain reports that they are the decoded string as is:
// no escapes, and only ASCII, since encoding/json replaces invalid UTF-8.
func (s *scanner) str() (raw []byte, plain bool) {
	b := s.b
	start := s.i + 1
	plain = true
	for i := start; i < len(b); {
		// Eight bytes at a time to the first one that needs a look: most of
		// a request is message text, and a byte per step was most of its scan.
		if i+8 <= len(b) {
			m := special(binary.LittleEndian.Uint64(b[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) / 8
		} else if strPlain[b[i]] {
			i++
			continue
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return b[start:i], plain
		case c == '\\':
			plain = false
			if i+1 == len(b) {
				i = len(b) // unterminated
				continue
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
				continue
			case 'u':
				if validHex4(b[i+2:]) {
					i += 6
					continue
				}
			}
			s.i = i + 1
			s.fail("invalid escape in string")
			return nil, false
		case c < 0x20:
			s.i = i
			s.fail("control character in string")
			return nil, false
		default: // non-ASCII
			plain = false
			i++
		}
	}
	s.fail("unterminated string")
	return nil, false
}

// special marks, by the high bit of its byte, each of the eight bytes of w
// (little-endian) that str must look at: a quote, a backslash, a control
// character or a non-ASCII byte. The lowest mark is exact; a borrow may also
// mark plain bytes above it, which str never reaches through the mask.
func special(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	zero := func(x uint64) uint64 { return (x - ones) &^ x & highs }
	return (w-0x20*ones)&^w&highs | zero(w^'"'*ones) | zero(w^'\\'*ones) | w&highs
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// num reads a number; isInt reports that it has no fraction or exponent.
func (s *scanner) num() (isInt bool) {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		s.i = i
		s.fail("invalid number")
		return false
	}
	isInt = true
	if i < len(b) && b[i] == '.' {
		isInt = false
		if j := digits(b, i+1); j > i+1 {
			i = j
		} else {
			s.i = j
			s.fail("invalid number")
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		isInt = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if j := digits(b, i); j > i {
			i = j
		} else {
			s.i = j
			s.fail("invalid number")
			return false
		}
	}
	s.i = i
	return isInt
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

func (s *scanner) literal(lit string) {
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return
	}
	s.fail("invalid literal")
}

// at skips whitespace and returns the offset of the next value.
func (s *scanner) at() int {
	s.peek()
	return s.i
}

// value reads one value of any kind and returns its bytes.
func (s *scanner) value() []byte {
	if s.err != nil {
		return nil
	}
	c := s.peek()
	start := s.i
	switch {
	case c == '"':
		s.str()
	case c == '{':
		s.open('{')
		for first := true; s.next('}', first); first = false {
			s.key()
			s.value()
		}
	case c == '[':
		s.open('[')
		for first := true; s.next(']', first); first = false {
			s.value()
		}
	case c == 't':
		s.literal("true")
	case c == 'f':
		s.literal("false")
	case c == 'n':
		s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		s.num()
	default:
		s.fail("expected a value")
	}
	if s.err != nil {
		return nil
	}
	return s.b[start:s.i]
}

// end checks that nothing but whitespace follows and returns the scan's
// error.
func (s *scanner) end() error {
	if s.err == nil {
		if s.peek(); s.i < len(s.b) {
			s.fail("data after the value")
		}
	}
	return s.err
}

// validJSON reports whether b is valid JSON, as json.Valid does.
func validJSON(b []byte) bool {
	s := scanner{b: b}
	s.value()
	return s.end() == nil
}

// null consumes a null and reports whether there was one.
func (s *scanner) null() bool {
	if s.peek() == 'n' {
		s.literal("null")
		return true
	}
	return false
}

// text reads a string value and decodes it as encoding/json does.
func (s *scanner) text() string {
	if s.peek() != '"' {
		s.fail("expected a string")
		return ""
	}
	raw, plain := s.str()
	if plain || s.err != nil {
		return string(raw)
	}
	return unquote(raw)
}

// text is a JSON string value as it stands in the input: the bytes between
// its quotes, and whether they are the decoded string as is (see str).
type text struct {
	raw   []byte
	plain bool
}

// textPiece reads a string value without decoding it, as text would.
func (s *scanner) textPiece() text {
	if s.peek() != '"' {
		s.fail("expected a string")
		return text{}
	}
	raw, plain := s.str()
	return text{raw: raw, plain: plain}
}

func (t text) len() int { return len(t.raw) }

// String decodes t as encoding/json does.
func (t text) String() string {
	if t.plain {
		return string(t.raw)
	}
	return unquote(t.raw)
}

// writeTo appends the decoded string to b, copying raw as it is when it
// is plain.
func (t text) writeTo(b *strings.Builder) {
	if t.plain {
		b.Write(t.raw)
	} else if len(t.raw) > 0 {
		b.WriteString(unquote(t.raw))
	}
}

// unquote decodes the bytes between the quotes of a string that str has
// checked, as encoding/json does: a lone surrogate escape and each byte of
// invalid UTF-8 become U+FFFD.
func unquote(raw []byte) string {
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); {
		switch c := raw[i]; {
		case c == '\\':
			e := raw[i+1]
			i += 2
			switch e {
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r := hex4(raw[i:])
				i += 4
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if len(raw)-i >= 6 && raw[i] == '\\' && raw[i+1] == 'u' && validHex4(raw[i+2:]) {
						r2 = hex4(raw[i+2:])
					}
					if d := utf16.DecodeRune(r, r2); d != unicode.ReplacementChar {
						r = d
						i += 6
					} else {
						r = unicode.ReplacementChar
					}
				}
				b.WriteRune(r)
			default: // " \ /
				b.WriteByte(e)
			}
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			b.WriteRune(r)
			i += size
		}
	}
	return b.String()
}

func validHex4(b []byte) bool {
	return len(b) >= 4 && isHex(b[0]) && isHex(b[1]) && isHex(b[2]) && isHex(b[3])
}

// hex4 decodes four hex digits that validHex4 accepts.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// integer reads a number into a signed integer of the given bit size, with
// the rules of json.Unmarshal for integer fields: no fraction or exponent,
// and within range.
func (s *scanner) integer(bits int) int64 {
	start := s.at()
	if !s.num() {
		s.fail("not an integer")
	}
	if s.err != nil {
		return 0
	}
	d := s.b[start:s.i]
	neg := d[0] == '-'
	if neg {
		d = d[1:]
	}
	limit := uint64(1) << (bits - 1) // -limit is the smallest value, limit-1 the largest
	var v uint64
	if len(d) > 19 { // no leading zeros in JSON, so more digits are out of any int64 range
		v = limit
	} else {
		for _, c := range d {
			v = v*10 + uint64(c-'0')
		}
	}
	if v > limit || v == limit && !neg {
		s.fail("integer out of range")
		return 0
	}
	if neg {
		return -int64(v)
	}
	return int64(v)
}

// int32s reads an array of int32, as json.Unmarshal does into a []int32
// (an empty array is an empty, non-nil slice). A null element is left to
// encoding/json.
func (s *scanner) int32s() []int32 { return s.int32sInto(nil) }

// int32sInto is int32s into v's memory when it has room.
func (s *scanner) int32sInto(v []int32) []int32 {
	if !s.open('[') {
		return nil
	}
	// Size the slice in one go: the array holds only numbers, so its
	// elements are one more than its commas up to the first ']'.
	n := 0
	if end := bytes.IndexByte(s.b[s.i:], ']'); end > 0 {
		n = bytes.Count(s.b[s.i:s.i+end], []byte{','}) + 1
	}
	if v == nil || cap(v) < n {
		v = make([]int32, 0, n)
	}
	v = v[:0]
	first := true
	// Fast path for what vLLM sends, compact ids of up to 9 digits (so
	// within int32): parse "12,345,6]" in one loop. At anything else the
	// general loop below takes over from the last comma.
	b := s.b
	for i := s.i; i < len(b); i++ {
		start := i
		var u uint32
		for ; i < len(b); i++ {
			d := b[i] - '0' // wraps for bytes below '0'
			if d > 9 {
				break
			}
			u = u*10 + uint32(d)
		}
		if n := i - start; n == 0 || n > 9 || i == len(b) || b[start] == '0' && n > 1 || b[i] != ',' && b[i] != ']' {
			break
		}
		v = append(v, int32(u))
		s.i, first = i, false
		if b[i] == ']' {
			break
		}
	}
	for ; s.next(']', first); first = false {
		v = append(v, int32(s.integer(32)))
	}
	return v
}

// float reads a number as json.Unmarshal does into a float64.
func (s *scanner) float() float64 {
	start := s.at()
	s.num()
	if s.err != nil {
		return 0
	}
	f, ok := atof(s.b[start:s.i])
	if !ok {
		s.fail("number out of range")
	}
	return f
}
