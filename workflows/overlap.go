package workflows

import (
	"cmp"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// pipeline is a training run with overlapped rounds (collect.max_staleness
// η ≥ 1; docs/design.md §4, "Overlapped rounds"). Three coroutines share
// it: the collector collects round after round on the newest weights the
// bound allows, the trainer trains each collected round from the weights
// the round before left, and the recorder (the workflow's own) records
// the rounds in order once their training and their validation are done.
// Validations of new weights run beside collection, at a lower priority.
//
// The whole run is one workflow execution: a round's work crosses the
// next round's, so there is no point between rounds with nothing in
// flight to continue as new at (a round adds about 80 events; the
// server's limit is 51,200).
type pipeline struct {
	ctx workflow.Context
	in  api.TrainInput
	t   *tracker
	eta int32

	// trained counts the rounds trained, weights is what the last left.
	trained int32
	weights string
	// collected holds each round whose batch is built, until its trainer
	// takes it; trainedRounds each trained round, until recorded.
	collected     map[int32]*round
	trainedRounds map[int32]*round
	// vals holds the validation of the weights each round starts from,
	// by round: round k's validates the weights round k-1 left.
	vals map[int32]*sideVal

	collecting, training int32 // the rounds in progress (0: none)
	collectingOn         string
	collectorDone        bool
	trainerDone          bool
	err                  error
	lastRound            int32 // the round the search attribute says
	// valChunks are the side validations' running chunks: kept out of
	// the tracker's, whose live counts the progress query adds to the
	// collection's episodes.
	valChunks map[string]bool
}

// sideVal is one validation running beside collection.
type sideVal struct {
	weights string
	done    bool
	report  schemas.Report
}

// overlapped runs the rounds from r.in.Round on with the pipeline.
func overlapped(r *round) (api.TrainResult, error) {
	in := r.in
	p := &pipeline{ctx: r.ctx, in: in, t: r.t, eta: in.MaxStaleness, trained: in.Round - 1, weights: in.WeightsID, lastRound: in.Round,
		collected: map[int32]*round{}, trainedRounds: map[int32]*round{}, vals: map[int32]*sideVal{}, valChunks: map[string]bool{}}
	r.t.prog.Overlapped = true
	// The first round's pool comes as in the synchronous loop: from the
	// pool report, or a validation of the weights the run resumes from.
	report, stop, err := r.validateFirst()
	if err != nil {
		return r.result, err
	}
	if stop {
		return r.stopped(schemas.PhaseVal)
	}
	tag := ""
	switch {
	case in.Round == 1 && in.PoolReport != "":
		tag = in.PoolReport
	case len(report.Tasks) > 0:
		tag = schemas.ValTag(in.Round)
		p.vals[in.Round] = &sideVal{weights: in.WeightsID, done: true, report: report}
	}
	r.pipe = p
	workflow.Go(r.ctx, func(ctx workflow.Context) { p.collect(ctx, r, tag, report) })
	workflow.Go(r.ctx, func(ctx workflow.Context) { p.train(ctx) })
	return p.record(r.result)
}

// fail ends the run with err (the first error wins).
func (p *pipeline) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// weightsOf is the weights id a trainer of version v wrote.
func (p *pipeline) weightsOf(v int32) string {
	if v == 0 {
		return p.in.InitialWeightsID
	}
	return schemas.TrainingWeightsID(v)
}

// roundFor is round k's state: it trains from the weights round k-1
// leaves, and collects on on.
func (p *pipeline) roundFor(k int32, on string) *round {
	in := p.in
	in.Round, in.WeightsID, in.PoolReport = k, p.weightsOf(k-1), ""
	l := schemas.Layout{Run: in.Run}
	return &round{ctx: p.ctx, in: in, t: p.t, pipe: p, on: on,
		result:  api.TrainResult{Run: in.Run, Prefix: l.Prefix()},
		summary: schemas.RoundSummary{Round: k, WeightsID: in.WeightsID, ValSuccess: -1, Prefix: l.Prefix(), MaxInvalidShare: in.Harness.Collect.InvalidLimit(), CollectedOn: on, MaxStaleness: p.eta}}
}

// collect is the collector: round after round, as soon as the bound lets
// it, on the newest weights. first is the round the run starts at (its
// pool already chosen from report tag).
// Each coroutine blocks on its own context: a round's calls use the
// context of the coroutine running them.
func (p *pipeline) collect(ctx workflow.Context, first *round, tag string, report schemas.Report) {
	defer func() { p.collectorDone = true; p.show() }()
	for k := p.in.Round; k <= p.in.Rounds; k++ {
		// Round k trains from the weights k-1 trainings leave; its samples
		// may come from weights at most η trainings before that.
		if err := workflow.Await(ctx, func() bool { return p.err != nil || p.t.stopping || p.trained >= k-1-p.eta }); err != nil {
			p.fail(err)
			return
		}
		if p.err != nil || p.t.stopping {
			return
		}
		r := first
		if k != p.in.Round {
			r = p.roundFor(k, p.weights)
			tag, report = p.newestReport(r)
		} else {
			r.on, r.summary.CollectedOn, r.summary.MaxStaleness = p.weights, p.weights, p.eta
		}
		r.ctx = ctx
		r.summary.PoolFrom = tag
		pool := r.pool(report)
		p.collecting, p.collectingOn = k, r.collectOn()
		p.show()
		tally, n, err := r.collect(pool)
		if err != nil {
			p.fail(err)
			return
		}
		if p.t.stopping {
			return // a round stopped in collection is collected again on resume
		}
		// The batch counts staleness against the weights round k's
		// trainer starts from: those k-1 trainings leave, or, if one of
		// them had no sample, earlier ones (then built again below).
		if _, err := r.buildBatch(n, tally.Lost); err != nil {
			p.fail(err)
			return
		}
		p.collecting, p.collectingOn = 0, ""
		p.collected[k] = r
		p.show()
	}
}

// newestReport is the tag of the newest complete validation to choose
// r's pool from: with validate_every_round, the newest weights' done;
// otherwise, as the synchronous loop does, none (all tasks).
func (p *pipeline) newestReport(r *round) (string, schemas.Report) {
	if !p.in.Harness.Collect.ValidateEveryRound {
		return "", schemas.Report{}
	}
	for k := r.in.Round; k >= p.in.Round; k-- {
		if v := p.vals[k]; v != nil && v.done && len(v.report.Tasks) > 0 {
			return schemas.ValTag(k), v.report
		}
	}
	return "", schemas.Report{}
}

// train is the trainer: each round in order, once collected.
func (p *pipeline) train(ctx workflow.Context) {
	defer func() { p.trainerDone = true; p.show() }()
	for k := p.in.Round; k <= p.in.Rounds; k++ {
		if err := workflow.Await(ctx, func() bool {
			return p.err != nil || p.collected[k] != nil || p.collectorDone
		}); err != nil {
			p.fail(err)
			return
		}
		r := p.collected[k]
		// A round collected but not yet training when a stop came waits
		// for the resume, as in the synchronous loop.
		if p.err != nil || r == nil || p.t.stopping {
			return
		}
		delete(p.collected, k)
		r.ctx = ctx
		if start := p.weights; r.in.WeightsID != start {
			// A round before trained nothing and left its weights: count
			// the staleness against those.
			r.in.WeightsID, r.summary.WeightsID = start, start
			if _, err := r.buildBatch(r.summary.Episodes, r.summary.InvalidByCause["lost"]); err != nil {
				p.fail(err)
				return
			}
		}
		// The workflow's own check of the bound on what the records say.
		if s := r.summary.Staleness.Max(); s > p.eta {
			p.fail(temporal.NewNonRetryableApplicationError(fmt.Sprintf("round %d: a sample %d weights versions behind the trainer's %s, beyond collect.max_staleness %d",
				k, s, r.in.WeightsID, p.eta), "StaleSample", nil))
			return
		}
		p.training = k
		p.show()
		if err := r.train(r.summary.BatchSummary); err != nil {
			p.fail(err)
			return
		}
		p.training, p.trained, p.weights = 0, k, r.summary.NewWeightsID
		r.ctx = p.ctx // the recorder's from here
		p.trainedRounds[k] = r
		if k < p.in.Rounds && p.in.Harness.Collect.ValidateEveryRound && !p.t.stopping {
			p.validate(k+1, p.weights)
		}
		p.show()
	}
}

// validate validates weights as round k's opening validation, beside
// collection: one step lower in priority, so collection's episodes are
// served first.
func (p *pipeline) validate(k int32, weights string) {
	v := &sideVal{weights: weights}
	prev := p.vals[k-1]
	p.vals[k] = v
	workflow.Go(p.ctx, func(ctx workflow.Context) {
		defer func() { v.done = true; p.show() }()
		// One side validation at a time, in order: when the fleet's gaps are
		// too few for all of them, validations queued together would each
		// finish late, and pools would come from ever older reports.
		if prev != nil && workflow.GetVersion(ctx, "side-validations-in-order", workflow.DefaultVersion, 1) == 1 {
			if err := workflow.Await(ctx, func() bool { return prev.done || p.err != nil || p.t.stopping }); err != nil {
				p.fail(err)
				return
			}
			if p.err != nil || p.t.stopping {
				return
			}
		}
		in := p.in
		ids, err := harness.ParseIDs(in.Harness.Splits.Val)
		if err != nil {
			p.fail(fmt.Errorf("harness %s val_init_ids: %w", in.Harness.Name, err))
			return
		}
		var cells []api.Cell
		for _, task := range in.Harness.Tasks {
			for _, id := range ids {
				cells = append(cells, api.Cell{Task: task, InitID: id, Group: int32(len(cells))})
			}
		}
		// Not Again: unlike the synchronous loop's opening validation, no
		// collection waits to follow it on these weights, so the fleet must
		// not hold their server for one.
		prio := min(cmp.Or(in.Priority, fleet.TrainPriority)+1, fleet.MaxPriority)
		tl := runEpisodes(ctx, phaseRun{Run: in.Run, Round: k, Phase: schemas.PhaseVal, WeightsID: weights, Harness: in.Harness,
			Heartbeat: in.HeartbeatTimeout, Priority: prio,
			OnProgress: func(tl api.Tally) { p.t.fleet.fromChunk(tl) }}, cells, p.valChunks)
		if tl.Unservable != "" {
			p.fail(fmt.Errorf("round %d validation: %s", k, tl.Unservable))
			return
		}
		if p.t.stopping {
			return
		}
		var records *activities.Records
		err = workflow.ExecuteActivity(summarized(controlContext(ctx), fmt.Sprintf("validation report %s of weights %s", schemas.ValTag(k), weights)), records.WriteReport, activities.ReportInput{
			Run: in.Run, Round: k, Phase: schemas.PhaseVal, Tag: schemas.ValTag(k), WeightsID: weights, InitKey: "val_init_ids",
		}).Get(ctx, &v.report)
		if err != nil {
			p.fail(fmt.Errorf("validation report of round %d: %w", k, err))
		}
	})
}

// record is the recorder: each round in order once trained and its
// validation done, then the run's end. It returns the run's result.
func (p *pipeline) record(res api.TrainResult) (api.TrainResult, error) {
	summaries := p.in.Summaries
	for k := p.in.Round; k <= p.in.Rounds; k++ {
		if err := workflow.Await(p.ctx, func() bool { return p.err != nil || p.trainedRounds[k] != nil || p.trainerDone }); err != nil {
			return res, err
		}
		r := p.trainedRounds[k]
		if p.err == nil && r == nil {
			// Stopped before round k trained: wait for what runs to end.
			if err := workflow.Await(p.ctx, func() bool { return p.err != nil || (p.collectorDone && p.valsDone()) }); err != nil {
				return res, err
			}
			if p.err == nil {
				s := p.roundFor(k, "")
				s.in.WeightsID, s.in.Summaries = p.weights, summaries
				s.result.Summaries = summaries
				return s.stopped(schemas.PhaseTrain)
			}
		}
		if p.err != nil {
			return res, p.err
		}
		// Its opening validation, when one runs, belongs in its summary.
		if v := p.vals[k]; v != nil {
			if err := workflow.Await(p.ctx, func() bool { return p.err != nil || v.done }); err != nil {
				return res, err
			}
			if p.err != nil {
				return res, p.err
			}
			if len(v.report.Tasks) > 0 {
				val := v.report.Overall
				r.summary.ValSuccess, r.summary.Val = val.SuccessRate, &val
				p.t.successRate(val.SuccessRate)
				compact(p.ctx, p.in.Run, k, schemas.PhaseVal)
			}
		}
		delete(p.trainedRounds, k)
		compact(p.ctx, p.in.Run, k, schemas.PhaseTrain)
		s := &r.summary
		s.OverInvalidLimit = s.OverLimit()
		summaries = append(append([]schemas.RoundSummary(nil), summaries...), *s)
		p.t.prog.Summaries, r.result.Summaries = summaries, summaries
		p.t.update()
		state := schemas.State{Run: p.in.Run, Harness: p.in.Harness.Name, InitialWeightsID: p.in.InitialWeightsID, WeightsID: s.NewWeightsID,
			RoundsDone: k, Rounds: p.in.Rounds, Summaries: summaries, FinalValSuccess: -1}
		if k == p.in.Rounds {
			// The final validation runs alone, as in the synchronous loop.
			r.pipe, p.t.prog.Overlapped, p.t.prog.Round = nil, false, k
			return r.end(state)
		}
		var records *activities.Records
		if err := workflow.ExecuteActivity(summarized(controlContext(p.ctx), fmt.Sprintf("round %d: summary and state", k)), records.FinishRound,
			activities.RoundDoneInput{Summary: *s, State: state}).Get(p.ctx, nil); err != nil {
			return res, fmt.Errorf("round %d state: %w", k, err)
		}
		res.Summaries = summaries
	}
	return res, nil
}

// valsDone says no validation is running.
func (p *pipeline) valsDone() bool {
	for _, v := range p.vals {
		if !v.done {
			return false
		}
	}
	return true
}

// collectEpisodes runs round r's collection episodes, counted in the
// run's progress.
func (p *pipeline) collectEpisodes(r *round, cells []api.Cell) api.Tally {
	ctx := r.ctx
	t := p.t
	t.epPhase = fmt.Sprintf("round %d collection", r.in.Round)
	t.prog.Episodes = api.Tally{Total: len(cells)}
	return runEpisodes(ctx, phaseRun{Run: p.in.Run, Round: r.in.Round, Phase: schemas.PhaseTrain, WeightsID: r.collectOn(), Harness: p.in.Harness,
		Heartbeat: p.in.HeartbeatTimeout, Priority: cmp.Or(p.in.Priority, fleet.TrainPriority),
		OnProgress: func(tl api.Tally) { t.prog.Episodes = tl; t.fleet.fromChunk(tl); p.show() }}, cells, t.running)
}

// show writes both sides into the run's phase: "round 4 training ·
// round 5 collecting on r3, staleness 1 · validating r4".
func (p *pipeline) show() {
	var parts []string
	if p.training > 0 {
		parts = append(parts, fmt.Sprintf("round %d training", p.training))
	}
	if p.collecting > 0 {
		stale := p.collecting - 1 - p.trained // versions behind the trainer it feeds, at most
		if v, err := schemas.WeightsVersion(p.collectingOn); err == nil {
			stale = p.collecting - 1 - v
		}
		parts = append(parts, fmt.Sprintf("round %d collecting on %s, staleness %d", p.collecting, p.collectingOn, stale))
	}
	for k := p.in.Round; k <= p.in.Rounds; k++ {
		if v := p.vals[k]; v != nil && !v.done {
			parts = append(parts, "validating "+v.weights)
		}
	}
	for k := p.in.Round; k <= p.in.Rounds; k++ {
		if p.collected[k] != nil && p.training != k {
			parts = append(parts, fmt.Sprintf("round %d collected", k))
		}
	}
	phase := strings.Join(parts, " · ")
	if phase == "" {
		phase = "recording"
	}
	round := min(p.trained+1, p.in.Rounds)
	if p.training > 0 {
		round = p.training
	}
	p.t.prog.Round = round
	if round != p.lastRound {
		p.lastRound = round
		p.t.upsert(api.RoundAttr.ValueSet(int64(round)))
	}
	if phase != p.t.prog.Phase {
		p.t.phase(phase)
	}
}
