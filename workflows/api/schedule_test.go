package api

import (
	"strings"
	"testing"
	"time"
)

func TestSweepSpec(t *testing.T) {
	spec, when, err := SweepSpec("6h", "")
	if err != nil || len(spec.Intervals) != 1 || spec.Intervals[0].Every != 6*time.Hour || when != "every 6h" {
		t.Errorf("--every 6h: %+v %q %v", spec, when, err)
	}
	for _, expr := range []string{"0 3 * * *", "*/15 * * * 1-5", "CRON_TZ=Europe/Berlin 0 6 * * *", "@daily", "0 0 1 JAN *"} {
		spec, _, err := SweepSpec("", expr)
		if err != nil || len(spec.CronExpressions) != 1 || spec.CronExpressions[0] != expr {
			t.Errorf("--cron %q: %+v %v", expr, spec, err)
		}
	}
	for _, c := range []struct{ every, cron, want string }{
		{"6h", "0 3 * * *", "both given"},
		{"", "", "--every or --cron is required"},
		{"1d", "", "not a duration"},
		{"six hours", "", "like 6h"},
		{"30s", "", "shorter than a minute"},
		{"", "61 * * * *", "five fields"},
		{"", "0 3 * *", "five fields"},
		{"", "0 0 3 * * *", "five fields"},
		{"", "@every 1h", "use --every"},
		{"", "@midnight", "shorthands are"},
		{"", "CRON_TZ=Nowhere/Atlantis 0 3 * * *", "--cron"},
	} {
		_, _, err := SweepSpec(c.every, c.cron)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("--every %q --cron %q: error %v, want one line with %q", c.every, c.cron, err, c.want)
		}
	}
}
