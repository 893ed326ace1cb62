// Package drill checks what a training run left against what its workflow
// accepted, and runs the fault drill (issue 14) that uses the check.
//
// Check reads two sources that must agree. S3, through the documented
// layout only (docs/design.md §3): every Parquet object of a partition,
// part files and per-episode files alike, as DuckDB reading
// runs/<run>/episodes/**/*.parquet would; run.json, harness.json, the
// round summaries, samples and weights manifests. And Temporal's history:
// the completions of RunEpisode in the run's Episodes child workflows, and
// of Train, which are the results the workflow accepted (§8 "Fenced
// against late writers"). Anything stored that the workflow did not accept,
// or accepted and not stored, is a finding.
package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/rl"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// checkTimeout bounds one Check: histories and a few hundred small objects.
const checkTimeout = 3 * time.Minute

// Result is what Check found for one run.
type Result struct {
	Run string
	// Planned is every episode the run's started rounds asked for:
	// rounds × groups × attempts of collection plus the validation cells
	// of each validated round (run.json, harness.json).
	Planned int
	// Stored is the planned episodes with at least one row in the tables;
	// Lost those with none; Duplicated those with more than one.
	Stored, Lost, Duplicated int
	// Accepted is the episodes whose RunEpisode completion the workflow
	// accepted (history); WorkflowLost the planned ones it never accepted
	// (an activity that failed for good: the round counts them lost).
	Accepted, WorkflowLost int
	// CallsLost is the calls accepted rows say they made (num_calls) that
	// the calls table lacks, from the accepted try.
	CallsLost int
	// LateWrites is tries that staged records or artifacts under
	// …/<episode>/<try>/ but were not accepted: late (zombie) or failed
	// tries whose writes stayed beside the tables, refused by the workflow.
	LateWrites int
	// Staged is the tries left under staged/: a published episode's go
	// (DropStaged), so these are unpublished episodes' and late writes.
	Staged int
	// Corrupt is tries whose staged records Publish refused as corrupt;
	// their episodes were run again. They are not counted in LateWrites.
	Corrupt int
	// Unreadable is the table objects that would not decode as Parquet.
	Unreadable int
	// Samples is the rows of the rounds' samples.parquet, all checked
	// against the accepted rows; Weights the Train results checked.
	Samples, Weights int
	// Stale is the samples whose episode ran on older weights than their
	// round's trainer started from (overlapped rounds), BeyondBound those
	// more than the round's max staleness older: each is also a problem.
	Stale, BeyondBound int
	// Problems lists every disagreement, one line each; empty is a pass.
	Problems []string
}

// OK is true when nothing disagreed and nothing planned was lost or stored
// twice.
func (r Result) OK() bool {
	return len(r.Problems) == 0 && r.Lost == 0 && r.Duplicated == 0 && r.CallsLost == 0 && r.BeyondBound == 0
}

func (r *Result) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Accepted is what a run's workflow histories accepted.
type Accepted struct {
	// Episodes maps an episode id to the result whose try was published
	// (a result of a later execution that found the row stored, Recorded,
	// only when no other exists).
	Episodes map[string]activities.EpisodeResult
	// Train maps output weights (r<R>) to the metrics of the Train
	// completion the workflow recorded.
	Train map[string]schemas.TrainerMetrics
	// Rounds is the rounds whose Train workflow execution started.
	Rounds map[int32]bool
	// Completed is true when the run's last execution completed.
	Completed bool
	// Conflicts lists episodes accepted with two different tries.
	Conflicts []string
	// Batches maps a round to the input of its completed BuildBatch.
	Batches map[int32]activities.BatchInput
	// Refused is the tries Publish refused as corrupt (episode id/try);
	// their episodes were run again.
	Refused map[string]bool
	// completed is every RunEpisode completion per episode, in history
	// order, until AcceptedOf settles Episodes from it.
	completed map[string][]activities.EpisodeResult
}

// ReadAccepted is AcceptedOf the run's Train workflow, train-<run>.
func ReadAccepted(ctx context.Context, c client.Client, run string) (Accepted, error) {
	return AcceptedOf(ctx, c, api.WorkflowID(run))
}

