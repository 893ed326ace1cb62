package activities

import (
	"encoding/json"
	"testing"
)

// TrainInput's weights ids keep the JSON names recorded histories carry
// (WeightsIn, WeightsOut) under their one Go name (design §2, Names).
func TestTrainInputKeepsWireNames(t *testing.T) {
	var in TrainInput
	if err := json.Unmarshal([]byte(`{"Run":"demo","Round":2,"WeightsIn":"r1","WeightsOut":"r2"}`), &in); err != nil {
		t.Fatal(err)
	}
	if in.WeightsID != "r1" || in.NewWeightsID != "r2" {
		t.Errorf("decoded WeightsID %q, NewWeightsID %q: want r1, r2", in.WeightsID, in.NewWeightsID)
	}
}
