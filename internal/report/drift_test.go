package report

import (
	"math"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// A batch of 1,000 tokens in 4 calls: 3 wrong decision tokens (1 nat off)
// in one call among near-exact ones, the case the mean alone misses.
func TestDriftSummary(t *testing.T) {
	var tr schemas.TrainerDriftReport
	for i := range 1000 {
		d := 1e-4
		if i == 10 || i == 20 || i == 30 {
			d = 1
		}
		tr.TokenAbsDiff = append(tr.TokenAbsDiff, d)
	}
	tr.SampleTokens = []int{100, 300, 0, 600}
	var rep schemas.DriftReport
	if err := Drift(tr, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Samples != 4 || rep.Tokens != 1000 {
		t.Errorf("samples %d tokens %d", rep.Samples, rep.Tokens)
	}
	wantMean := (3 + 997*1e-4) / 1000
	if math.Abs(rep.Token.Mean-wantMean) > 1e-12 || rep.Token.P50 != 1e-4 || rep.Token.P99 != 1e-4 || rep.Token.P999 != 1 || rep.Token.Max != 1 {
		t.Errorf("token quantiles %+v, want mean %v, p99 1e-4, p99.9 and max 1", rep.Token, wantMean)
	}
	// The empty call has no mean; the first call's holds all three.
	if want := (3 + 97*1e-4) / 100; math.Abs(rep.Call.Max-want) > 1e-12 || math.Abs(rep.Call.P50-1e-4) > 1e-12 {
		t.Errorf("call quantiles %+v, want max %v", rep.Call, want)
	}
	if rep.TokensOver["0.5"] != 0.003 || rep.TokensOver["0.01"] != 0.003 || rep.TokensOver["1"] != 0 {
		t.Errorf("shares %v", rep.TokensOver)
	}
	s := rep.Suggested
	if math.Abs(s.Mean-2*wantMean) > 1e-12 || math.Abs(s.Call-2*rep.Call.Max) > 1e-12 || s.Token != 2 || s.TokenShare != 1e-3 {
		t.Errorf("suggested %+v", s)
	}
	rep.Key, rep.Current = "runs/x/drift/round=1/drift.json", map[string]string{"drift_limit": "0.05"}
	text := DriftText(rep)
	for _, want := range []string{"1000 completion tokens", "per call", "drift_limit", "0.05", "0.5: 0.3%", rep.Key} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}

func TestDriftRefusesInconsistentReports(t *testing.T) {
	for _, c := range []struct {
		name string
		r    schemas.TrainerDriftReport
		want string
	}{
		{"counts", schemas.TrainerDriftReport{TokenAbsDiff: []float64{0, 0}, SampleTokens: []int{3}}, "samples hold 3 tokens, 2 differences"},
		{"negative", schemas.TrainerDriftReport{TokenAbsDiff: []float64{-1}, SampleTokens: []int{1}}, "token 0 has difference -1"},
		{"nan", schemas.TrainerDriftReport{TokenAbsDiff: []float64{math.NaN()}, SampleTokens: []int{1}}, "token 0 has difference NaN"},
	} {
		var rep schemas.DriftReport
		if err := Drift(c.r, &rep); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
