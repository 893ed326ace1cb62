package harness

import (
	"strings"
	"testing"
)

func TestValidatePointsAtTheLine(t *testing.T) {
	cases := []struct {
		name, body string
		line       int
		want       string
	}{
		{"shipped-like file is fine", good, 0, ""},
		{"unknown key", strings.Replace(good, "collect: {groups: 2, attempts: 2}", "collect: {groups: 2, attempts: 2, atempts: 3}", 1), 16, "atempts"},
		{"wrong type", strings.Replace(good, "timeout: 30s", "timeout: 30", 1), 11, "timeout"},
		{"bad duration", strings.Replace(good, "timeout: 30s", "timeout: soon", 1), 11, "soon"},
		{"bad adapter", strings.Replace(good, "adapter: minimal", "adapter: rpent", 1), 12, "adapter"},
		{"overlapping splits", strings.Replace(good, `val_init_ids: "45-49"`, `val_init_ids: "40-49"`, 1), 15, "init id 40"},
		{"undeclared placeholder", strings.Replace(good, "{bin}/episode", "{bindir}/episode", 1), 10, "{bindir}"},
		{"one attempt", strings.Replace(good, "attempts: 2", "attempts: 1", 1), 16, "attempts"},
	}
	for _, c := range cases {
		probs, err := Validate(write(t, c.body), nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.want == "" {
			if len(probs) != 0 {
				t.Errorf("%s: unexpected problems %v", c.name, probs)
			}
			continue
		}
		if len(probs) == 0 {
			t.Errorf("%s: no problem found", c.name)
			continue
		}
		p := probs[0]
		if p.Line != c.line || !strings.Contains(p.Path+" "+p.Msg, c.want) {
			t.Errorf("%s: got line %d %q, want line %d mentioning %q", c.name, p.Line, p.String(), c.line, c.want)
		}
	}
	probs, err := Validate(write(t, "name: [\n"), nil)
	if err != nil || len(probs) != 1 || probs[0].Line == 0 {
		t.Errorf("syntax error: %v %v", probs, err)
	}
}

func TestShippedHarnessesMatchTheSchema(t *testing.T) {
	for _, f := range []string{"../../harnesses/minimal/harness.yaml", "../../harnesses/minimal/paced.yaml"} {
		probs, err := Validate(f, nil)
		if err != nil || len(probs) > 0 {
			t.Errorf("%s: %v %v", f, probs, err)
		}
	}
}
