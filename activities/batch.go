package activities

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/npz"
	"github.com/roundhouse-rl/roundhouse/internal/rl"
	"github.com/roundhouse-rl/roundhouse/internal/sampling"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// BatchInput names the round whose collected episodes become a batch.
type BatchInput struct {
	Run                string
	Round              int32
	MaxCallsPerEpisode int
	Selection          string // rl.SelectRandom (default), SelectFirst, SelectLast, SelectSpread
	Seed               int64
	// Filters drop calls before selection (length, post-success).
	Filters schemas.Filters
	// TrainerWeightsID is the weights the round's trainer starts from;
	// each sample's staleness is counted against it, and a sample more
	// than MaxStaleness versions older is refused (docs/design.md §4,
	// "Overlapped rounds"). "" in inputs from before: staleness 0.
	TrainerWeightsID string `json:",omitempty"`
	MaxStaleness     int32  `json:",omitempty"`
}

// BuildBatch computes leave-one-out advantages per group over valid
// episodes, drops calls the filters exclude, selects at most
// MaxCallsPerEpisode trainable calls per episode, each weighing
// 1/(selected in its episode), and writes samples.parquet and batch.npz.
// Same inputs, same keys and bytes: safe to retry.
//
// Memory follows the selected batch, not the round: advantages and
// selection read only the calls' ids and token counts; token arrays are
// then read for the selected calls only and streamed to a temp file.
func (c *Records) BuildBatch(ctx context.Context, in BatchInput) (schemas.BatchSummary, error) {
	samples, sum, err := c.planBatch(ctx, in)
	if err == nil && sum.Valid > 0 {
		instr.RoundSuccess(ctx, in.Run, in.Round, schemas.PhaseTrain, float64(sum.Successes)/float64(sum.Valid))
	}
	if err != nil || len(samples) == 0 {
		return sum, err
	}
	l := schemas.Layout{Run: in.Run}
	if _, err := store.WriteParquet(ctx, c.Store, l.Samples(in.Round), samples); err != nil {
		return sum, err
	}
	heartbeat(ctx, "samples")
	tmp, err := os.CreateTemp("", "batch-*.npz")
	if err != nil {
		return sum, fmt.Errorf("round %d batch: %w", in.Round, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if sum.Images, sum.ImageRefs, err = c.writeBatch(ctx, in, samples, tmp); err != nil {
		return sum, fmt.Errorf("round %d batch: %w", in.Round, err)
	}
	if err := tmp.Close(); err != nil {
		return sum, fmt.Errorf("round %d batch: %w", in.Round, err)
	}
	sum.BatchKey = l.Batch(in.Round)
	if err := c.Store.PutFile(ctx, sum.BatchKey, tmp.Name()); err != nil {
		return sum, err
	}
	return sum, nil
}

// planned is an episode of a group with signal, and its calls' counts.
type planned struct {
	ep    schemas.Episode
	adv   float64
	stale int32 // versions between the episode's weights and the trainer's
	calls []schemas.CallCounts
}

// PlanBatch is the samples and summary BuildBatch would make from the
// round's tables in s now, without writing anything. A reader that
// verifies a trained batch (deploy/drill) compares it with the round's
// samples table. (A function, not a method: Records' methods are its
// activities.)
func PlanBatch(ctx context.Context, s *store.Store, in BatchInput) ([]schemas.Sample, schemas.BatchSummary, error) {
	return (&Records{Store: s}).planBatch(ctx, in)
}

// planBatch is advantages and selection: the samples in batch order (group,
// then episode id, then call index) and the summary, from episode rows and
// the calls' CallCounts projection.
func (c *Records) planBatch(ctx context.Context, in BatchInput) ([]schemas.Sample, schemas.BatchSummary, error) {
	var sum schemas.BatchSummary
	eps, err := c.readEpisodes(ctx, in.Run, in.Round, schemas.PhaseTrain)
	if err != nil {
		return nil, sum, err
	}
	order := withAdvantages(validGroups(eps, &sum), &sum)
	if len(order) == 0 {
		return nil, sum, nil
	}
	if err := staleness(in, order); err != nil {
		return nil, sum, err
	}
	if err := c.readCallCounts(ctx, in, order); err != nil {
		return nil, sum, fmt.Errorf("round %d calls: %w", in.Round, err)
	}
	heartbeat(ctx, "selection")
	samples := selectSamples(in, order, &sum)
	sum.Samples = len(samples)
	return samples, sum, nil
}

// validGroups counts the episodes into sum (invalid ones by cause, task
// failures by reason) and returns the valid ones by group.
func validGroups(eps []schemas.Episode, sum *schemas.BatchSummary) map[int32][]schemas.Episode {
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
		} else {
			if sum.TaskFailuresByReason == nil {
				sum.TaskFailuresByReason = map[string]int{}
			}
			reason := e.Reason
			if reason == "" {
				reason = "unrecorded"
			}
			sum.TaskFailuresByReason[reason]++
		}
		groups[e.Group] = append(groups[e.Group], e)
	}
	return groups
}

