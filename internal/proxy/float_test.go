package proxy

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// checkAtof compares atof with strconv.ParseFloat, bit for bit, on a number
// as JSON writes it.
func checkAtof(t *testing.T, in string) {
	t.Helper()
	s := scanner{b: []byte(in)}
	if s.num(); s.end() != nil {
		t.Fatalf("test input %q is not a JSON number", in)
	}
	want, err := strconv.ParseFloat(in, 64)
	got, ok := atof([]byte(in))
	if ok != (err == nil) || ok && math.Float64bits(got) != math.Float64bits(want) {
		t.Errorf("atof(%s) = %v (%#x), %v; strconv: %v (%#x), %v", in, got, math.Float64bits(got), ok,
			want, math.Float64bits(want), err)
	}
}

func TestAtof(t *testing.T) {
	for _, in := range []string{
		"0", "-0", "0.0", "-0.0", "0e5", "-0E-5", "1", "-1", "9999", "-9999.0", "0.5", "-0.25", "1e22", "1e23",
		"-2.3841855067985307e-07", "-0.6931471824645996", "-1.401298464324817e-45", "-1e-400", "1e309",
		"9007199254740993", "9007199254740992.5", "18446744073709551615", "18446744073709551616",
		"1234567890123456789", "12345678901234567890", "0.00000000000000000000001234567890123456789",
		"1.7976931348623157e308", "2.2250738585072014e-308", "4.9406564584124654e-324", "1e-61", "1e-96",
		"1e-97", "1e32", "1e33", "123456789e-105", "1e+0", "1E-0", "1e00001", "100000000000000000000e-20",
		"-0.000099999999999999991", "0.1", "0.2", "0.3", "1.5e-5", "2.5", "3.5", "-4.5e-1",
	} {
		checkAtof(t, in)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200_000 {
		// Logprobs as Python writes them, and as a float32 model writes them.
		x := -rng.ExpFloat64() * math.Pow(10, float64(rng.IntN(8)-4))
		checkAtof(t, strconv.FormatFloat(x, 'g', -1, 64))
		checkAtof(t, strconv.FormatFloat(float64(float32(x)), 'g', -1, 64))
		// Any float64, in each of JSON's forms, shortest and not.
		y := math.Float64frombits(rng.Uint64())
		if math.IsNaN(y) || math.IsInf(y, 0) {
			continue
		}
		checkAtof(t, strconv.FormatFloat(y, 'e', -1, 64))
		checkAtof(t, strconv.FormatFloat(y, 'e', rng.IntN(20), 64))
		// Digits and exponents at random, near halfway cases most of all:
		// a float64 in its exact decimal form, cut or nudged.
		d := strconv.FormatFloat(x, 'e', 25, 64)
		checkAtof(t, d[:4+rng.IntN(20)]+d[28:])
		checkAtof(t, strconv.FormatUint(rng.Uint64N(1<<rng.IntN(64)+1), 10)+"e"+strconv.Itoa(rng.IntN(140)-110))
	}
	// Every power of ten the table holds, and either side of it.
	for q := minPow10 - 2; q <= maxPow10+2; q++ {
		for _, m := range []string{"1", "9", "5", "4999999999999999999", "1844674407370955161"} {
			checkAtof(t, m+"e"+strconv.Itoa(q))
		}
	}
}

func FuzzAtof(f *testing.F) {
	f.Add(uint64(6931471824645996), int16(-16), false)
	f.Add(uint64(9007199254740993), int16(0), true)
	f.Fuzz(func(t *testing.T, man uint64, exp int16, neg bool) {
		sign := ""
		if neg {
			sign = "-"
		}
		digits, e := strconv.FormatUint(man, 10), "e"+strconv.Itoa(int(exp))
		checkAtof(t, sign+digits+e)
		if len(digits) > 1 { // the same digits with a point in them
			checkAtof(t, sign+digits[:1]+"."+digits[1:]+e)
		}
	})
}

// The table and the method take nearly every logprob themselves: strconv
// is for what they cannot settle, not a path that hides their mistakes.
func TestAtofTakesLogprobs(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 10_000
	took := 0
	for range n {
		in := strconv.FormatFloat(-rng.ExpFloat64()*0.3, 'g', -1, 64)
		man, exp10, neg, ok := decimal([]byte(in))
		if !ok {
			t.Fatalf("decimal(%s) gave up", in)
		}
		if _, ok := eiselLemire(man, exp10, neg); ok {
			took++
		}
	}
	if took < n*999/1000 {
		t.Errorf("the Eisel-Lemire method settled %d of %d logprobs; it should settle all but a few", took, n)
	}
	// Numbers that are exactly a float64: 5^k×10^-k is 2^-k. The table's
	// negative powers are rounded up so that these come out exact, not
	// just short of it, which the method could not settle.
	five := uint64(1)
	for k := 1; k <= 27; k++ {
		five *= 5
		f, ok := eiselLemire(five, -k, false)
		if want := math.Ldexp(1, -k); !ok || f != want {
			t.Errorf("eiselLemire(%de-%d) = %v, %v; want %v, settled", five, k, f, ok, want)
		}
	}
	for _, in := range []string{"0.5", "-0.25", "-9999.0", "-0.125", "3.0", "-1.5"} {
		man, exp10, neg, _ := decimal([]byte(in))
		if f, ok := eiselLemire(man, exp10, neg); !ok || strconv.FormatFloat(f, 'g', -1, 64) != strings.TrimSuffix(in, ".0") {
			t.Errorf("eiselLemire(%s) = %v, %v; want it settled, exactly", in, f, ok)
		}
	}
}
