package report

import (
	"math"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestMcNemarExact(t *testing.T) {
	for _, c := range []struct {
		b, c int
		want float64
	}{
		{0, 0, 1},
		{3, 3, 1},
		{0, 5, 0.0625},         // 2·(1/32)
		{1, 9, 0.021484375},    // 2·(1+10)/1024
		{10, 2, 0.03857421875}, // 2·(1+12+66)/4096
	} {
		if got := McNemarExact(c.b, c.c); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("McNemarExact(%d, %d) = %v, want %v", c.b, c.c, got, c.want)
		}
	}
}

func TestCompare(t *testing.T) {
	ep := func(task, init int32, valid, success bool) schemas.Episode {
		return schemas.Episode{Task: task, InitID: init, Valid: valid, Success: success, EpisodeID: "e", Termination: "t", Artifacts: "s3://x/"}
	}
	a := schemas.Report{Run: "r", Tag: "val-r1", WeightsID: "w0", Digest: "d", Cells: []string{"0/1", "0/2", "1/1", "1/2"},
		Tasks: []schemas.TaskResult{{Task: 0, Name: "zero"}, {Task: 1, Name: "one"}}}
	b := a
	b.Tag, b.WeightsID = "val-r3", "r2"
	epsA := []schemas.Episode{ep(0, 1, true, false), ep(0, 2, true, true), ep(1, 1, true, false), ep(1, 2, false, false)}
	epsB := []schemas.Episode{ep(0, 1, true, true), ep(0, 2, true, true), ep(1, 1, true, true), ep(1, 2, true, true)}
	c, err := Compare(a, b, epsA, epsB)
	if err != nil {
		t.Fatal(err)
	}
	o := c.Overall
	// Cell 1/2 is invalid under A: unpaired. Of 3 pairs, B won 2, none went to A.
	if c.Unpaired != 1 || o.Pairs != 3 || o.SuccessA != 1 || o.SuccessB != 3 || o.OnlyA != 0 || o.OnlyB != 2 ||
		math.Abs(o.Difference-2.0/3) > 1e-12 || math.Abs(o.PValue-0.5) > 1e-12 {
		t.Errorf("overall %+v unpaired %d", o, c.Unpaired)
	}
	if len(c.Tasks) != 2 || c.Tasks[1].Name != "one" || c.Tasks[1].Pairs != 1 || c.Tasks[1].OnlyB != 1 {
		t.Errorf("tasks %+v", c.Tasks)
	}
	if len(c.Discordant) != 2 || c.Discordant[0].Winner != "b" || c.Discordant[0].Task != 0 || c.Discordant[0].InitID != 1 || c.Discordant[1].Task != 1 {
		t.Errorf("discordant %+v", c.Discordant)
	}

	if len(c.Suites) != 0 {
		t.Errorf("one suite (none named) gave per-suite rows %+v", c.Suites)
	}
	// Tasks of two suites: each suite is its own paired result.
	two := a
	two.Tasks = []schemas.TaskResult{{Task: 0, Name: "zero", Suite: "s_swap"}, {Task: 1, Name: "one", Suite: "s_lan"}}
	two.Suites = []schemas.TaskResult{{Task: -1, Suite: "s_swap"}, {Task: -1, Suite: "s_lan"}}
	twoB := two
	twoB.Tag = "val-r3"
	c, err = Compare(two, twoB, epsA, epsB)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Suites) != 2 || c.Suites[0].Suite != "s_swap" || c.Suites[0].Pairs != 2 || c.Suites[0].OnlyB != 1 ||
		c.Suites[1].Suite != "s_lan" || c.Suites[1].Pairs != 1 || c.Suites[1].OnlyB != 1 || c.Tasks[1].Suite != "s_lan" {
		t.Errorf("per-suite results %+v", c.Suites)
	}

	other := b
	other.Digest = "e"
	if _, err := Compare(a, other, epsA, epsB); err == nil || !strings.Contains(err.Error(), "different harness configurations") {
		t.Errorf("different digests: %v", err)
	}
	other = b
	other.Cells = []string{"0/1", "0/2", "1/1", "1/3"}
	if _, err := Compare(a, other, epsA, epsB); err == nil || !strings.Contains(err.Error(), "1/2") || !strings.Contains(err.Error(), "1/3") {
		t.Errorf("different cells: %v", err)
	}
}
