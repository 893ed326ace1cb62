package workflows

import (
	"cmp"
	"fmt"
	"sort"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/activities"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// tracker keeps a train run's progress: the query's answer, the search
// attributes the UI filters on, the markdown table in the workflow's
// current details, and whether a stop was asked for.
type tracker struct {
	ctx      workflow.Context
	in       api.TrainInput
	prog     *api.Progress
	running  map[string]bool // episode chunks in flight
	epPhase  string          // the phase Progress.Episodes counts
	batch    *schemas.BatchSummary
	stopping bool
	fails    *failures  // activities failing while Temporal retries them
	fleet    *fleetNote // where the run's weights stand on the rollout fleet
}

func newTracker(ctx workflow.Context, in api.TrainInput) *tracker {
	t := &tracker{ctx: ctx, in: in, running: map[string]bool{},
		prog: &api.Progress{Run: in.Run, Round: in.Round, Rounds: in.Rounds, WeightsID: in.WeightsID, Summaries: in.Summaries}}
	stop := workflow.GetSignalChannel(ctx, api.StopSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		var why string
		stop.Receive(ctx, &why)
		t.stopping, t.prog.Stopping = true, true
		workflow.GetLogger(ctx).Info("stop requested; running episodes finish, the rest are skipped", "reason", why)
		// The marker tells episodes not yet started to skip themselves; it
		// is written here so a stop sent from the UI works like `starter stop`.
		var records *activities.Records
		_ = workflow.ExecuteActivity(controlContext(ctx), records.MarkStop, in.Run, why).Get(ctx, nil)
		t.update()
	})
	t.fails = watchFailures(ctx, t.update)
	t.fleet = watchFleetNotes(ctx, t.update, false)
	t.upsert(api.KindAttr.ValueSet("train"), api.RunAttr.ValueSet(in.Run), api.RoundAttr.ValueSet(int64(in.Round)), api.WeightsAttr.ValueSet(in.WeightsID))
	t.update()
	return t
}

// phase records a new phase.
func (t *tracker) phase(p string) {
	t.prog.Phase = p
	t.upsert(api.PhaseAttr.ValueSet(p))
	t.update()
}

// weights records the weights the run has reached.
func (t *tracker) weights(id string) {
	t.prog.WeightsID = id
	t.upsert(api.WeightsAttr.ValueSet(id))
	t.update()
}

// successRate records the latest validation success rate.
func (t *tracker) successRate(r float64) {
	if r >= 0 {
		t.upsert(api.SuccessRateAttr.ValueSet(r))
	}
}

// episodes runs a phase's cells and keeps the progress current.
func (t *tracker) episodes(phase string, round int32, weights string, cells []api.Cell, again bool) api.Tally {
	t.phase(phase)
	t.epPhase = phase
	t.prog.Episodes = api.Tally{Total: len(cells)}
	return runEpisodes(t.ctx, phaseRun{Run: t.in.Run, Round: round, Phase: phase, WeightsID: weights, Harness: t.in.Harness,
		Heartbeat: t.in.HeartbeatTimeout, Priority: cmp.Or(t.in.Priority, fleet.TrainPriority), Again: again, OnProgress: func(tl api.Tally) { t.prog.Episodes = tl; t.fleet.fromChunk(tl); t.update() }}, cells, t.running)
}

func (t *tracker) upsert(u ...temporal.SearchAttributeUpdate) {
	if err := workflow.UpsertTypedSearchAttributes(t.ctx, u...); err != nil {
		workflow.GetLogger(t.ctx).Warn("search attributes not updated", "error", err)
	}
}

func (t *tracker) snapshot() api.Progress {
	p := *t.prog
	p.Children = nil
	for id := range t.running {
		p.Children = append(p.Children, id)
	}
	sort.Strings(p.Children)
	return p
}

// update rewrites the workflow's current details: a small markdown table
// the Temporal UI renders on the workflow page.
func (t *tracker) update() {
	p := t.prog
	var b strings.Builder
	state := p.Phase
	if t.stopping && p.Phase != "stopped" {
		state += " (stopping)"
	}
	fmt.Fprintf(&b, "**Run %s** · round %d/%d · weights %s · %s\n\n", p.Run, p.Round, p.Rounds, p.WeightsID, state)
	b.WriteString(t.fleet.markdown())
	b.WriteString(t.fails.markdown())
	if e := p.Episodes; e.Total > 0 {
		fmt.Fprintf(&b, "| episodes | done | valid | successes | lost | skipped |\n|---|---|---|---|---|---|\n| %s | %d/%d | %d | %d | %d | %d |\n\n",
			t.epPhase, e.Done, e.Total, e.Valid, e.Successes, e.Lost, e.Skipped)
	}
	if bs := t.batch; bs != nil {
		fmt.Fprintf(&b, "| batch | value |\n|---|---|\n| valid episodes | %d/%d |\n| groups with signal | %d/%d |\n| samples (zero-weight) | %d (%d) |\n| untrainable calls | %d/%d %s |\n",
			bs.Valid, bs.Episodes, bs.GroupsWithSignal, bs.Groups, bs.Samples, bs.ZeroWeightSamples, bs.UntrainableCalls, bs.Calls, untrainableCauses(bs))
		if bs.ImageRefs > 0 {
			fmt.Fprintf(&b, "| images to the trainer (uses) | %d (%d) |\n", bs.Images, bs.ImageRefs)
		}
		b.WriteString("\n")
	}
	if len(p.Summaries) > 0 {
		// Both denominators and 95 % intervals: a rate over 30 episodes is
		// ±15 points, and invalid episodes must not hide behind it.
		b.WriteString("| round | val success [95% CI] | collection success / valid | success / attempted | invalid + lost | samples | loss | logprob Δ mean / max | weights |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, s := range p.Summaries {
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %d/%d | %d | %.4f | %.2g / %.2g | %s → %s |\n", s.Round, report.ValRate(s), stats.Rate(s.Successes, s.Valid),
				stats.Rate(s.Successes, s.Attempted()), s.Attempted()-s.Valid, s.Attempted(), s.Samples, s.Trainer.Loss,
				s.Trainer.LogprobMismatch, s.Trainer.LogprobMismatchMax, s.WeightsID, weightsOut(s))
		}
		for _, s := range p.Summaries {
			if w := report.RoundWarning(s); w != "" {
				fmt.Fprintf(&b, "\n**⚠ %s**\n", w)
			}
		}
	}
	workflow.SetCurrentDetails(t.ctx, b.String())
}

// untrainableCauses is the round's untrainable calls by reason, "" when
// there are none (docs/design.md §3, "Sampling settings").
func untrainableCauses(bs *schemas.BatchSummary) string {
	if len(bs.UntrainableByReason) == 0 {
		return ""
	}
	return "(" + report.CauseList(bs.UntrainableByReason) + ")"
}

// weightsOut is the round's new weights and, for an overlapped round,
// what it collected on and its samples by staleness.
func weightsOut(s schemas.RoundSummary) string {
	if s.MaxStaleness == 0 {
		return s.NewWeightsID
	}
	return fmt.Sprintf("%s (collected on %s; staleness %s)", s.NewWeightsID, s.CollectedOn, s.Staleness)
}
