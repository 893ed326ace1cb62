package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// RoundDoneInput is a finished round and the run's state after it.
type RoundDoneInput struct {
	Summary schemas.RoundSummary
	State   schemas.State
}

// FinishRound writes the round's summary.json and the run's state.json.
func (c *Records) FinishRound(ctx context.Context, in RoundDoneInput) error {
	l := schemas.Layout{Run: in.State.Run}
	if in.Summary.Round > 0 {
		if err := store.PutJSON(ctx, c.Store, l.Summary(in.Summary.Round), in.Summary); err != nil {
			return err
		}
	}
	in.State.UpdatedAtMS = time.Now().UnixMilli()
	return store.PutJSON(ctx, c.Store, l.State(), in.State)
}

// SaveState writes the run's state.json alone (a stopped run's).
func (c *Records) SaveState(ctx context.Context, st schemas.State) error {
	st.UpdatedAtMS = time.Now().UnixMilli()
	return store.PutJSON(ctx, c.Store, schemas.Layout{Run: st.Run}.State(), st)
}

// StopMarker is the body of a run's STOP object.
type StopMarker struct {
	Reason string `json:"reason"`
	AtMS   int64  `json:"at_ms"`
}

// MarkStop writes the run's STOP marker, which episodes not yet started
// check before they run. Idempotent: a second stop rewrites the marker.
func (c *Records) MarkStop(ctx context.Context, run, reason string) error {
	return store.PutJSON(ctx, c.Store, schemas.Layout{Run: run}.Stop(), StopMarker{Reason: reason, AtMS: time.Now().UnixMilli()})
}

// MarkEvalStop writes an evaluation's stop marker (Layout.EvalStop), which
// its episodes not yet started check before they run. Idempotent.
func (c *Records) MarkEvalStop(ctx context.Context, key, reason string) error {
	return store.PutJSON(ctx, c.Store, key, StopMarker{Reason: reason, AtMS: time.Now().UnixMilli()})
}

// CompactInput names a partition pair (calls and episodes) of a round's phase.
type CompactInput struct {
	Run   string
	Round int32
	Phase string
}

// Compact folds a phase's per-episode calls and episodes files into one
// part file each, once the round no longer writes them.
func (c *Records) Compact(ctx context.Context, in CompactInput) (store.CompactStats, error) {
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
