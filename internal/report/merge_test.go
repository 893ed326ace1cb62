package report

import (
	"fmt"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// shardReports are the n shard reports of an evaluation of 2 tasks × 4
// init ids (cell k = task k/4, init 40+k%4), every episode valid, task 1's
// successful.
func shardReports(n int) ([]schemas.Report, []string) {
	var reps []schemas.Report
	var keys []string
	for i := range n {
		r := schemas.Report{Run: "r", Tag: "t", WeightsID: "w0", InitKey: ValKey, Harness: "h", Digest: "cfg", WeightsDigest: "wd",
			Scope: schemas.ScopeShard, Shard: i, Shards: n, SplitCells: 8, StartedAtMS: int64(100 + i), FinishedAtMS: int64(200 + i),
			Tasks:  []schemas.TaskResult{{Task: 0, Name: "a", Suite: "s"}, {Task: 1, Name: "b", Suite: "s"}},
			Suites: []schemas.TaskResult{{Task: -1, Suite: "s"}}}
		for k := i; k < 8; k += n {
			task := int32(k / 4)
			r.Cells = append(r.Cells, schemas.CellID(task, int32(40+k%4)))
			for _, res := range []*schemas.TaskResult{&r.Tasks[task], &r.Suites[0], &r.Overall} {
				res.Episodes++
				res.Valid++
				if task == 1 {
					res.Successes++
				}
			}
		}
		reps = append(reps, r)
		keys = append(keys, fmt.Sprintf("runs/r/eval/t/shards/%d-of-%d.json", i, n))
	}
	return reps, keys
}

func TestMergeShards(t *testing.T) {
	reps, keys := shardReports(3)
	// Files come in any order.
	reps[0], reps[2], keys[0], keys[2] = reps[2], reps[0], keys[2], keys[0]
	m, err := MergeShards(reps, keys)
	if err != nil {
		t.Fatal(err)
	}
	if m.IsShard() || m.Scope != schemas.ScopeFull || len(m.MergedFrom) != 3 || m.MergedFrom[0] != "runs/r/eval/t/shards/0-of-3.json" {
		t.Errorf("merged report scope %q shards %d from %v", m.Scope, m.Shards, m.MergedFrom)
	}
	if m.Overall.Episodes != 8 || m.Overall.Successes != 4 || m.Overall.SuccessRate != 0.5 || len(m.Cells) != 8 || m.Cells[0] != "0:40" || m.Cells[7] != "1:43" {
		t.Errorf("merged counts %+v, cells %v", m.Overall, m.Cells)
	}
	if len(m.Tasks) != 2 || m.Tasks[0].Episodes != 4 || m.Tasks[1].SuccessRate != 1 || m.Suites[0].Episodes != 8 {
		t.Errorf("merged tasks %+v suites %+v", m.Tasks, m.Suites)
	}
	if m.StartedAtMS != 100 || m.FinishedAtMS != 202 || m.WeightsDigest != "wd" {
		t.Errorf("merged times %d–%d, weights %q", m.StartedAtMS, m.FinishedAtMS, m.WeightsDigest)
	}

	type change = func(r []schemas.Report, k []string) ([]schemas.Report, []string)
	for _, c := range []struct {
		name   string
		want   []string
		change change
	}{
		{"missing shard", []string{"shard 1/3", "missing", "--shard 1/3"}, func(r []schemas.Report, k []string) ([]schemas.Report, []string) {
			return []schemas.Report{r[0], r[2]}, []string{k[0], k[2]}
		}},
		{"other weights", []string{"weights digest", "2-of-3"}, func(r []schemas.Report, k []string) ([]schemas.Report, []string) {
			r[2].WeightsDigest = "other"
			return r, k
		}},
		{"other init key", []string{"init key"}, func(r []schemas.Report, k []string) ([]schemas.Report, []string) {
			r[1].InitKey = FinalKey
			return r, k
		}},
		{"other harness", []string{"harness config digest"}, func(r []schemas.Report, k []string) ([]schemas.Report, []string) {
			r[1].Digest = "x"
			return r, k
		}},
		{"overlap", []string{"cell 0:41", "overlap"}, func(r []schemas.Report, k []string) ([]schemas.Report, []string) {
			// Shard 0 also claims shard 1's first cell, with its episode.
			r[0].Cells = append(r[0].Cells, r[1].Cells[0])
			r[0].Overall.Episodes++
			return r, k
		}},
		{"a cell counted twice", []string{"counted twice"}, func(r []schemas.Report, k []string) ([]schemas.Report, []string) {
			r[1].Overall.Episodes++
			return r, k
		}},
		{"a full report among shards", []string{"not a shard report"}, func(r []schemas.Report, k []string) ([]schemas.Report, []string) {
			r[1].Scope, r[1].Shards = schemas.ScopeFull, 1
			return r, k
		}},
		{"a stopped shard", []string{"1-of-3.json is incomplete", "stopped", "--shard 1/3"}, func(r []schemas.Report, k []string) ([]schemas.Report, []string) {
			r[1].Stopped = &schemas.ReportStop{Reason: "starter stop", Skipped: 1}
			return r, k
		}},
		{"cells short of the split", []string{"cover 7 cells", "has 8"}, func(r []schemas.Report, k []string) ([]schemas.Report, []string) {
			r[1].Cells = r[1].Cells[1:]
			r[1].Overall.Episodes--
			return r, k
		}},
	} {
		reps, keys := c.change(shardReports(3))
		_, err := MergeShards(reps, keys)
		if err == nil {
			t.Errorf("%s: merged", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.name, err, w)
			}
		}
	}
}
