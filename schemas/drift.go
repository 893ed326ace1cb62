package schemas

import "fmt"

// Drift calibration (`starter drift`, docs/design.md §4 "Drift guard"):
// the trainer's forward on one recorded round's batch under the weights
// that sampled it, compared with the recorded logprobs, without training.

// TrainerDriftReport is what a trainer run with --drift-report FILE writes:
// the absolute difference |log π_old − log π_rollout| of every completion
// token of the batch, in batch order, and each sample's token count.
type TrainerDriftReport struct {
	TokenAbsDiff []float64 `json:"token_abs_diff"`
	SampleTokens []int     `json:"sample_tokens"`
}

// Quantiles of a distribution of absolute logprob differences, in nats.
type Quantiles struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
}

// DriftReport is runs/<run>/drift/round=<R>/drift.json: how far the
// trainer's logprobs are from the model server's on one round's batch,
// per token and per call (sample), and the drift guard limits it suggests.
type DriftReport struct {
	Run       string `json:"run"`
	Round     int32  `json:"round"`
	WeightsID string `json:"weights"` // the weights that sampled the batch
	Samples   int    `json:"samples"`
	Tokens    int    `json:"tokens"`
	// Token is over every completion token; Call over each sample's mean.
	Token Quantiles `json:"token"`
	Call  Quantiles `json:"call"`
	// TokensOver is the share of tokens whose difference exceeds each
	// threshold (in nats, keyed as written: "0.01", "0.1", "0.5", "1").
	TokensOver map[string]float64 `json:"tokens_over"`
	// Suggested limits: the trainer.hyper values that would let this batch
	// through with a margin, for a model and precision whose rounds are
	// healthy (docs/cluster.md, "Calibrating the drift guard").
	Suggested DriftLimits `json:"suggested"`
	// Current is what the harness sets now.
	Current      map[string]string `json:"current"`
	FinishedAtMS int64             `json:"finished_at_ms"`
	Key          string            `json:"key"`         // where the report is stored
	TrainerLog   string            `json:"trainer_log"` // the trainer's log of the measurement
}

// DriftLimits are the drift guard's trainer.hyper values.
type DriftLimits struct {
	Mean       float64 `json:"drift_limit"`
	Call       float64 `json:"drift_call_limit"`
	Token      float64 `json:"drift_token_limit"`
	TokenShare float64 `json:"drift_token_share"`
}

// Drift is where a round's drift report is stored.
func (l Layout) Drift(round int32) string {
	return fmt.Sprintf("%sdrift/round=%d/drift.json", l.Prefix(), round)
}