// withAdvantages gives each episode of a group with reward diversity its
// leave-one-out advantage, in batch order (group, then episode id);
// groups without signal are counted, then dropped.
func withAdvantages(groups map[int32][]schemas.Episode, sum *schemas.BatchSummary) []*planned {
	ids := make([]int32, 0, len(groups))
	for g := range groups {
		ids = append(ids, g)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	sum.Groups = len(ids)
	var order []*planned
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
		for i, a := range rl.LeaveOneOut(rewards) {
			order = append(order, &planned{ep: members[i], adv: a})
		}
	}
	return order
}

// readCallCounts reads the CallCounts projection of the calls of the
// planned episodes into them.
func (c *Records) readCallCounts(ctx context.Context, in BatchInput, order []*planned) error {
	byID := make(map[string]*planned, len(order))
	for _, p := range order {
		byID[p.ep.EpisodeID] = p
	}
	l := schemas.Layout{Run: in.Run}
	return store.ScanTable(ctx, c.Store, l.CallsDir(in.Round, schemas.PhaseTrain),
		func(r schemas.CallCounts) string { return r.EpisodeID }, nil,
		func(rows []schemas.CallCounts) error {
			for _, r := range rows {
				if p := byID[r.EpisodeID]; p != nil {
					r.EpisodeID = "" // the map key holds it; no string per call
					p.calls = append(p.calls, r)
				}
			}
			return nil
		})
}

// selectSamples counts each planned episode's calls into sum, drops the
// untrainable and filtered ones and selects at most MaxCallsPerEpisode of
// the rest, each weighing 1/(selected in its episode). It frees the
// episodes' calls as it goes.
func selectSamples(in BatchInput, order []*planned, sum *schemas.BatchSummary) []schemas.Sample {
	var samples []schemas.Sample
	var eligible []int32
	for _, p := range order {
		sort.Slice(p.calls, func(i, j int) bool { return p.calls[i].CallIndex < p.calls[j].CallIndex })
		eligible = eligible[:0]
		for _, call := range p.calls {
			sum.Calls++
			// The proxy marks a call trainable only when its id counts match
			// usage, so the counts stand in for the arrays here.
			if !call.Trainable || call.CompletionTokens <= 0 {
				sum.UntrainableCalls++
				if sum.UntrainableByReason == nil {
					sum.UntrainableByReason = map[string]int{}
				}
				sum.UntrainableByReason[cmp.Or(call.UntrainableReason, "unrecorded")]++
				continue
			}
			switch rl.FilterCall(in.Filters, in.Round, call.CallIndex, int(call.PromptTokens)+int(call.CompletionTokens), p.ep.SuccessCall) {
			case rl.DropLength:
				sum.DroppedLength++
				continue
			case rl.DropPostSuccess:
				sum.DroppedPostSuccess++
				continue
			}
			eligible = append(eligible, call.CallIndex)
		}
		sel := rl.SelectCalls(len(eligible), in.MaxCallsPerEpisode, in.Selection, in.Seed, p.ep.EpisodeID)
		for _, k := range sel {
			call := p.calls[indexOf(p.calls, eligible[k])]
			samples = append(samples, schemas.Sample{Run: in.Run, Round: in.Round, EpisodeID: p.ep.EpisodeID,
				Group: p.ep.Group, CallIndex: call.CallIndex, Advantage: p.adv, Weight: 1 / float64(len(sel)),
				PromptTokens: call.PromptTokens, CompletionTokens: call.CompletionTokens,
				Temperature: sampling.TrainerTemperature(schemas.Sampling{Temperature: call.Temperature, LogprobsMode: call.LogprobsMode}),
				WeightsID:   p.ep.WeightsID, Staleness: p.stale})
			if sum.Staleness == nil {
				sum.Staleness, sum.SampledBy = schemas.Staleness{}, map[string]int{}
			}
			sum.Staleness[p.stale]++
			sum.SampledBy[p.ep.WeightsID]++
			if p.adv == 0 {
				sum.ZeroWeightSamples++
			}
		}
		p.calls = nil
	}
	return samples
}

