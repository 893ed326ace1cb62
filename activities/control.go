package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/roundhouse-rl/roundhouse/internal/npz"
	"github.com/roundhouse-rl/roundhouse/internal/rl"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Control holds the activities that read and write the run's data in S3
// without running harness code: batches, reports and state.
type Control struct {
	Store *store.Store

	harnesses harnessCache
}

// readEpisodes reads every episode row of a round's phase, compacted or not.
func (c *Control) readEpisodes(ctx context.Context, run string, round int32, phase string) ([]schemas.Episode, error) {
	out, err := store.ReadTable(ctx, c.Store, schemas.Layout{Run: run}.EpisodesDir(round, phase), episodeID)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].EpisodeID < out[j].EpisodeID })
	return out, nil
}

func episodeID(e schemas.Episode) string { return e.EpisodeID }

func callEpisode(c schemas.Call) string { return c.EpisodeID }

// CompactInput names a partition pair (calls and episodes) of a round's phase.
type CompactInput struct {
	Run   string
	Round int32
	Phase string
}

// Compact folds a phase's per-episode calls and episodes files into one
// part file each, once the round no longer writes them.
func (c *Control) Compact(ctx context.Context, in CompactInput) (store.CompactStats, error) {
	l := schemas.Layout{Run: in.Run}
	calls, err := store.Compact(ctx, c.Store, l.CallsDir(in.Round, in.Phase), callEpisode)
	if err != nil {
		return calls, err
	}
	activity.RecordHeartbeat(ctx, "calls")
	eps, err := store.Compact(ctx, c.Store, l.EpisodesDir(in.Round, in.Phase), episodeID)
	calls.Merged += eps.Merged
	calls.Rows += eps.Rows
	calls.Bytes += eps.Bytes
	return calls, err
}

// BatchInput names the round whose collected episodes become a batch.
type BatchInput struct {
	Run                string
	Round              int32
	MaxCallsPerEpisode int
	Seed               int64
}

