package api

import (
	"time"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// The train workflow (Train): one run, one workflow id, one round per
// workflow run, continued as new between rounds.

// TrainWorkflow is the train workflow's registered type name.
const TrainWorkflow = "Train"

// WorkflowID is the id of a run's train workflow: one run, one id.
func WorkflowID(run string) string { return "train-" + run }

// ProgressQuery returns a Progress of the running round.
const ProgressQuery = "progress"

// StopSignal asks a run for a controlled stop: episodes already running
// finish, the others are skipped, state is recorded and the run ends. The
// Temporal UI's "Send a signal" works as well as `starter stop`.
const StopSignal = "stop"

// TrainInput starts (and, through continue-as-new, carries) a train run.
type TrainInput struct {
	Run              string
	Harness          schemas.Harness
	InitialWeightsID string `json:"InitialWeights"` // weights id of round 1's input
	WeightsID        string `json:"Weights"`        // weights id the next round starts from
	Rounds           int32
	Groups           int
	Attempts         int
	PoolReport       string // bucket key of a report choosing round 1's pool; "" validates first
	Round            int32  // the round this run executes (1-based)
	Summaries        []schemas.RoundSummary
	// HeartbeatTimeout bounds how long a dead rollout worker holds an
	// episode before Temporal retries it elsewhere (default 30s).
	HeartbeatTimeout time.Duration
	// Priority orders the run's episodes among other runs' on a shared
	// fleet (lower first, 1–5); 0 is fleet.TrainPriority.
	Priority int `json:",omitempty"`
	// MaxStaleness is η of overlapped rounds (collect.max_staleness, or
	// starter train --max-staleness): 0 runs rounds one after another.
	MaxStaleness int32 `json:",omitempty"`
}

// TrainResult is returned by the run's last workflow execution.
type TrainResult struct {
	Run             string
	Prefix          string
	Summaries       []schemas.RoundSummary
	FinalWeightsID  string `json:"FinalWeights"`
	FinalValSuccess float64
	// FinalVal is the final validation's overall counts (nil when none
	// ran, or in results from before), so its rate carries an interval.
	FinalVal *schemas.TaskResult `json:",omitempty"`
	// Stopped says the run ended on a stop request in round StoppedRound;
	// `starter train` with the same run resumes it.
	Stopped      bool
	StoppedRound int32
}

// Progress is what the progress query answers.
type Progress struct {
	Run       string
	Round     int32
	Rounds    int32
	Phase     string
	WeightsID string `json:"Weights"`
	Stopping  bool
	// Episodes of the current phase; QueryProgress adds the live counts of
	// the running chunks named in Children.
	Episodes  Tally
	Children  []string
	Summaries []schemas.RoundSummary
	// Overlapped says Phase tells both sides of an overlapped run (e.g.
	// "round 4 training · round 5 collecting on r3, staleness 1") and
	// Episodes counts the collecting round's; Round is the round training
	// or next to train.
	Overlapped bool `json:",omitempty"`
}
