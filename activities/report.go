package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/sampling"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// ReportInput names the episodes a report covers.
type ReportInput struct {
	Run       string
	Round     int32
	Phase     string
	Tag       string
	WeightsID string
	InitKey   string
	// Shards > 1 makes the report one of a shard: only the cells with
	// index % Shards == Shard count, and it goes to Layout.ShardReport.
	Shard, Shards int
	StartedAtMS   int64
	// Stopped marks the report incomplete: the evaluation was stopped and
	// skipped cells (schemas.Report.Stopped).
	Stopped *schemas.ReportStop `json:",omitempty"`
}

// WriteReport aggregates a phase's episodes per task and suite into
// eval/<tag>/report.json, with every task's row beside it (report.txt,
// tasks.csv), or a shard's report. When the init key names a
// split, only episodes of the report's cells and of its weights count, and
// cells without a record are listed as missing (lost episodes).
func (c *Records) WriteReport(ctx context.Context, in ReportInput) (schemas.Report, error) {
	h, err := c.harnesses.get(ctx, c.Store, in.Run)
	if err != nil {
		return schemas.Report{}, err
	}
	eps, err := c.readEpisodes(ctx, in.Run, in.Round, in.Phase)
	if err != nil {
		return schemas.Report{}, err
	}
	rep, key, err := c.newReport(ctx, h, in)
	if err != nil {
		return rep, err
	}
	if in.Phase == schemas.PhaseVal {
		if err := c.refuseUntrainable(ctx, h, in); err != nil {
			return rep, err
		}
	}
	cells, want, err := reportCells(h, in, &rep)
	if err != nil {
		return rep, err
	}
	rep.Tasks, rep.Suites = report.EmptyResults(h.Tasks)
	if in.InitKey == report.FinalKey {
		rep.Protocol, rep.ProtocolEpisodes, rep.RequiredTasks = h.Protocol.Name, h.Protocol.Episodes, h.RequiredTasks()
	}
	t := newTally(&rep)
	seen, err := t.countEpisodes(eps, want, in.WeightsID, h.Name)
	if err != nil {
		return rep, err
	}
	if want != nil {
		t.countLost(cells, seen)
	}
	rep.MaxInvalidShare = h.Collect.InvalidLimit()
	rep.Stopped = in.Stopped
	report.FinishRates(&rep)
	if rep.Scope == schemas.ScopeFull && rep.Overall.Valid > 0 {
		instr.RoundSuccess(ctx, in.Run, in.Round, in.Phase, rep.Overall.SuccessRate)
	}
	rep.FinishedAtMS = time.Now().UnixMilli()
	if rep, err = c.storeOnce(ctx, key, rep); err != nil {
		return rep, err
	}
	if err := c.writeReportFiles(ctx, rep); err != nil {
		return rep, err
	}
	// The cell lists (and a large evaluation's task rows) stay in S3.
	return rep.ForHistory(), nil
}

// newReport is the report's identity, nothing counted yet, and the key
// it is stored at: a shard's report has its own. With weights named, it
// carries their digest, so shards of other weights do not merge.
func (c *Records) newReport(ctx context.Context, h schemas.Harness, in ReportInput) (schemas.Report, string, error) {
	l := schemas.Layout{Run: in.Run}
	rep := schemas.Report{Run: in.Run, Tag: in.Tag, WeightsID: in.WeightsID, InitKey: in.InitKey,
		Harness: h.Name, Digest: h.Digest, Round: in.Round, Scope: schemas.ScopeFull, Shards: 1, StartedAtMS: in.StartedAtMS}
	key := l.Report(in.Tag)
	if in.Shards > 1 {
		rep.Scope, rep.Shard, rep.Shards = schemas.ScopeShard, in.Shard, in.Shards
		key = l.ShardReport(in.Tag, in.Shard, in.Shards)
	}
	if in.WeightsID != "" {
		man, err := weights.Read(ctx, c.Store, l.Weights(in.WeightsID))
		if err != nil {
			return rep, key, fmt.Errorf("report %s: %w", in.Tag, err)
		}
		rep.WeightsDigest = schemas.WeightsDigest(man.Files)
	}
	return rep, key, nil
}