// AcceptedOf walks a workflow's executions (continue-as-new, newest back
// to the first) and every child workflow they started, collecting the
// completions of RunEpisode and Train: a training run's (Train) or an
// evaluation's (Eval) alike.
func AcceptedOf(ctx context.Context, c client.Client, workflowID string) (Accepted, error) {
	acc := Accepted{Episodes: map[string]activities.EpisodeResult{}, Train: map[string]schemas.TrainerMetrics{}, Rounds: map[int32]bool{},
		Batches: map[int32]activities.BatchInput{}, Refused: map[string]bool{}, completed: map[string][]activities.EpisodeResult{}}
	dc := converter.GetDefaultDataConverter()
	seen := map[string]bool{}
	// walk reads one workflow id's executions, from runID back through
	// ContinuedExecutionRunId; top says whether it is the Train workflow.
	var walk func(id, runID string, top bool) error
	walk = func(id, runID string, top bool) error {
		for first := true; ; first = false {
			if seen[id+"/"+runID] && runID != "" {
				return nil
			}
			seen[id+"/"+runID] = true
			prev, closed, err := walkExecution(ctx, c, dc, id, runID, top, &acc, func(child, childRun string) error {
				return walk(child, "", false)
			})
			if err != nil {
				return err
			}
			if top && first {
				acc.Completed = closed == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
			}
			if prev == "" {
				return nil
			}
			runID = prev
		}
	}
	if err := walk(workflowID, "", true); err != nil {
		return acc, err
	}
	for id, rs := range acc.completed {
		for _, r := range rs {
			if acc.Refused[id+"/"+r.Try] {
				continue
			}
			old, ok := acc.Episodes[id]
			switch {
			case !ok || (old.Recorded && !r.Recorded):
				acc.Episodes[id] = r
			case !r.Recorded && !old.Recorded && old.Try != r.Try:
				acc.Conflicts = append(acc.Conflicts, fmt.Sprintf("%s accepted as %s and as %s", id, old.Try, r.Try))
			}
		}
	}
	sort.Strings(acc.Conflicts)
	acc.completed = nil
	return acc, nil
}

// walkExecution reads one execution's history. It returns the run id it
// continued from ("" for a first) and the type of its closing event.
func walkExecution(ctx context.Context, c client.Client, dc converter.DataConverter, id, runID string, top bool, acc *Accepted,
	child func(id, runID string) error) (string, enumspb.EventType, error) {
	var prev string
	var closed enumspb.EventType
	scheduled := map[int64]*historypb.ActivityTaskScheduledEventAttributes{}
	var topRounds int32 // the rounds the Train execution was asked for
	var children [][2]string
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return "", 0, fmt.Errorf("history of %s %s: %w", id, runID, err)
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
			closed = ev.GetEventType()
		}
		if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			prev = a.GetContinuedExecutionRunId()
			if top && a.GetWorkflowType().GetName() == "Train" {
				var in api.TrainInput
				if err := dc.FromPayloads(a.GetInput(), &in); err != nil {
					return "", 0, fmt.Errorf("input of %s %s: %w", id, runID, err)
				}
				acc.Rounds[in.Round] = true
				topRounds = in.Rounds
			}
		}
		// An overlapped run starts its rounds inside one execution: a
		// round whose collection, or opening validation, started has
		// started.
		if a := ev.GetStartChildWorkflowExecutionInitiatedEventAttributes(); a != nil && top && a.GetWorkflowType().GetName() == "Episodes" {
			var in api.EpisodesInput
			if err := dc.FromPayloads(a.GetInput(), &in); err != nil {
				return "", 0, fmt.Errorf("child input in %s %s: %w", id, runID, err)
			}
			if in.Phase == schemas.PhaseTrain || (in.Phase == schemas.PhaseVal && in.Round <= topRounds) {
				acc.Rounds[in.Round] = true
			}
		}
		if a := ev.GetChildWorkflowExecutionStartedEventAttributes(); a != nil {
			children = append(children, [2]string{a.GetWorkflowExecution().GetWorkflowId(), a.GetWorkflowExecution().GetRunId()})
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			scheduled[ev.GetEventId()] = a
		}
		a := ev.GetActivityTaskCompletedEventAttributes()
		if a == nil {
			continue
		}
		s := scheduled[a.GetScheduledEventId()]
		if s == nil {
			return "", 0, fmt.Errorf("history of %s %s: completion of unscheduled activity %d", id, runID, a.GetScheduledEventId())
		}
		switch s.GetActivityType().GetName() {
		case "RunEpisode":
			var r activities.EpisodeResult
			if err := dc.FromPayloads(a.GetResult(), &r); err != nil {
				return "", 0, fmt.Errorf("RunEpisode result in %s: %w", id, err)
			}
			if r.Skipped || r.EpisodeID == "" {
				continue
			}
			acc.completed[r.EpisodeID] = append(acc.completed[r.EpisodeID], r)
		case "BuildBatch":
			var in activities.BatchInput
			if err := dc.FromPayloads(s.GetInput(), &in); err != nil {
				return "", 0, fmt.Errorf("BuildBatch input in %s: %w", id, err)
			}
			acc.Batches[in.Round] = in
		case "Publish":
			// Older histories' Publish returned a count.
			var raw json.RawMessage
			if err := dc.FromPayloads(a.GetResult(), &raw); err != nil {
				return "", 0, fmt.Errorf("Publish result in %s: %w", id, err)
			}
			var pr activities.PublishResult
			if len(raw) > 0 && raw[0] == '{' {
				if err := json.Unmarshal(raw, &pr); err != nil {
					return "", 0, fmt.Errorf("Publish result in %s: %w", id, err)
				}
			}
			for _, c := range pr.Corrupt {
				acc.Refused[c.EpisodeID+"/"+c.Try] = true
			}
		case "Train":
			var in activities.TrainInput
			var m schemas.TrainerMetrics
			if err := dc.FromPayloads(s.GetInput(), &in); err != nil {
				return "", 0, fmt.Errorf("Train input in %s: %w", id, err)
			}
			if err := dc.FromPayloads(a.GetResult(), &m); err != nil {
				return "", 0, fmt.Errorf("Train result in %s: %w", id, err)
			}
			acc.Train[in.NewWeightsID] = m
		}
	}
	for _, ch := range children {
		if err := child(ch[0], ch[1]); err != nil {
			return "", 0, err
		}
	}
	return prev, closed, nil
}

