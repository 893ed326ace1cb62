package schemas

import "testing"

func TestTagPhase(t *testing.T) {
	for _, r := range []int32{0, 1, 12} {
		if tag := ValTag(r); !IsValTag(tag) || TagPhase(tag) != PhaseVal {
			t.Errorf("ValTag(%d) = %s: IsValTag %v, phase %q; want a validation tag, phase val", r, tag, IsValTag(tag), TagPhase(tag))
		}
	}
	for tag, want := range map[string]string{
		"val-r3":     PhaseVal,
		"val-r10":    PhaseVal,
		"sft_val":    "eval-sft_val",
		"final":      "eval-final",
		"val-r":      "eval-val-r",      // no round
		"val-rc":     "eval-val-rc",     // an evaluation may be named so: not a round
		"val-r3b":    "eval-val-r3b",    // a round must end the tag
		"xval-r3":    "eval-xval-r3",    // and start it
		"val-3":      "eval-val-3",      // the r is part of the shape
		"cmp-r2-val": "eval-cmp-r2-val", // a compare tag of a split called val
		"sweep-n-r1": "eval-sweep-n-r1",
	} {
		if got := TagPhase(tag); got != want {
			t.Errorf("TagPhase(%q) = %q, want %q", tag, got, want)
		}
		if IsValTag(tag) != (want == PhaseVal) {
			t.Errorf("IsValTag(%q) = %v, want %v", tag, IsValTag(tag), want == PhaseVal)
		}
	}
}
