// Package stats holds the small statistics Roundhouse's reports print: a
// success rate's 95 % Wilson score interval, and whether two overlap.
// Hand-written: it is one formula, not worth a dependency.
package stats

import (
	"fmt"
	"math"
)

// z95 is the standard normal quantile of 0.975 (a two-sided 95 % interval).
const z95 = 1.959963984540054

// Interval is a success rate's confidence interval, as fractions in [0, 1].
type Interval struct{ Lo, Hi float64 }

// Wilson is the 95 % Wilson score interval of successes out of n. Unlike
// the normal approximation it stays inside [0, 1] and is sensible at 0/n
// and n/n. With n ≤ 0 nothing is known: [0, 1].
func Wilson(successes, n int) Interval {
	if n <= 0 {
		return Interval{0, 1}
	}
	s := min(max(successes, 0), n)
	nf := float64(n)
	p := float64(s) / nf
	z2 := z95 * z95
	denom := 1 + z2/nf
	center := (p + z2/(2*nf)) / denom
	half := z95 / denom * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))
	return Interval{Lo: max(0, center-half), Hi: min(1, center+half)}
}

// Overlaps says the two intervals share a point: their rates differ by
// less than the evidence can tell apart.
func (a Interval) Overlaps(b Interval) bool { return a.Lo <= b.Hi && b.Lo <= a.Hi }

// Rate formats successes out of n as "63.3% [45–79]": the rate and its
// 95 % Wilson interval in whole percent, rounded outwards so the printed
// interval is never narrower than the true one. n ≤ 0 gives "–".
func Rate(successes, n int) string {
	if n <= 0 {
		return "–"
	}
	iv := Wilson(successes, n)
	return fmt.Sprintf("%.1f%% [%s–%s]", 100*float64(successes)/float64(n), pct(math.Floor, iv.Lo), pct(math.Ceil, iv.Hi))
}

// pct rounds a fraction to whole percent; the small slack keeps float
// noise (0.5 → 50.000000001) from rounding a bound outwards by a point.
func pct(round func(float64) float64, f float64) string {
	v := 100 * f
	if math.Abs(v-math.Round(v)) < 1e-9 {
		v = math.Round(v)
	}
	return fmt.Sprintf("%.0f", round(v))
}
