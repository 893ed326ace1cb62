package runs

import "testing"

func TestPartition(t *testing.T) {
	for key, want := range map[string]struct {
		round int32
		phase string
		ok    bool
	}{
		"round=3/phase=val/part-00000.parquet":            {3, "val", true},
		"round=12/phase=train/r12-train-g001-a00.parquet": {12, "train", true},
		"round=x/phase=val/a.parquet":                     {0, "", false},
		"phase=val/round=1/a.parquet":                     {0, "", false},
		"round=1/a.parquet":                               {0, "", false},
	} {
		r, p, ok := partition(key)
		if r != want.round || p != want.phase || ok != want.ok {
			t.Errorf("partition(%q) = %d %q %v, want %+v", key, r, p, ok, want)
		}
	}
}