// staleness sets each planned episode's staleness: its weights' version
// below the trainer's starting weights'. The workflow starts a round's
// collection only on weights within the bound; this is the check on what
// the records say, so an episode stored on other weights (a resumed round
// finding an earlier try published) cannot slip past it.
func staleness(in BatchInput, order []*planned) error {
	if in.TrainerWeightsID == "" {
		return nil
	}
	for _, p := range order {
		if p.ep.WeightsID == in.TrainerWeightsID {
			continue
		}
		top, err := schemas.WeightsVersion(in.TrainerWeightsID)
		if err != nil {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("round %d batch: trainer's %v", in.Round, err), "BadBatch", nil)
		}
		v, err := schemas.WeightsVersion(p.ep.WeightsID)
		if err != nil {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("round %d batch: episode %s: %v", in.Round, p.ep.EpisodeID, err), "BadBatch", nil)
		}
		p.stale = top - v
		if p.stale < 0 || p.stale > in.MaxStaleness {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"round %d batch: episode %s ran on weights %s, %d versions from the trainer's %s, outside the bound 0…%d (collect.max_staleness): "+
					"the round's records do not match its collection; rerun the round after deleting its episodes (starter train --replace starts over)",
				in.Round, p.ep.EpisodeID, p.ep.WeightsID, p.stale, in.TrainerWeightsID, in.MaxStaleness), "StaleSample", nil)
		}
	}
	return nil
}

// indexOf finds a call index in calls sorted by index.
func indexOf(calls []schemas.CallCounts, idx int32) int {
	return sort.Search(len(calls), func(i int) bool { return calls[i].CallIndex >= idx })
}

// writeBatch reads the token arrays of the selected calls only (skipping
// the files of episodes without a selected call) and streams batch.npz
// (schemas/batch.go) to w. Array lengths come from the samples' counts,
// checked against the arrays read. It returns the distinct images and the
// image references of the samples.
func (c *Records) writeBatch(ctx context.Context, in BatchInput, samples []schemas.Sample, w io.Writer) (int, int, error) {
	type key struct {
		ep  string
		idx int32
	}
	pos := make(map[key]int, len(samples))
	wanted := map[string]bool{}
	for i, s := range samples {
		pos[key{s.EpisodeID, s.CallIndex}] = i
		wanted[s.EpisodeID] = true
	}
	toks := make([]schemas.CallTokens, len(samples))
	found := 0
	l := schemas.Layout{Run: in.Run}
	dir := l.CallsDir(in.Round, schemas.PhaseTrain)
	err := store.ScanTable(ctx, c.Store, dir, func(r schemas.CallTokens) string { return r.EpisodeID },
		func(k string) bool { return !wanted[strings.TrimSuffix(strings.TrimPrefix(k, dir), ".parquet")] },
		func(rows []schemas.CallTokens) error {
			for _, r := range rows {
				i, ok := pos[key{r.EpisodeID, r.CallIndex}]
				if !ok || toks[i].EpisodeID != "" {
					continue
				}
				s := samples[i]
				if len(r.PromptTokenIDs) != int(s.PromptTokens) || len(r.CompletionTokenIDs) != int(s.CompletionTokens) ||
					len(r.CompletionLogprobs) != len(r.CompletionTokenIDs) {
					return fmt.Errorf("call %d of %s: %d prompt ids, %d completion ids, %d logprobs disagree with its counts %d and %d",
						r.CallIndex, r.EpisodeID, len(r.PromptTokenIDs), len(r.CompletionTokenIDs), len(r.CompletionLogprobs), s.PromptTokens, s.CompletionTokens)
				}
				// Copy: the reader may reuse the row's backing arrays.
				toks[i] = schemas.CallTokens{EpisodeID: r.EpisodeID, CallIndex: r.CallIndex,
					PromptTokenIDs: slices.Clone(r.PromptTokenIDs), CompletionTokenIDs: slices.Clone(r.CompletionTokenIDs),
					CompletionLogprobs: slices.Clone(r.CompletionLogprobs), Images: slices.Clone(r.Images)}
				found++
			}
			return nil
		})
	if err != nil {
		return 0, 0, err
	}
	if found != len(samples) {
		return 0, 0, fmt.Errorf("%d of %d selected calls not found under %s", len(samples)-found, len(samples), dir)
	}
	heartbeat(ctx, "tokens")
	perSample := make([][]string, len(toks))
	for i, t := range toks {
		perSample[i] = t.Images
	}
	names, index, offsets := schemas.IndexImages(perSample)
	if len(index) > 0 {
		if err := c.checkVision(ctx, in.Run, toks, len(index)); err != nil {
			return 0, 0, err
		}
	}
	return len(names), len(index), encodeBatch(w, samples, toks, names, index, offsets)
}

