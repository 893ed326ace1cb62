package runs

import (
	"fmt"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestPlanTag(t *testing.T) {
	shard := func(i, n int, weights, initKey string) ShardFile {
		return ShardFile{Key: fmt.Sprintf("runs/r/eval/t/shards/%d-of-%d.json", i, n), I: i, N: n,
			Rep: schemas.Report{Scope: schemas.ScopeShard, Shard: i, Shards: n, WeightsDigest: weights, InitKey: initKey, Digest: "cfg"}}
	}
	spec := func(i, n int, replace bool) TagSpec {
		return TagSpec{Shard: Shard{I: i, N: n}, InitKey: report.ValKey, Weights: "wd", Config: "cfg", Replace: replace}
	}
	full := "runs/r/eval/t/report.json"
	stop := &schemas.ReportStop{Reason: "starter stop", Skipped: 3}
	stopped := &schemas.Report{WeightsDigest: "wd", InitKey: report.ValKey, Digest: "cfg", Stopped: stop}
	stoppedFinal := &schemas.Report{WeightsDigest: "wd", InitKey: report.FinalKey, Digest: "cfg", Stopped: stop}
	stoppedShard := shard(1, 2, "wd", report.ValKey)
	stoppedShard.Rep.Stopped = stop
	cases := []struct {
		name   string
		st     TagState
		want   TagSpec
		err    string // "" when allowed
		wipe   bool
		remove []string
	}{
		{"new tag", TagState{}, spec(0, 1, false), "", false, nil},
		{"new tag, shard", TagState{}, spec(1, 4, false), "", false, nil},
		{"full report exists", TagState{Full: full}, spec(0, 1, false), "--replace-tag", false, nil},
		{"full report replaced", TagState{Full: full}, spec(0, 1, true), "", true, nil},
		{"shards exist, whole split asked", TagState{Shards: []ShardFile{shard(0, 2, "wd", report.ValKey)}}, spec(0, 1, false), "shard reports", false, nil},
		{"final score exists", TagState{Full: full}, TagSpec{Shard: Shard{I: 0, N: 1}, InitKey: report.FinalKey}, "never overwritten", false, nil},
		{"other shard of the same evaluation", TagState{Shards: []ShardFile{shard(0, 2, "wd", report.ValKey)}}, spec(1, 2, false), "", false, nil},
		{"same shard again", TagState{Shards: []ShardFile{shard(1, 2, "wd", report.ValKey)}}, spec(1, 2, false), "--replace-tag", false, nil},
		{"same shard replaced", TagState{Shards: []ShardFile{shard(0, 2, "wd", report.ValKey), shard(1, 2, "wd", report.ValKey)}}, spec(1, 2, true), "", false,
			[]string{"runs/r/eval/t/shards/1-of-2.json"}},
		{"stopped report finished", TagState{Full: full, Stopped: stopped}, spec(0, 1, false), "", false, nil},
		{"stopped final score finished", TagState{Full: full, Stopped: stoppedFinal}, TagSpec{Shard: Shard{I: 0, N: 1}, InitKey: report.FinalKey, Weights: "wd", Config: "cfg"}, "", false, nil},
		{"stopped report, other weights", TagState{Full: full, Stopped: stopped}, TagSpec{Shard: Shard{I: 0, N: 1}, InitKey: report.ValKey, Weights: "other", Config: "cfg"}, "--replace-tag", false, nil},
		{"stopped shard finished", TagState{Shards: []ShardFile{shard(0, 2, "wd", report.ValKey), stoppedShard}}, spec(1, 2, false), "", false, nil},
		{"other shard count", TagState{Shards: []ShardFile{shard(0, 3, "wd", report.ValKey)}}, spec(1, 2, false), "split in 3 shards", false, nil},
		{"other weights", TagState{Shards: []ShardFile{shard(0, 2, "other", report.ValKey)}}, spec(1, 2, false), "other weights", false, nil},
		{"other init key", TagState{Shards: []ShardFile{shard(0, 2, "wd", report.FinalKey)}}, spec(1, 2, false), "--init-key", false, nil},
		{"merged report exists, shard asked", TagState{Full: full, Shards: []ShardFile{shard(0, 2, "wd", report.ValKey)}}, spec(1, 2, false), "full report", false, nil},
		{"conflicting shards replaced", TagState{Full: full, Shards: []ShardFile{shard(0, 2, "wd", report.ValKey), shard(0, 3, "wd", report.ValKey)}}, spec(1, 2, true), "", false,
			[]string{full, "runs/r/eval/t/shards/0-of-3.json"}},
	}
	for _, c := range cases {
		c.st.Run, c.st.Tag = "r", "t"
		p, err := PlanTag(c.st, c.want)
		if c.err == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", c.name, err)
			} else if p.Wipe != c.wipe || fmt.Sprint(p.Remove) != fmt.Sprint(c.remove) {
				t.Errorf("%s: plan %+v, want wipe %v remove %v", c.name, p, c.wipe, c.remove)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.err)
		}
	}
}

func TestParseShard(t *testing.T) {
	for in, want := range map[string]Shard{"": {I: 0, N: 1}, "0/1": {I: 0, N: 1}, "0/2": {I: 0, N: 2}, "7/8": {I: 7, N: 8}, " 1 / 3 ": {I: 1, N: 3}} {
		got, err := ParseShard(in)
		if err != nil || got != want {
			t.Errorf("ParseShard(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"2/2", "x", "0/0", "-1/2", "1/", "/2", "1/2/3", "1", "a/b"} {
		_, err := ParseShard(in)
		if err == nil {
			t.Errorf("ParseShard(%q): no error", in)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "--shard") || !strings.Contains(msg, "0/8") || strings.Contains(msg, "\n") {
			t.Errorf("ParseShard(%q): %q is not a one-line error naming the flag and an example", in, msg)
		}
	}
}
