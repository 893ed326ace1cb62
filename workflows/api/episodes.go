package api

import (
	"fmt"
	"time"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// The episode chunk workflow (Episodes): a child of Train and Eval running
// up to ChunkSize episodes on the rollout queue.

// EpisodesWorkflow is the episode chunk workflow's registered type name.
const EpisodesWorkflow = "Episodes"

// ChunkSize is how many episodes one Episodes child workflow runs. A round
// of 2,000 groups × 6 attempts is 24 children: no history comes near
// Temporal's limits (51,200 events, 50 MB; 2,000 pending activities).
const ChunkSize = 500

// ChildID is the workflow id of chunk k of a phase's episodes.
func ChildID(parent string, round int32, phase string, k int) string {
	return fmt.Sprintf("%s-r%d-%s-%d", parent, round, phase, k)
}

// EpisodesQuery answers an Episodes workflow's Tally so far.
const EpisodesQuery = "episodes"

// Cell is one episode to run: a task, an init state and its place.
type Cell struct {
	Task    schemas.Task
	InitID  int32
	Group   int32
	Attempt int32
}

// EpisodesInput is one chunk of a phase's episodes.
type EpisodesInput struct {
	Run          string
	Round        int32
	Phase        string
	WeightsID    string `json:"Weights"`
	Cells        []Cell
	InfraTries   int32
	StartToClose time.Duration
	Heartbeat    time.Duration
	// Priority orders this chunk's weights in the fleet (fleet.TrainPriority,
	// fleet.EvalPriority; lower first); 0 is fleet.EvalPriority.
	Priority int `json:",omitempty"`
	// Again says the parent queues episodes of the same weights right
	// after these (DemandChange.Again).
	Again bool `json:",omitempty"`
	// PerHost is the harness's model_server.per_host, for the fleet.
	PerHost int `json:",omitempty"`
	// StopKey is the stop marker of the evaluation the chunk belongs to
	// (schemas.Layout.EvalStop); episodes not started when it exists
	// skip themselves. "" for training, which uses the run's STOP marker.
	StopKey string `json:",omitempty"`
}

// Tally counts what a set of episodes did; it is the result of Episodes.
type Tally struct {
	Total     int
	Done      int // finished: valid, invalid or lost
	Valid     int
	Successes int
	Lost      int // the activity failed for good: no record exists
	Skipped   int // not run because the run is stopping
	Reruns    int // episodes run again because their staged records were corrupt
	// Unservable says why the episodes stopped: no rollout host could load
	// their weights, or their model server ignores the call seeds the
	// harness relies on (collect.call_seeds). The run stops with it.
	Unservable string `json:",omitempty"`
	// Fleet is the fleet's latest note on the episodes' weights (which
	// hosts serve them, the run's model-server loads): carried in the
	// result, it reaches the parent's details without a signal.
	Fleet string `json:",omitempty"`
}

// Add sums o into t.
func (t *Tally) Add(o Tally) {
	t.Total += o.Total
	t.Done += o.Done
	t.Valid += o.Valid
	t.Successes += o.Successes
	t.Lost += o.Lost
	t.Skipped += o.Skipped
	t.Reruns += o.Reruns
	if t.Unservable == "" {
		t.Unservable = o.Unservable
	}
	if o.Fleet != "" {
		t.Fleet = o.Fleet
	}
}