// Check compares run's stored tables, samples and weights with what its
// workflow accepted. An error means the check could not be made (S3 or
// Temporal unreadable); findings are in Result.
func Check(ctx context.Context, c client.Client, s *store.Store, run string) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	res := Result{Run: run}
	l := schemas.Layout{Run: run}
	spec, _, err := runs.Load(ctx, s, run)
	if err != nil {
		return res, fmt.Errorf("check %s: %w", run, err)
	}
	h, ok, err := runs.ReadHarness(ctx, s, run)
	if err != nil || !ok {
		return res, fmt.Errorf("check %s: harness.json: %w", run, errors.Join(err, errIf(!ok, "missing")))
	}
	acc, err := ReadAccepted(ctx, c, run)
	if err != nil {
		return res, fmt.Errorf("check %s: %w", run, err)
	}
	for _, cf := range acc.Conflicts {
		res.problem("%s", cf)
	}
	res.Accepted = len(acc.Episodes)

	planned, err := plan(spec, h, acc)
	if err != nil {
		return res, fmt.Errorf("check %s: %w", run, err)
	}
	res.Planned = len(planned)

	// The partitions to read: every (round, phase) planned, and any other
	// an accepted episode names.
	parts := map[partKey]bool{}
	for _, p := range planned {
		parts[p] = true
	}
	for id := range acc.Episodes {
		if p, ok := parsePart(id); ok {
			parts[p] = true
		}
	}
	rows := map[string][]schemas.Episode{}
	calls := map[string][]schemas.Call{}
	for p := range parts {
		eps, err := ReadAll[schemas.Episode](ctx, s, l.EpisodesDir(p.round, p.phase), &res)
		if err != nil {
			return res, fmt.Errorf("check %s: %w", run, err)
		}
		for _, e := range eps {
			rows[e.EpisodeID] = append(rows[e.EpisodeID], e)
		}
		cs, err := ReadAll[schemas.Call](ctx, s, l.CallsDir(p.round, p.phase), &res)
		if err != nil {
			return res, fmt.Errorf("check %s: %w", run, err)
		}
		for _, c := range cs {
			calls[c.EpisodeID] = append(calls[c.EpisodeID], c)
		}
	}

	for id := range planned {
		switch n := len(rows[id]); {
		case n == 0:
			res.Lost++
		case n > 1:
			res.Duplicated++
			res.Stored++
			res.problem("%s: %d stored rows, want 1", id, n)
		default:
			res.Stored++
		}
		if _, ok := acc.Episodes[id]; !ok {
			res.WorkflowLost++
		}
	}
	for id, rs := range rows {
		a, ok := acc.Episodes[id]
		if !ok {
			res.problem("%s: %d stored rows, but the workflow never accepted it", id, len(rs))
			continue
		}
		if _, ok := planned[id]; !ok {
			res.problem("%s: stored and accepted, but no round planned it", id)
		}
		for _, r := range rs {
			if r.Retry != a.Retry || (a.Try != "" && r.Try != a.Try) {
				res.problem("%s: stored row is try %s (retry %d, host %s), the workflow accepted %s (retry %d)", id, r.Try, r.Retry, r.Host, a.Try, a.Retry)
			}
		}
		n := 0
		for _, c := range calls[id] {
			if c.Retry != a.Retry {
				res.problem("%s: a stored call (index %d) of retry %d, the workflow accepted retry %d", id, c.CallIndex, c.Retry, a.Retry)
				continue
			}
			n++
		}
		if want := int(rs[0].NumCalls); n < want {
			res.CallsLost += want - n
			res.problem("%s: %d stored calls of the accepted try, the row says %d", id, n, want)
		} else if n > want && len(rs) == 1 {
			res.problem("%s: %d stored calls of the accepted try, the row says %d", id, n, want)
		}
	}
	for id := range calls {
		if len(rows[id]) == 0 {
			res.problem("%s: %d stored calls but no row", id, len(calls[id]))
		}
	}
	// Accepted and expected in the tables, yet missing: the publish lost it.
	for id, a := range acc.Episodes {
		if len(rows[id]) == 0 {
			res.problem("%s: accepted (%s), no stored row", id, a.Try)
			res.CallsLost += a.Calls
		}
	}

	if err := checkSamples(ctx, s, l, acc, rows, &res); err != nil {
		return res, fmt.Errorf("check %s: %w", run, err)
	}
	if err := checkWeights(ctx, s, l, acc, &res); err != nil {
		return res, fmt.Errorf("check %s: %w", run, err)
	}
	res.Corrupt = len(acc.Refused)
	if res.LateWrites, res.Staged, err = lateWrites(ctx, s, l, acc); err != nil {
		return res, fmt.Errorf("check %s: %w", run, err)
	}
	sort.Strings(res.Problems)
	return res, nil
}

