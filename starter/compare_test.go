package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/runs"
)

func TestCheckCompareFlags(t *testing.T) {
	tags := compareFlags{run: "demo", a: "val-r1", b: "val-r3", initKey: valKey}
	ws := compareFlags{run: "demo", weightsA: "w0", weightsB: "r2", config: "h.yaml", initKey: valKey}
	for _, c := range []struct {
		f       compareFlags
		changed []string
		want    string // in the error; "" for none
	}{
		{tags, nil, ""},
		{ws, nil, ""},
		{func() compareFlags { f := ws; f.initKey, f.chart = finalKey, "c.png"; return f }(), []string{"init-key"}, ""},
		{func() compareFlags { f := tags; f.weightsA = "w0"; return f }(), nil, "--a/--b with --weights-a/--weights-b"},
		{compareFlags{run: "demo", initKey: valKey}, nil, "nothing to compare in run demo: name two report tags (--a val-r1 --b val-r3) or two weights"},
		{func() compareFlags { f := tags; f.b = ""; return f }(), nil, "name two different report tags of run demo"},
		{func() compareFlags { f := tags; f.b = "val-r1"; return f }(), nil, `--a "val-r1" --b "val-r1"`},
		{tags, []string{"config"}, "--config goes with --weights-a/--weights-b"},
		{tags, []string{"init-key"}, "--init-key goes with --weights-a/--weights-b"},
		{func() compareFlags { f := ws; f.weightsB = ""; return f }(), nil, `--weights-a "w0" --weights-b ""`},
		{func() compareFlags { f := ws; f.weightsB = "w0"; return f }(), nil, "name two different weights"},
		{func() compareFlags { f := ws; f.weightsB = "r 2"; return f }(), nil, `--weights-b "r 2" is neither a local path nor a weights id`},
		{func() compareFlags { f := ws; f.config = ""; return f }(), nil, "--config is required with --weights-a/--weights-b"},
		{func() compareFlags { f := ws; f.initKey = "train_init_ids"; return f }(), nil, `--init-key "train_init_ids"`},
		{func() compareFlags { f := ws; f.chart = "c.pdf"; return f }(), nil, "--chart c.pdf: give a file name ending in .svg or .png"},
		{func() compareFlags { f := tags; f.run = "a/b"; return f }(), nil, `--run "a/b"`},
	} {
		err := checkCompareFlags(c.f, func(n string) bool { return slices.Contains(c.changed, n) })
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.f, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n")):
			t.Errorf("%+v changed %v: error %v, want one line with %q", c.f, c.changed, err, c.want)
		}
	}
}

// A tag compare evaluates under is one `starter eval --tag` would take.
func TestCompareTag(t *testing.T) {
	if got := runs.CompareTag("r2", valKey, "0123456789abcdef"); got != "cmp-r2-val-01234567" {
		t.Errorf("CompareTag = %s", got)
	}
	if got := runs.CompareTag("ext-0123456789ab", finalKey, "fedcba9876543210"); got != "cmp-ext-0123456789ab-eval-fedcba98" || !runName.MatchString(got) {
		t.Errorf("CompareTag = %s", got)
	}
}
