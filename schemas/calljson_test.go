package schemas

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
)

// fill sets every field of v, however deeply embedded, to a random value,
// so that a field AppendJSON does not write shows up as a difference.
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
		v.SetString(randString(rng))
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int32, reflect.Int64:
		n := rng.Int64() >> rng.IntN(64)
		if rng.IntN(2) == 0 {
			n = -n
		}
		v.SetInt(n >> (64 - v.Type().Bits()) << (64 - v.Type().Bits()) >> (64 - v.Type().Bits()))
	case reflect.Float32, reflect.Float64:
		f := rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
		v.SetFloat(f)
	default:
		panic("fill: add a case for " + v.Kind().String())
	}
}

// randString mixes what appendString escapes with text it copies.
func randString(rng *rand.Rand) string {
	pieces := []string{"", "a", "plain text here ", `"`, `\`, "\n", "\t", "\r", "\x00", "\x1f", "é", "😀",
		"\xff", "\xed\xa0\x80", "<&>", "\u2028", `{"role": "user", "content": "put the cup"}`, "0123456789abcdef"}
	var b []byte
	for range rng.IntN(12) {
		b = append(b, pieces[rng.IntN(len(pieces))]...)
	}
	return string(b)
}

func TestCallAppendJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 2000 {
		var c Call
		fill(rng, reflect.ValueOf(&c).Elem())
		got := c.AppendJSON([]byte("prefix"))[len("prefix"):]
		if !json.Valid(got) {
			t.Fatalf("record %d: not valid JSON: %s", i, got)
		}
		var fromAppend, fromMarshal Call
		if err := json.Unmarshal(got, &fromAppend); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		ref, err := json.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(ref, &fromMarshal); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fromAppend, fromMarshal) {
			t.Fatalf("record %d reads back differently:\nAppendJSON  %s\njson.Marshal %s", i, got, ref)
		}
	}
}

// A float that is not finite is written as null (json.Marshal fails).
func TestCallAppendJSONNotFinite(t *testing.T) {
	c := Call{LatencyMS: math.NaN(), CompletionLogprobs: []float32{float32(math.Inf(-1)), -0.5}}
	var back Call
	if err := json.Unmarshal(c.AppendJSON(nil), &back); err != nil {
		t.Fatal(err)
	}
	if back.LatencyMS != 0 || len(back.CompletionLogprobs) != 2 || back.CompletionLogprobs[1] != -0.5 {
		t.Errorf("read back %+v", back)
	}
}

func TestAppendInt32(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int32{0, 9, 10, 99, 100, 101, 999, 1000, -1, -10, -100, math.MaxInt32, math.MinInt32} {
		if got, want := string(appendInt32(nil, n)), strconv.Itoa(int(n)); got != want {
			t.Errorf("appendInt32(%d) = %s", n, got)
		}
	}
	for range 100000 {
		n := int32(rng.Uint32() >> rng.IntN(32))
		if got, want := string(appendInt32(nil, n)), strconv.Itoa(int(n)); got != want {
			t.Fatalf("appendInt32(%d) = %s", n, got)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "0123456789abcdef\"", "\xff\xfe", "a\u2028b", "\x00\x01 tab\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := appendString(nil, s)
		var back, want string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("appendString(%q) = %s: %v", s, got, err)
		}
		ref, _ := json.Marshal(s)
		if err := json.Unmarshal(ref, &want); err != nil {
			t.Fatal(err)
		}
		if back != want {
			t.Fatalf("appendString(%q) reads back %q, json.Marshal's %q", s, back, want)
		}
	})
}

func BenchmarkCallAppendJSON(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := Call{Run: "r", Round: 1, Phase: "collect", EpisodeID: "e", Model: "toy", FinishReason: "tool_calls",
		ToolCalls: `[{"id":"x","type":"function","function":{"name":"computer","arguments":"{\"action\": \"click\"}"}}]`}
	for range 40 {
		c.Request += `{"role": "user", "content": "put the red cup into the top drawer"}, `
	}
	for range 350 {
		c.PromptTokenIDs = append(c.PromptTokenIDs, rng.Int32N(151000))
	}
	for range 50 {
		c.CompletionTokenIDs = append(c.CompletionTokenIDs, rng.Int32N(151000))
		c.CompletionLogprobs = append(c.CompletionLogprobs, float32(-rng.ExpFloat64()*0.3))
	}
	b.Run("AppendJSON", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf = c.AppendJSON(buf[:0])
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(&c)
		}
	})
}