func errIf(cond bool, msg string) error {
	if cond {
		return errors.New(msg)
	}
	return nil
}

type partKey struct {
	round int32
	phase string
}

// parsePart is an episode id's round and phase.
func parsePart(id string) (partKey, bool) {
	rest, ok := strings.CutPrefix(id, "r")
	if !ok {
		return partKey{}, false
	}
	num, rest, ok := strings.Cut(rest, "-")
	round, err := strconv.ParseInt(num, 10, 32)
	if !ok || err != nil || round <= 0 {
		return partKey{}, false
	}
	i := strings.LastIndex(rest, "-g")
	if i < 0 {
		return partKey{}, false
	}
	return partKey{int32(round), rest[:i]}, true
}

// plan lists the episodes the run's started rounds asked for, as the Train
// workflow does (workflows/train.go): groups × attempts of collection per
// round; the validation cells (tasks × val_init_ids) before round 1 unless
// a pool report chose the pool, before every round with
// validate_every_round, and after the last with final_validation once the
// run completed.
func plan(spec schemas.RunSpec, h schemas.Harness, acc Accepted) (map[string]partKey, error) {
	out := map[string]partKey{}
	val, err := harness.ParseIDs(h.Splits.Val)
	if err != nil {
		return nil, fmt.Errorf("harness val_init_ids: %w", err)
	}
	cells := len(h.Tasks) * len(val)
	addVal := func(round int32) {
		for i := range cells {
			out[schemas.EpisodeID(round, schemas.PhaseVal, int32(i), 0)] = partKey{round, schemas.PhaseVal}
		}
	}
	for r := int32(1); r <= spec.Rounds; r++ {
		if !acc.Rounds[r] {
			continue
		}
		if (r == 1 && spec.PoolReport == "") || (r > 1 && h.Collect.ValidateEveryRound) {
			addVal(r)
		}
		for g := range spec.Groups {
			for a := range spec.Attempts {
				out[schemas.EpisodeID(r, schemas.PhaseTrain, int32(g), int32(a))] = partKey{r, schemas.PhaseTrain}
			}
		}
	}
	if h.Collect.FinalValidation && acc.Completed {
		addVal(spec.Rounds + 1)
	}
	return out, nil
}

