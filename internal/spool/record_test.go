package spool

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// fill sets every field of v, however deeply embedded, to a random value,
// so that a field the record does not keep shows up as a difference.
func fill(rng *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fill(rng, v.Field(i))
		}
	case reflect.Pointer:
		if rng.IntN(4) == 0 {
			v.SetZero()
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fill(rng, v.Elem())
	case reflect.Slice:
		switch rng.IntN(5) {
		case 0:
			v.SetZero()
			return
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		n := 1 + rng.IntN(40)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range s.Len() {
			fill(rng, s.Index(i))
		}
		v.Set(s)
	case reflect.String:
		pieces := []string{"", "a", "plain text ", `"`, "\n", "\x00", "é", "\xff", `{"role": "user"}`}
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		v.SetString(b.String())
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int32, reflect.Int64:
		bits := v.Type().Bits()
		n := int64(rng.Uint64()) >> (64 - bits) >> rng.IntN(bits)
		v.SetInt(n)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20)))
	default:
		panic("fill: add a case for " + v.Kind().String())
	}
}

// Every field of Call, nil and empty lists apart, comes back as it went in.
func TestRecordRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 2000 {
		var c schemas.Call
		fill(rng, reflect.ValueOf(&c).Elem())
		b := appendCall([]byte("prefix"), &c)
		got, err := readCall(b[len("prefix"):])
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("record %d reads back differently:\nwrote %+v\nread  %+v", i, c, got)
		}
	}
}

// A record cut anywhere, or followed by bytes, is an error, never a call.
func TestRecordCut(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	var c schemas.Call
	fill(rng, reflect.ValueOf(&c).Elem())
	c.PromptTokenIDs = []int32{1, 2, 3}
	b := appendCall(nil, &c)
	for n := range len(b) {
		if _, err := readCall(b[:n]); err == nil {
			t.Fatalf("a record cut to %d of %d bytes read without error", n, len(b))
		}
	}
	if _, err := readCall(append(b, 0)); err == nil {
		t.Fatal("a record with a byte after it read without error")
	}
}

func FuzzReadCall(f *testing.F) {
	c := schemas.Call{Run: "r", Request: "{}", PromptTokenIDs: []int32{5, 6}, CompletionLogprobs: []float32{-0.5}}
	f.Add(appendCall(nil, &c))
	f.Add([]byte{recordVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := readCall(b)
		if err != nil {
			return
		}
		// What reads is a record: written again, it is the same bytes.
		if again := appendCall(nil, &c); string(again) != string(b) {
			t.Fatalf("read %x, which writes back as %x", b, again)
		}
	})
}

// plannerCall is a call of the size a planner makes: a 2.5 KB request,
// 350 prompt and 50 completion token ids with their logprobs.
func plannerCall() schemas.Call {
	rng := rand.New(rand.NewPCG(1, 2))
	c := schemas.Call{Run: "bench", Round: 1, Phase: "rollout", Model: "toy", FinishReason: "tool_calls",
		Request:   strings.Repeat(`{"role": "user", "content": "put the red cup into the top drawer"}, `, 40),
		ToolCalls: `[{"id":"x","type":"function","function":{"name":"computer","arguments":"{\"action\": \"click\"}"}}]`}
	for range 350 {
		c.PromptTokenIDs = append(c.PromptTokenIDs, rng.Int32N(151000))
	}
	for range 50 {
		c.CompletionTokenIDs = append(c.CompletionTokenIDs, rng.Int32N(151000))
		c.CompletionLogprobs = append(c.CompletionLogprobs, float32(-rng.ExpFloat64()*0.3))
	}
	return c
}

// BenchmarkRecord compares the spool's record with the JSON line it
// replaced (json.Marshal; a reflection-free JSON writer took 8 µs).
func BenchmarkRecord(b *testing.B) {
	c := plannerCall()
	b.Run("append", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf = appendCall(buf[:0], &c)
		}
		b.ReportMetric(float64(len(buf)), "B/record")
	})
	b.Run("read", func(b *testing.B) {
		buf := appendCall(nil, &c)
		for b.Loop() {
			if _, err := readCall(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf, _ = json.Marshal(&c)
		}
		b.ReportMetric(float64(len(buf)), "B/record")
	})
}