// cellKey is a cell of a split: a task and one of its init states.
type cellKey struct{ task, init int32 }

// reportCells lists in rep the cells of the split the init key names
// (a shard's alone) and returns them, with the set of them whose
// episodes count. The set is nil when the init key names no split: every
// episode of the phase counts. A shard's report needs a split.
func reportCells(h schemas.Harness, in ReportInput, rep *schemas.Report) ([]report.Cell, map[cellKey]bool, error) {
	cells, total, err := report.SplitCells(h, in.InitKey, in.Shard, in.Shards)
	if err != nil {
		if in.Shards > 1 {
			return nil, nil, fmt.Errorf("report %s: %w", in.Tag, err)
		}
		return nil, nil, nil
	}
	want := make(map[cellKey]bool, len(cells))
	rep.SplitCells = total
	for _, cl := range cells {
		want[cellKey{cl.Task.ID, cl.InitID}] = true
		rep.Cells = append(rep.Cells, schemas.CellID(cl.Task.ID, cl.InitID))
	}
	return cells, want, nil
}

// tally counts episodes into a report's results: their task's, their
// suite's and the overall.
type tally struct {
	rep     *schemas.Report
	byTask  map[int32]*schemas.TaskResult
	bySuite map[string]*schemas.TaskResult
}

func newTally(rep *schemas.Report) tally {
	t := tally{rep: rep, byTask: map[int32]*schemas.TaskResult{}, bySuite: map[string]*schemas.TaskResult{}}
	for i := range rep.Tasks {
		t.byTask[rep.Tasks[i].Task] = &rep.Tasks[i]
	}
	for i := range rep.Suites {
		t.bySuite[rep.Suites[i].Suite] = &rep.Suites[i]
	}
	return t
}

// countEpisodes counts the episodes of the wanted cells (all, with want
// nil) run with weightsID, valid or not and why, and returns the cells
// they covered. An episode of a task the harness does not list is
// refused.
func (t tally) countEpisodes(eps []schemas.Episode, want map[cellKey]bool, weightsID, harnessName string) (map[cellKey]bool, error) {
	seen := map[cellKey]bool{}
	for _, e := range eps {
		k := cellKey{e.Task, e.InitID}
		// Other shards' cells share the phase; rows of other weights are a
		// replaced evaluation's leftovers.
		if want != nil && (!want[k] || e.WeightsID != weightsID) {
			continue
		}
		task := t.byTask[e.Task]
		if task == nil {
			return seen, fmt.Errorf("episode %s has task %d, which harness %s does not list", e.EpisodeID, e.Task, harnessName)
		}
		seen[k] = true
		for _, r := range []*schemas.TaskResult{task, t.bySuite[task.Suite], &t.rep.Overall} {
			if r == nil {
				continue
			}
			r.Episodes++
			if !e.Valid {
				r.Invalid++
				if r.InvalidByCause == nil {
					r.InvalidByCause = map[string]int{}
				}
				cause := e.FailureClass
				if cause == "" {
					cause = "unclassified"
				}
				r.InvalidByCause[cause]++
				continue
			}
			r.Valid++
			if e.Success {
				r.Successes++
			}
		}
	}
	return seen, nil
}

// countLost lists the cells no episode covered as missing, and counts
// them lost.
func (t tally) countLost(cells []report.Cell, seen map[cellKey]bool) {
	for _, cl := range cells {
		if seen[cellKey{cl.Task.ID, cl.InitID}] {
			continue
		}
		t.rep.Missing = append(t.rep.Missing, schemas.CellID(cl.Task.ID, cl.InitID))
		for _, r := range []*schemas.TaskResult{t.byTask[cl.Task.ID], t.bySuite[cl.Task.Suite], &t.rep.Overall} {
			if r != nil {
				r.Lost++
			}
		}
	}
}

