package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// Fields renamed in Go keep the JSON names that running workflows and
// recorded histories carry (design §2, Names): a payload written before
// the rename decodes into the new field, and a new one reads as the old.
func TestWeightsIDKeepsWireNames(t *testing.T) {
	old := `{"Run":"demo","InitialWeights":"w0","Weights":"r2"}`
	var in TrainInput
	if err := json.Unmarshal([]byte(old), &in); err != nil {
		t.Fatal(err)
	}
	if in.InitialWeightsID != "w0" || in.WeightsID != "r2" {
		t.Errorf("decoded %+v from %s: want InitialWeightsID w0, WeightsID r2", in, old)
	}
	for _, c := range []struct {
		v    any
		keys []string
	}{
		{TrainInput{InitialWeightsID: "w0", WeightsID: "r2"}, []string{`"InitialWeights":"w0"`, `"Weights":"r2"`}},
		{TrainResult{FinalWeightsID: "r3"}, []string{`"FinalWeights":"r3"`}},
		{Progress{WeightsID: "r1"}, []string{`"Weights":"r1"`}},
		{EpisodesInput{WeightsID: "r1"}, []string{`"Weights":"r1"`}},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range c.keys {
			if !strings.Contains(string(b), k) {
				t.Errorf("%T encodes as %s: want %s", c.v, b, k)
			}
		}
	}
}
