package stats

import (
	"math"
	"testing"
)

func TestWilson(t *testing.T) {
	// Known values: Wilson score interval, z = 1.96 (e.g. R's
	// binom::binom.wilson, or prop.test without continuity correction).
	for _, c := range []struct {
		s, n   int
		lo, hi float64
	}{
		{19, 30, 0.4552, 0.7813},
		{0, 10, 0, 0.2775},
		{10, 10, 0.7225, 1},
		{50, 100, 0.4038, 0.5962},
		{1, 1, 0.2065, 1},
		{9, 30, 0.1666, 0.4788},
	} {
		iv := Wilson(c.s, c.n)
		if math.Abs(iv.Lo-c.lo) > 5e-4 || math.Abs(iv.Hi-c.hi) > 5e-4 {
			t.Errorf("Wilson(%d, %d) = [%.4f, %.4f], want [%.4f, %.4f]", c.s, c.n, iv.Lo, iv.Hi, c.lo, c.hi)
		}
	}
	if iv := Wilson(0, 0); iv != (Interval{0, 1}) {
		t.Errorf("Wilson(0, 0) = %v, want [0, 1]: nothing is known", iv)
	}
}

func TestRate(t *testing.T) {
	for _, c := range []struct {
		s, n int
		want string
	}{
		{19, 30, "63.3% [45–79]"},
		{0, 10, "0.0% [0–28]"},
		{10, 10, "100.0% [72–100]"},
		{50, 100, "50.0% [40–60]"},
		{0, 0, "–"},
	} {
		if got := Rate(c.s, c.n); got != c.want {
			t.Errorf("Rate(%d, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

func TestOverlaps(t *testing.T) {
	a, b := Wilson(19, 30), Wilson(14, 30) // 63 % and 47 % of 30: noise
	if !a.Overlaps(b) || !b.Overlaps(a) {
		t.Errorf("%v and %v should overlap", a, b)
	}
	c, d := Wilson(90, 100), Wilson(40, 100) // far apart with 100 each
	if c.Overlaps(d) || d.Overlaps(c) {
		t.Errorf("%v and %v should not overlap", c, d)
	}
	if !(Interval{0.2, 0.4}).Overlaps(Interval{0.4, 0.6}) {
		t.Error("intervals touching at one point overlap")
	}
}
