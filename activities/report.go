package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/roundhouse-rl/roundhouse/internal/report"
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
}

// WriteReport aggregates a phase's episodes per task and suite into
// eval/<tag>/report.json, or a shard's report. When the init key names a
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
			return rep, fmt.Errorf("report %s: %w", in.Tag, err)
		}
		rep.WeightsDigest = schemas.WeightsDigest(man.Files)
	}
	type cellKey struct{ task, init int32 }
	var want map[cellKey]bool // nil: every episode of the phase counts
	cells, total, cellErr := report.SplitCells(h, in.InitKey, in.Shard, in.Shards)
	if cellErr == nil {
		want = make(map[cellKey]bool, len(cells))
		rep.SplitCells = total
		for _, cl := range cells {
			want[cellKey{cl.Task.ID, cl.InitID}] = true
			rep.Cells = append(rep.Cells, schemas.CellID(cl.Task.ID, cl.InitID))
		}
	} else if in.Shards > 1 {
		return rep, fmt.Errorf("report %s: %w", in.Tag, cellErr)
	}
	rep.Tasks, rep.Suites = report.EmptyResults(h.Tasks)
	if in.InitKey == report.FinalKey {
		rep.Protocol, rep.ProtocolEpisodes, rep.RequiredTasks = h.Protocol.Name, h.Protocol.Episodes, h.RequiredTasks()
	}
	byTask := map[int32]*schemas.TaskResult{}
	for i := range rep.Tasks {
		byTask[rep.Tasks[i].Task] = &rep.Tasks[i]
	}
	bySuite := map[string]*schemas.TaskResult{}
	for i := range rep.Suites {
		bySuite[rep.Suites[i].Suite] = &rep.Suites[i]
	}
	seen := map[cellKey]bool{}
	for _, e := range eps {
		k := cellKey{e.Task, e.InitID}
		// Other shards' cells share the phase; rows of other weights are a
		// replaced evaluation's leftovers.
		if want != nil && (!want[k] || e.WeightsID != in.WeightsID) {
			continue
		}
		t := byTask[e.Task]
		if t == nil {
			return rep, fmt.Errorf("episode %s has task %d, which harness %s does not list", e.EpisodeID, e.Task, h.Name)
		}
		seen[k] = true
		for _, r := range []*schemas.TaskResult{t, bySuite[t.Suite], &rep.Overall} {
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
	for _, cl := range cells {
		if cellErr != nil || seen[cellKey{cl.Task.ID, cl.InitID}] {
			continue
		}
		rep.Missing = append(rep.Missing, schemas.CellID(cl.Task.ID, cl.InitID))
		for _, r := range []*schemas.TaskResult{byTask[cl.Task.ID], bySuite[cl.Task.Suite], &rep.Overall} {
			if r != nil {
				r.Lost++
			}
		}
	}
	rep.MaxInvalidShare = h.Collect.InvalidLimit()
	report.FinishRates(&rep)
	if rep.Scope == schemas.ScopeFull && rep.Overall.Valid > 0 {
		instr.RoundSuccess(ctx, in.Run, in.Round, in.Phase, rep.Overall.SuccessRate)
	}
	rep.FinishedAtMS = time.Now().UnixMilli()
	// Written once: a report that is there stands (a tag is replaced only
	// by --replace-tag, which deletes it first), so a late or repeated
	// writer returns the stored one instead of replacing it.
	created, err := store.PutJSONIfAbsent(ctx, c.Store, key, rep)
	if err != nil {
		return rep, err
	}
	if !created {
		activity.GetLogger(ctx).Info("report already written; returning the stored one", "key", key)
		var stored schemas.Report
		if err := store.GetJSON(ctx, c.Store, key, &stored); err != nil {
			return rep, err
		}
		rep = stored
	}
	// The cell lists stay in S3: workflow history gets the counts only.
	rep.Cells, rep.Missing = nil, nil
	return rep, nil
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