// checkSamples compares each round's samples.parquet with the accepted
// rows: every sample's episode must be an accepted, valid row in a group
// with signal (recomputed with rl.HasSignal over the stored rows, as
// BuildBatch selects), of the same group, and its call must exist. The
// selection itself (which calls) is seeded and filtered; recomputing it
// would copy BuildBatch, so only its inputs are checked.
func checkSamples(ctx context.Context, s *store.Store, l schemas.Layout, acc Accepted, rows map[string][]schemas.Episode, res *Result) error {
	byRound := map[int32]map[int32][]schemas.Episode{}
	for id, rs := range rows {
		p, ok := parsePart(id)
		if !ok || p.phase != schemas.PhaseTrain || len(rs) == 0 || !rs[0].Valid {
			continue
		}
		if _, ok := acc.Episodes[id]; !ok {
			continue
		}
		if byRound[p.round] == nil {
			byRound[p.round] = map[int32][]schemas.Episode{}
		}
		byRound[p.round][rs[0].Group] = append(byRound[p.round][rs[0].Group], rs[0])
	}
	for round := range acc.Rounds {
		key := l.Samples(round)
		samples, err := store.ReadParquet[schemas.Sample](ctx, s, key)
		if store.IsNotFound(err) {
			continue // a round without samples (or not this far)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		eligible := map[string]schemas.Episode{}
		for _, members := range byRound[round] {
			rewards := make([]float64, len(members))
			for i, e := range members {
				rewards[i] = e.Reward
			}
			if len(members) >= 2 && rl.HasSignal(rewards) {
				for _, e := range members {
					eligible[e.EpisodeID] = e
				}
			}
		}
		res.Samples += len(samples)
		// The seeded selection, redone from the stored accepted tables with
		// the round's own BuildBatch input, must give the same samples.
		if in, ok := acc.Batches[round]; ok {
			want, _, err := activities.PlanBatch(ctx, s, in)
			if err != nil {
				return fmt.Errorf("round %d: planning its batch again: %w", round, err)
			}
			if d := sampleDiff(want, samples); d != "" {
				res.problem("round %d: %s differs from what the stored tables select: %s", round, key, d)
			}
		}
		in := acc.Batches[round]
		for _, sm := range samples {
			e, ok := eligible[sm.EpisodeID]
			if ok && in.TrainerWeightsID != "" {
				checkStaleness(round, in, sm, e, res)
			}
			switch {
			case !ok:
				res.problem("round %d: sample of %s call %d, not an accepted valid episode of a group with signal", round, sm.EpisodeID, sm.CallIndex)
			case e.Group != sm.Group || sm.CallIndex < 0 || sm.CallIndex >= e.NumCalls:
				res.problem("round %d: sample of %s call %d group %d does not match its row (group %d, %d calls)", round, sm.EpisodeID, sm.CallIndex, sm.Group, e.Group, e.NumCalls)
			}
		}
	}
	return nil
}

// checkStaleness checks one sample of an overlapped round against the
// bound, from the weights its stored episode ran on and the weights its
// round's trainer started from (docs/design.md §1, "Overlapped rounds").
func checkStaleness(round int32, in activities.BatchInput, sm schemas.Sample, e schemas.Episode, res *Result) {
	top, err1 := schemas.WeightsVersion(in.TrainerWeightsID)
	v, err2 := schemas.WeightsVersion(e.WeightsID)
	if err := errors.Join(err1, err2); err != nil {
		if e.WeightsID != in.TrainerWeightsID {
			res.problem("round %d: sample of %s call %d: %v", round, sm.EpisodeID, sm.CallIndex, err)
		}
		return
	}
	stale := top - v
	if stale > 0 {
		res.Stale++
	}
	if stale < 0 || stale > in.MaxStaleness {
		res.BeyondBound++
		res.problem("round %d: sample of %s call %d ran on %s, %d versions from the trainer's %s: beyond max staleness %d",
			round, sm.EpisodeID, sm.CallIndex, e.WeightsID, stale, in.TrainerWeightsID, in.MaxStaleness)
	}
	if sm.Staleness != stale || sm.WeightsID != e.WeightsID {
		res.problem("round %d: sample of %s call %d says weights %s staleness %d; its episode ran on %s: staleness %d",
			round, sm.EpisodeID, sm.CallIndex, sm.WeightsID, sm.Staleness, e.WeightsID, stale)
	}
}

// checkWeights checks every Train result the workflow accepted against the
// published manifest of its output: present, verifying, same metrics.
// sampleDiff names the first difference between the samples a batch
// should have (want) and the stored ones, or "".
func sampleDiff(want, got []schemas.Sample) string {
	for i := range min(len(want), len(got)) {
		w, g := want[i], got[i]
		if w.EpisodeID != g.EpisodeID || w.CallIndex != g.CallIndex || w.Group != g.Group ||
			math.Abs(w.Advantage-g.Advantage) > 1e-12 || math.Abs(w.Weight-g.Weight) > 1e-12 {
			return fmt.Sprintf("sample %d is %s call %d (advantage %g, weight %g), want %s call %d (advantage %g, weight %g)",
				i, g.EpisodeID, g.CallIndex, g.Advantage, g.Weight, w.EpisodeID, w.CallIndex, w.Advantage, w.Weight)
		}
	}
	if len(want) != len(got) {
		return fmt.Sprintf("%d samples, want %d", len(got), len(want))
	}
	return ""
}

func checkWeights(ctx context.Context, s *store.Store, l schemas.Layout, acc Accepted, res *Result) error {
	for out, m := range acc.Train {
		res.Weights++
		prefix := l.Weights(out)
		man, err := weights.Read(ctx, s, prefix)
		if err != nil {
			res.problem("weights %s: accepted by the workflow, manifest unreadable: %v", out, err)
			continue
		}
		if err := weights.Verify(ctx, s, prefix, man); err != nil {
			res.problem("weights %s: manifest does not verify: %v", out, err)
		}
		a, _ := json.Marshal(m)
		b, _ := json.Marshal(man.Metrics)
		if string(a) != string(b) {
			res.problem("weights %s: manifest metrics %s, the workflow accepted %s", out, b, a)
		}
	}
	return nil
}

// lateWrites counts the tries that wrote staged records
// (staged/…/<episode>/<try>/) or artifacts (artifacts/…/<episode>/<try>/)
// but are not the accepted try of their episode: written beside, refused.
// Artifacts count too because a published episode's staged tries are
// deleted (DropStaged), a refused one's with them. It also returns the
// tries still staged, which after the drop are those of unpublished
// episodes and those written after it.
func lateWrites(ctx context.Context, s *store.Store, l schemas.Layout, acc Accepted) (late, staged int, err error) {
	tries := map[[2]string]bool{}
	for _, dir := range []string{"staged/", "artifacts/"} {
		prefix := l.Prefix() + dir
		objs, err := s.List(ctx, prefix)
		if err != nil {
			return 0, 0, fmt.Errorf("list %s: %w", prefix, err)
		}
		left := map[[2]string]bool{}
		for _, o := range objs {
			// round=R/phase=P/<episode>/<try>/<file>
			parts := strings.Split(strings.TrimPrefix(o.Key, prefix), "/")
			if len(parts) < 5 {
				continue
			}
			t := [2]string{parts[2], parts[3]}
			tries[t] = true
			if dir == "staged/" {
				left[t] = true
			}
		}
		staged += len(left)
	}
	for t := range tries {
		if a, ok := acc.Episodes[t[0]]; (!ok || a.Try != t[1]) && !acc.Refused[t[0]+"/"+t[1]] {
			late++
		}
	}
	return late, staged, nil
}

// ReadAll reads every Parquet object under dir, part files and per-episode
// files alike, as DuckDB reading the documented layout would. With res, an
// object that will not decode (truncated, corrupt) is skipped and named in
// res: its rows count as missing, the rest of the run is still checked;
// without, it is an error.
func ReadAll[T any](ctx context.Context, s *store.Store, dir string, res *Result) ([]T, error) {
	objs, err := s.List(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var out []T
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, ".parquet") {
			continue
		}
		rows, err := store.ReadParquet[T](ctx, s, o.Key)
		if err != nil && res != nil && !store.IsNotFound(err) && ctx.Err() == nil {
			b, gerr := s.Get(ctx, o.Key)
			if gerr == nil {
				// Readable bytes that do not decode: a finding, not a failed check.
				res.Unreadable++
				res.problem("%s (%d bytes) does not decode as Parquet: %v", o.Key, len(b), err)
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", o.Key, err)
		}
		out = append(out, rows...)
	}
	return out, nil
}
