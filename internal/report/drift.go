package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// driftThresholds are the token differences, in nats, whose exceedance
// shares a drift report lists: rounding noise, a precision's spread, a
// clearly different token, a whole nat.
var driftThresholds = []float64{0.01, 0.1, 0.5, 1}

// Drift summarises a trainer's --drift-report into rep: quantiles per token
// and per sample, shares past each threshold, and suggested limits. It
// checks that the per-sample counts add up to the tokens.
func Drift(t schemas.TrainerDriftReport, rep *schemas.DriftReport) error {
	total := 0
	for i, n := range t.SampleTokens {
		if n < 0 {
			return fmt.Errorf("drift report: sample %d has %d tokens", i, n)
		}
		total += n
	}
	if total != len(t.TokenAbsDiff) {
		return fmt.Errorf("drift report: samples hold %d tokens, %d differences given", total, len(t.TokenAbsDiff))
	}
	for i, d := range t.TokenAbsDiff {
		if d < 0 || math.IsNaN(d) || math.IsInf(d, 0) {
			return fmt.Errorf("drift report: token %d has difference %v", i, d)
		}
	}
	calls := make([]float64, 0, len(t.SampleTokens))
	at := 0
	for _, n := range t.SampleTokens {
		if n == 0 {
			continue
		}
		calls = append(calls, mean(t.TokenAbsDiff[at:at+n]))
		at += n
	}
	rep.Samples, rep.Tokens = len(t.SampleTokens), len(t.TokenAbsDiff)
	rep.Token, rep.Call = quantiles(t.TokenAbsDiff), quantiles(calls)
	rep.TokensOver = map[string]float64{}
	for _, th := range driftThresholds {
		rep.TokensOver[strconv.FormatFloat(th, 'g', -1, 64)] = shareOver(t.TokenAbsDiff, th)
	}
	rep.Suggested = suggest(t.TokenAbsDiff, rep.Token, rep.Call)
	return nil
}

// suggest sets each limit at twice what this batch shows, with floors
// that keep float32 rounding from firing: a limit is meant to catch a
// pipeline that went wrong (another processor, template or weights), which
// moves the figures by far more than a factor of two.
func suggest(tokens []float64, tok, call schemas.Quantiles) schemas.DriftLimits {
	l := schemas.DriftLimits{
		Mean:  max(2*tok.Mean, 1e-3),
		Call:  max(2*call.Max, 1e-3),
		Token: max(2*tok.P999, 1e-2),
	}
	l.TokenShare = max(2*shareOver(tokens, l.Token), 1e-3)
	return l
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// quantiles by the nearest rank on a sorted copy.
func quantiles(v []float64) schemas.Quantiles {
	if len(v) == 0 {
		return schemas.Quantiles{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return schemas.Quantiles{Mean: mean(v), P50: at(0.5), P90: at(0.9), P99: at(0.99), P999: at(0.999), Max: s[len(s)-1]}
}

func shareOver(v []float64, th float64) float64 {
	if len(v) == 0 {
		return 0
	}
	n := 0
	for _, x := range v {
		if x > th {
			n++
		}
	}
	return float64(n) / float64(len(v))
}

// DriftText is a drift report as `starter drift` prints it.
func DriftText(r schemas.DriftReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "drift of run %s round %d: the trainer's logprobs under %s against the model server's, on the round's batch\n",
		r.Run, r.Round, r.WeightsID)
	fmt.Fprintf(&b, "%d samples, %d completion tokens; |log π_old − log π_rollout| in nats:\n\n", r.Samples, r.Tokens)
	fmt.Fprintf(&b, "  %-10s %10s %10s %10s %10s %10s %10s\n", "", "mean", "p50", "p90", "p99", "p99.9", "max")
	for _, row := range []struct {
		name string
		q    schemas.Quantiles
	}{{"per token", r.Token}, {"per call", r.Call}} {
		fmt.Fprintf(&b, "  %-10s %10.3g %10.3g %10.3g %10.3g %10.3g %10.3g\n", row.name, row.q.Mean, row.q.P50, row.q.P90, row.q.P99, row.q.P999, row.q.Max)
	}
	b.WriteString("\n  tokens past")
	for _, th := range driftThresholds {
		k := strconv.FormatFloat(th, 'g', -1, 64)
		fmt.Fprintf(&b, "  %s: %.3g%%", k, 100*r.TokensOver[k])
	}
	b.WriteString("\n\n")
	s := r.Suggested
	fmt.Fprintf(&b, "  %-18s %12s %12s\n", "trainer.hyper", "now", "suggested")
	for _, row := range []struct {
		name string
		v    float64
	}{{"drift_limit", s.Mean}, {"drift_call_limit", s.Call}, {"drift_token_limit", s.Token}, {"drift_token_share", s.TokenShare}} {
		now := r.Current[row.name]
		if now == "" {
			now = "-"
		}
		fmt.Fprintf(&b, "  %-18s %12s %12.3g\n", row.name, now, row.v)
	}
	b.WriteString("\nSuggested limits are twice what this round shows (floors 0.001, 0.01 per token): set them in the harness's\n" +
		"trainer.hyper only from a round you trust, on the model and precision you train with (docs/cluster.md).\n")
	fmt.Fprintf(&b, "report: %s\n", r.Key)
	return b.String()
}
