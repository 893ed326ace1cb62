package report

import (
	"fmt"
	"math"
	"sort"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Compare pairs two evaluations' episodes by cell (task, init id) and
// tests the difference on the discordant pairs (exact McNemar). Only cells
// with a valid episode on both sides are pairs: an infrastructure failure
// says nothing about either planner. The reports' harness digest and cell
// lists must agree; Compare refuses otherwise, naming the difference.
func Compare(a, b schemas.Report, epsA, epsB []schemas.Episode) (schemas.Comparison, error) {
	c := schemas.Comparison{Run: a.Run, A: a.Tag, B: b.Tag, WeightsA: a.WeightsID, WeightsB: b.WeightsID, Digest: a.Digest}
	if a.Digest != b.Digest {
		return c, fmt.Errorf("reports %s and %s were made with different harness configurations (digests %s and %s): "+
			"a paired comparison needs the same harness file and vars; evaluate both weights with the same ones", a.Tag, b.Tag, a.Digest, b.Digest)
	}
	if d := cellDiff(a.Cells, b.Cells); d != "" {
		return c, fmt.Errorf("reports %s and %s cover different cells (%s): evaluate both on the same init key and shards", a.Tag, b.Tag, d)
	}
	type cell struct{ task, init int32 }
	index := func(eps []schemas.Episode) map[cell]schemas.Episode {
		m := map[cell]schemas.Episode{}
		for _, e := range eps {
			m[cell{e.Task, e.InitID}] = e
		}
		return m
	}
	ia, ib := index(epsA), index(epsB)
	names, suiteOf := map[int32]string{}, map[int32]string{}
	for _, t := range a.Tasks {
		names[t.Task], suiteOf[t.Task] = t.Name, t.Suite
	}
	// Per suite only when the tasks span several: one suite is Overall.
	bySuite := map[string]*schemas.PairedResult{}
	if len(a.Suites) > 1 {
		for _, s := range a.Suites {
			c.Suites = append(c.Suites, schemas.PairedResult{Task: -1, Suite: s.Suite})
		}
		for i := range c.Suites {
			bySuite[c.Suites[i].Suite] = &c.Suites[i]
		}
	}
	byTask := map[int32]*schemas.PairedResult{}
	var keys []cell
	for k := range ia {
		keys = append(keys, k)
	}
	for k := range ib {
		if _, ok := ia[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].task != keys[j].task {
			return keys[i].task < keys[j].task
		}
		return keys[i].init < keys[j].init
	})
	c.Overall = schemas.PairedResult{Task: -1}
	for _, k := range keys {
		ea, okA := ia[k]
		eb, okB := ib[k]
		if !okA || !okB || !ea.Valid || !eb.Valid {
			c.Unpaired++
			continue
		}
		r := byTask[k.task]
		if r == nil {
			r = &schemas.PairedResult{Task: k.task, Name: names[k.task], Suite: suiteOf[k.task]}
			byTask[k.task] = r
		}
		rs := []*schemas.PairedResult{r, &c.Overall}
		if s := bySuite[suiteOf[k.task]]; s != nil {
			rs = append(rs, s)
		}
		for _, r := range rs {
			r.Pairs++
			if ea.Success {
				r.SuccessA++
			}
			if eb.Success {
				r.SuccessB++
			}
			switch {
			case ea.Success && !eb.Success:
				r.OnlyA++
			case eb.Success && !ea.Success:
				r.OnlyB++
			}
		}
		if ea.Success != eb.Success {
			winner := "a"
			if eb.Success {
				winner = "b"
			}
			c.Discordant = append(c.Discordant, schemas.DiscordantCell{Task: k.task, InitID: k.init, Winner: winner, A: link(ea), B: link(eb)})
		}
	}
	finish := func(r *schemas.PairedResult) {
		if r.Pairs > 0 {
			r.Difference = float64(r.SuccessB-r.SuccessA) / float64(r.Pairs)
		}
		r.PValue = McNemarExact(r.OnlyA, r.OnlyB)
	}
	var tasks []int32
	for t := range byTask {
		tasks = append(tasks, t)
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i] < tasks[j] })
	for _, t := range tasks {
		finish(byTask[t])
		c.Tasks = append(c.Tasks, *byTask[t])
	}
	for i := range c.Suites {
		finish(&c.Suites[i])
	}
	finish(&c.Overall)
	return c, nil
}

func link(e schemas.Episode) schemas.EpisodeLink {
	return schemas.EpisodeLink{EpisodeID: e.EpisodeID, Success: e.Success, Termination: e.Termination, Artifacts: e.Artifacts}
}

// cellDiff names how two cell lists differ, "" when they hold the same
// cells. Reports from before cell lists existed (both empty) agree.
func cellDiff(a, b []string) string {
	in := func(xs []string) map[string]bool {
		m := map[string]bool{}
		for _, x := range xs {
			m[x] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var onlyA, onlyB []string
	for x := range ma {
		if !mb[x] {
			onlyA = append(onlyA, x)
		}
	}
	for x := range mb {
		if !ma[x] {
			onlyB = append(onlyB, x)
		}
	}
	if len(onlyA)+len(onlyB) == 0 {
		return ""
	}
	sort.Strings(onlyA)
	sort.Strings(onlyB)
	first := func(xs []string) string {
		if len(xs) == 0 {
			return "none"
		}
		return fmt.Sprintf("%d, first %s", len(xs), xs[0])
	}
	return fmt.Sprintf("only in the first: %s; only in the second: %s", first(onlyA), first(onlyB))
}

// McNemarExact is the exact two-sided McNemar test of b cells only the
// first solved against c only the second solved: under "equally good" each
// discordant cell goes either way with probability 1/2, so
// p = min(1, 2·P[Binomial(b+c, 1/2) ≤ min(b, c)]).
func McNemarExact(b, c int) float64 {
	n, k := b+c, min(b, c)
	if n == 0 {
		return 1
	}
	var p float64
	for i := 0; i <= k; i++ {
		p += math.Exp(lchoose(n, i) - float64(n)*math.Ln2)
	}
	return math.Min(1, 2*p)
}

func lchoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}
