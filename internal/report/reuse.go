package report

import (
	"fmt"
	"sort"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Wanted is the evaluation `starter compare` needs of one weights: a
// stored report stands for it only when it is of these weights, on this
// harness configuration and init key, and covers exactly these cells, so
// reusing it pairs the same cells a new evaluation would.
type Wanted struct {
	WeightsID     string
	WeightsDigest string // the weights' manifest digest
	Config        string // harness config digest
	InitKey       string
	Cells         []string // CellID of every cell of the split
}

// SplitCellIDs lists the CellIDs of the whole split of initKey, in the
// form reports store them.
func SplitCellIDs(h schemas.Harness, initKey string) ([]string, error) {
	cells, _, err := SplitCells(h, initKey, 0, 1)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(cells))
	for i, c := range cells {
		ids[i] = schemas.CellID(c.Task.ID, c.InitID)
	}
	return ids, nil
}

// Mismatch says why rep cannot stand for w's evaluation, "" when it can.
func (w Wanted) Mismatch(rep schemas.Report) string {
	switch {
	case rep.WeightsID != w.WeightsID:
		return fmt.Sprintf("weights %s, not %s", rep.WeightsID, w.WeightsID)
	case rep.IsShard():
		return fmt.Sprintf("shard %d/%d only", rep.Shard, rep.Shards)
	case rep.WeightsDigest != "" && rep.WeightsDigest != w.WeightsDigest:
		// The id was reused for other files (a replaced run).
		return fmt.Sprintf("weights digest %.12s, not %.12s", rep.WeightsDigest, w.WeightsDigest)
	case rep.Digest != w.Config:
		return fmt.Sprintf("harness digest %s, not %s", rep.Digest, w.Config)
	case rep.InitKey != w.InitKey:
		return fmt.Sprintf("init key %s, not %s", rep.InitKey, w.InitKey)
	case len(rep.Cells) == 0:
		return "no cell list (a report from before cell lists)"
	}
	if d := cellDiff(rep.Cells, w.Cells); d != "" {
		return "other cells (" + d + ")"
	}
	return ""
}

// Reusable picks among reps the report that stands for w: of several, the
// one finished last (then the first tag by name, so the choice is stable).
// Without one, why the reports of the same weights id do not stand for
// it ("" when there is none), so the user learns why it is evaluated again.
func Reusable(reps []schemas.Report, w Wanted) (schemas.Report, bool, string) {
	var ok []schemas.Report
	why := ""
	for _, r := range reps {
		m := w.Mismatch(r)
		switch {
		case m == "":
			ok = append(ok, r)
		case r.WeightsID == w.WeightsID && why == "":
			why = fmt.Sprintf("report %s has %s", r.Tag, m)
		}
	}
	if len(ok) == 0 {
		return schemas.Report{}, false, why
	}
	sort.Slice(ok, func(i, j int) bool {
		if ok[i].FinishedAtMS != ok[j].FinishedAtMS {
			return ok[i].FinishedAtMS > ok[j].FinishedAtMS
		}
		return ok[i].Tag < ok[j].Tag
	})
	return ok[0], true, ""
}