// checkVision refuses the refs images of toks for a harness that declares
// a text-only model: training it on the prompt without them would teach it
// from input it never saw, silently.
func (c *Records) checkVision(ctx context.Context, run string, toks []schemas.CallTokens, refs int) error {
	h, err := c.harnesses.get(ctx, c.Store, run)
	if err != nil {
		return err
	}
	if h.Model.Vision {
		return nil
	}
	calls, first := 0, -1
	for i, t := range toks {
		if len(t.Images) > 0 {
			calls++
			if first < 0 {
				first = i
			}
		}
	}
	t := toks[first]
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"harness %s declares a text-only model (model_server.vision is false) but %d selected calls sent images, "+
			"%d in all, the first call %d of episode %s: set model_server.vision: true in the harness file for a "+
			"vision-language model, or stop the harness from sending images",
		h.Name, calls, refs, t.CallIndex, t.EpisodeID), "TextOnlyModel", nil)
}

// encodeBatch streams the batch arrays to w, one array after another.
func encodeBatch(w io.Writer, samples []schemas.Sample, toks []schemas.CallTokens, images []string, imageIndex []int32, imageOffsets []int64) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	z := npz.NewWriter(bw)
	var nPrompt, nCompl int
	for _, s := range samples {
		nPrompt += int(s.PromptTokens)
		nCompl += int(s.CompletionTokens)
	}
	ids := func(name string, n int, get func(schemas.CallTokens) []int32) error {
		a, err := z.Begin(name, npz.Int32, n)
		if err != nil {
			return err
		}
		for _, t := range toks {
			if err := a.Int32(get(t)...); err != nil {
				return err
			}
		}
		return nil
	}
	offsets := func(name string, count func(schemas.Sample) int32) error {
		a, err := z.Begin(name, npz.Int64, len(samples)+1)
		if err != nil {
			return err
		}
		off := make([]int64, 1, len(samples)+1)
		for _, s := range samples {
			off = append(off, off[len(off)-1]+int64(count(s)))
		}
		return a.Int64(off...)
	}
	perCall := func(name string, get func(schemas.Sample) float64) error {
		v := make([]float32, len(samples))
		for i, s := range samples {
			v[i] = float32(get(s))
		}
		return z.WriteFloat32(name, v)
	}
	for _, step := range []func() error{
		func() error {
			return ids(schemas.BatchPromptIDs, nPrompt, func(t schemas.CallTokens) []int32 { return t.PromptTokenIDs })
		},
		func() error {
			return offsets(schemas.BatchPromptOffsets, func(s schemas.Sample) int32 { return s.PromptTokens })
		},
		func() error {
			return ids(schemas.BatchCompletionIDs, nCompl, func(t schemas.CallTokens) []int32 { return t.CompletionTokenIDs })
		},
		func() error {
			return offsets(schemas.BatchCompletionOffsets, func(s schemas.Sample) int32 { return s.CompletionTokens })
		},
		func() error {
			a, err := z.Begin(schemas.BatchRolloutLogprobs, npz.Float32, nCompl)
			if err != nil {
				return err
			}
			for _, t := range toks {
				if err := a.Float32(t.CompletionLogprobs...); err != nil {
					return err
				}
			}
			return nil
		},
		func() error {
			return perCall(schemas.BatchAdvantages, func(s schemas.Sample) float64 { return s.Advantage })
		},
		func() error { return perCall(schemas.BatchWeights, func(s schemas.Sample) float64 { return s.Weight }) },
		func() error {
			return perCall(schemas.BatchTemperatures, func(s schemas.Sample) float64 { return s.Temperature })
		},
		func() error {
			v := make([]int32, len(samples))
			for i, s := range samples {
				v[i] = s.Staleness
			}
			return z.WriteInt32(schemas.BatchStaleness, v)
		},
		func() error { return z.WriteStrings(schemas.BatchImages, images) },
		func() error { return z.WriteInt32(schemas.BatchImageIndex, imageIndex) },
		func() error { return z.WriteInt64(schemas.BatchImageOffsets, imageOffsets) },
		z.Close,
		bw.Flush,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}