// BuildBatch computes leave-one-out advantages per group over valid
// episodes, selects at most MaxCallsPerEpisode trainable calls per episode,
// each weighing 1/(selected in its episode), and writes samples.parquet and
// batch.npz. Same inputs, same keys and bytes: safe to retry.
func (c *Control) BuildBatch(ctx context.Context, in BatchInput) (schemas.BatchSummary, error) {
	var sum schemas.BatchSummary
	eps, err := c.readEpisodes(ctx, in.Run, in.Round, schemas.PhaseTrain)
	if err != nil {
		return sum, err
	}
	groups := map[int32][]schemas.Episode{}
	for _, e := range eps {
		sum.Episodes++
		if !e.Valid {
			sum.Invalid++
			if sum.InvalidByCause == nil {
				sum.InvalidByCause = map[string]int{}
			}
			sum.InvalidByCause[e.FailureClass]++
			continue
		}
		sum.Valid++
		if e.Success {
			sum.Successes++
		}
		groups[e.Group] = append(groups[e.Group], e)
	}
	ids := make([]int32, 0, len(groups))
	for g := range groups {
		ids = append(ids, g)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	sum.Groups = len(ids)

	l := schemas.Layout{Run: in.Run}
	var samples []schemas.Sample
	var b batchArrays
	for _, g := range ids {
		members := groups[g]
		rewards := make([]float64, len(members))
		for i, e := range members {
			rewards[i] = e.Reward
		}
		if !rl.HasSignal(rewards) || len(members) < 2 {
			continue // no reward diversity: counted, then dropped
		}
		sum.GroupsWithSignal++
		adv := rl.LeaveOneOut(rewards)
		for i, e := range members {
			calls, err := store.ReadParquet[schemas.Call](ctx, c.Store, l.Calls(in.Round, schemas.PhaseTrain, e.EpisodeID))
			if err != nil {
				return sum, err
			}
			var trainable []schemas.Call
			for _, call := range calls {
				sum.Calls++
				if call.Trainable && len(call.CompletionTokenIDs) > 0 && len(call.CompletionLogprobs) == len(call.CompletionTokenIDs) {
					trainable = append(trainable, call)
				} else {
					sum.UntrainableCalls++
				}
			}
			sel := rl.SelectCalls(len(trainable), in.MaxCallsPerEpisode, in.Seed, e.EpisodeID)
			for _, k := range sel {
				call := trainable[k]
				w := 1 / float64(len(sel))
				samples = append(samples, schemas.Sample{Run: in.Run, Round: in.Round, EpisodeID: e.EpisodeID,
					Group: e.Group, CallIndex: call.CallIndex, Advantage: adv[i], Weight: w,
					PromptTokens: int32(len(call.PromptTokenIDs)), CompletionTokens: int32(len(call.CompletionTokenIDs))})
				if adv[i] == 0 {
					sum.ZeroWeightSamples++
				}
				b.add(call, adv[i], w)
			}
			activity.RecordHeartbeat(ctx, e.EpisodeID)
		}
	}
	sum.Samples = len(samples)
	if len(samples) == 0 {
		return sum, nil
	}
	if _, err := store.WriteParquet(ctx, c.Store, l.Samples(in.Round), samples); err != nil {
		return sum, err
	}
	data, err := b.encode()
	if err != nil {
		return sum, fmt.Errorf("round %d batch: %w", in.Round, err)
	}
	sum.BatchKey = l.Batch(in.Round)
	if err := c.Store.Put(ctx, sum.BatchKey, data); err != nil {
		return sum, err
	}
	return sum, nil
}

// batchArrays accumulates the batch.npz arrays (schemas/batch.go).
type batchArrays struct {
	promptIDs, complIDs   []int32
	promptOff, complOff   []int64
	logprobs, adv, weight []float32
}

func (b *batchArrays) add(c schemas.Call, adv, w float64) {
	if len(b.promptOff) == 0 {
		b.promptOff, b.complOff = []int64{0}, []int64{0}
	}
	b.promptIDs = append(b.promptIDs, c.PromptTokenIDs...)
	b.complIDs = append(b.complIDs, c.CompletionTokenIDs...)
	b.promptOff = append(b.promptOff, int64(len(b.promptIDs)))
	b.complOff = append(b.complOff, int64(len(b.complIDs)))
	b.logprobs = append(b.logprobs, c.CompletionLogprobs...)
	b.adv = append(b.adv, float32(adv))
	b.weight = append(b.weight, float32(w))
}

func (b *batchArrays) encode() ([]byte, error) {
	var buf bytes.Buffer
	w := npz.NewWriter(&buf)
	for _, err := range []error{
		w.WriteInt32(schemas.BatchPromptIDs, b.promptIDs),
		w.WriteInt64(schemas.BatchPromptOffsets, b.promptOff),
		w.WriteInt32(schemas.BatchCompletionIDs, b.complIDs),
		w.WriteInt64(schemas.BatchCompletionOffsets, b.complOff),
		w.WriteFloat32(schemas.BatchRolloutLogprobs, b.logprobs),
		w.WriteFloat32(schemas.BatchAdvantages, b.adv),
		w.WriteFloat32(schemas.BatchWeights, b.weight),
	} {
		if err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ReportInput names the episodes a report covers.
type ReportInput struct {
	Run       string
	Round     int32
	Phase     string
	Tag       string
	WeightsID string
	InitKey   string
}

// WriteReport aggregates a phase's episodes per task into eval/<tag>/report.json.
func (c *Control) WriteReport(ctx context.Context, in ReportInput) (schemas.Report, error) {
	h, err := c.harnesses.get(ctx, c.Store, in.Run)
	if err != nil {
		return schemas.Report{}, err
	}
	eps, err := c.readEpisodes(ctx, in.Run, in.Round, in.Phase)
	if err != nil {
		return schemas.Report{}, err
	}
	rep := schemas.Report{Run: in.Run, Tag: in.Tag, WeightsID: in.WeightsID, InitKey: in.InitKey,
		Harness: h.Name, Digest: h.Digest, Round: in.Round}
	byTask := map[int32]*schemas.TaskResult{}
	for _, t := range h.Tasks {
		rep.Tasks = append(rep.Tasks, schemas.TaskResult{Task: t.ID, Name: t.Name, Suite: t.Suite})
	}
	for i := range rep.Tasks {
		byTask[rep.Tasks[i].Task] = &rep.Tasks[i]
	}
	for _, e := range eps {
		t := byTask[e.Task]
		if t == nil {
			return rep, fmt.Errorf("episode %s has task %d, which harness %s does not list", e.EpisodeID, e.Task, h.Name)
		}
		for _, r := range []*schemas.TaskResult{t, &rep.Overall} {
			r.Episodes++
			if !e.Valid {
				r.Invalid++
				continue
			}
			r.Valid++
			if e.Success {
				r.Successes++
			}
		}
	}
	rep.Overall.Task = -1
	for _, r := range append([]*schemas.TaskResult{&rep.Overall}, pointers(rep.Tasks)...) {
		if r.Valid > 0 {
			r.SuccessRate = float64(r.Successes) / float64(r.Valid)
		}
	}
	return rep, putJSON(ctx, c.Store, schemas.Layout{Run: in.Run}.Report(in.Tag), rep)
}

func pointers(ts []schemas.TaskResult) []*schemas.TaskResult {
	out := make([]*schemas.TaskResult, len(ts))
	for i := range ts {
		out[i] = &ts[i]
	}
	return out
}

// ReadReport loads a report (e.g. a --pool-report) stored in the bucket.
func (c *Control) ReadReport(ctx context.Context, key string) (schemas.Report, error) {
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

// RoundDoneInput is a finished round and the run's state after it.
type RoundDoneInput struct {
	Summary schemas.RoundSummary
	State   schemas.State
}

// FinishRound writes the round's summary.json and the run's state.json.
func (c *Control) FinishRound(ctx context.Context, in RoundDoneInput) error {
	l := schemas.Layout{Run: in.State.Run}
	if in.Summary.Round > 0 {
		if err := putJSON(ctx, c.Store, l.Summary(in.Summary.Round), in.Summary); err != nil {
			return err
		}
	}
	in.State.UpdatedAtMS = time.Now().UnixMilli()
	return putJSON(ctx, c.Store, l.State(), in.State)
}