// storeOnce writes rep at key unless a report is there, and returns the
// one stored. A report that is there stands (a tag is replaced only by
// --replace-tag, which deletes it first), so a late or repeated writer
// returns the stored one instead of replacing it; only a stopped
// evaluation's incomplete report gives way.
func (c *Records) storeOnce(ctx context.Context, key string, rep schemas.Report) (schemas.Report, error) {
	created, err := store.PutJSONIfAbsent(ctx, c.Store, key, rep)
	if err != nil {
		return rep, err
	}
	if created {
		return rep, nil
	}
	var stored schemas.Report
	if err := store.GetJSON(ctx, c.Store, key, &stored); err != nil {
		return rep, err
	}
	if stored.Stopped != nil {
		// A stopped evaluation's report is no score: the evaluation of the
		// same tag run again (it finds the cells that ran recorded) replaces it.
		activity.GetLogger(ctx).Info("replacing the report of a stopped evaluation", "key", key, "skipped", stored.Stopped.Skipped)
		return rep, store.PutJSON(ctx, c.Store, key, rep)
	}
	activity.GetLogger(ctx).Info("report already written; returning the stored one", "key", key)
	return stored, nil
}

// writeReportFiles writes every task's row beside a full report
// (report.ReportFiles: report.txt, tasks.csv), which the terminal shows
// only the worst of past a few dozen tasks. They are rendered from the
// stored report, so a retry or a late writer puts the same bytes at the
// same keys.
func (c *Records) writeReportFiles(ctx context.Context, rep schemas.Report) error {
	files, err := report.ReportFiles(rep, c.Store.Bucket)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := c.Store.Put(ctx, f.Key, f.Body); err != nil {
			return fmt.Errorf("report %s: %w", rep.Tag, err)
		}
	}
	return nil
}

// ReadReport loads a report (e.g. a --pool-report) stored in the bucket.
func (c *Records) ReadReport(ctx context.Context, key string) (schemas.Report, error) {
	var rep schemas.Report
	b, err := c.Store.Get(ctx, key)
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, fmt.Errorf("report %s: %w", key, err)
	}
	return rep, nil
}

// refuseUntrainable stops a training run at its validation when none of
// the validation's calls could train because of how they were sampled
// (docs/design.md §3, "Sampling settings"): the planner sends the same
// requests in collection, so every GPU-hour of it would be spent on calls
// the batch drops. Calls untrainable for other causes (failed, no ids)
// are the episodes' infrastructure failures, counted there.
func (c *Records) refuseUntrainable(ctx context.Context, h schemas.Harness, in ReportInput) error {
	l := schemas.Layout{Run: in.Run}
	calls, trainable := 0, 0
	by := map[string]int{}
	err := store.ScanTable(ctx, c.Store, l.CallsDir(in.Round, in.Phase),
		func(r schemas.CallCounts) string { return r.EpisodeID }, nil,
		func(rows []schemas.CallCounts) error {
			for _, r := range rows {
				calls++
				if r.Trainable {
					trainable++
				} else {
					by[r.UntrainableReason]++
				}
			}
			return nil
		})
	if err != nil {
		return fmt.Errorf("round %d validation calls: %w", in.Round, err)
	}
	if calls == 0 || trainable > 0 {
		return nil
	}
	var reasons []string
	for r := range by {
		if !sampling.IsSamplingReason(r) {
			return nil
		}
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"harness %s: none of the %d calls of round %d's validation could train, as they were sampled (%s; model_server.sampling: "+
			"logprobs_mode %s, generation_config %s): the trainer cannot reproduce that distribution (docs/design.md §3, "+
			"\"Sampling settings\"), and collection would record only calls the batch drops. Fix: %s",
		h.Name, calls, in.Round, report.CauseList(by), sampling.Mode(h.Model.Sampling),
		cmp.Or(h.Model.Sampling.GenerationConfig, schemas.GenerationConfigAuto), sampling.Fix(strings.Join(reasons, ","))),
		"Untrainable", nil)
}
