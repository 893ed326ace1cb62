package api

import (
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// The fleet workflow (Fleet): one per namespace, it decides which weights
// each rollout host serves (internal/fleet, docs/design.md §10). Episodes
// wait in the task queue of their weights; hosts poll the queues of the
// weights the fleet assigns them.

// FleetWorkflow is the fleet workflow's registered type name.
const FleetWorkflow = "Fleet"

// FleetID is the fleet workflow's id; whoever needs it first starts it
// (signal-with-start), so it runs whenever hosts or episodes exist.
const FleetID = "roundhouse-fleet"

// Signals the fleet takes, and the one it sends.
const (
	// DemandSignal carries a DemandChange from an Episodes workflow.
	DemandSignal = "demand"
	// ReportSignal carries a HostReport from a rollout host.
	ReportSignal = "report"
	// UnservableSignal tells an Episodes workflow that no host could load
	// its weights, with an Unservable.
	UnservableSignal = "unservable"
	// FleetNoteSignal carries a FleetNote to an Episodes workflow when
	// what the fleet says about its weights changes; the Episodes workflow
	// passes it on to its parent (Train, Eval). Both show it in their
	// current details.
	FleetNoteSignal = "fleet-note"
)

// FleetNote says where a run's weights stand on the fleet, in a line of
// markdown.
type FleetNote struct {
	Weights string
	Text    string
	// Where is Text's first part, where the weights stand (served by, or
	// waiting since). A parent is sent it only once its weights have
	// waited LongWait, and once more when they are served again: each
	// signal is a few events of the run's history, and a wait of a few
	// seconds while a host loads is no news.
	Where   string `json:",omitempty"`
	Waiting bool   `json:",omitempty"` // for LongWait or longer
}

// LongWait is how long weights wait unserved before the fleet's note
// says so to the run (FleetNote.Waiting).
const LongWait = 30 * time.Second

// Queries the fleet answers.
const (
	// AssignmentQuery takes a host name and answers its Assignment.
	AssignmentQuery = "assignment"
	// FleetStatusQuery answers a FleetStatus.
	FleetStatusQuery = "status"
)

// WeightsQueue is the task queue where episodes of weights key w (see
// fleet.Key) wait for a host that serves them.
func WeightsQueue(w string) string { return RolloutQueue + "/" + w }

// DemandChange registers (or with Done, removes) an Episodes workflow's
// demand for its weights.
type DemandChange struct {
	Demand fleet.Demand
	Done   bool
	// Again, with Done, says the same run queues episodes of these
	// weights again soon (a round's collection after its validation): the
	// fleet keeps their server for them (fleet.Policy.ExpectFor).
	Again bool `json:",omitempty"`
	// Left updates a standing demand's Remaining, nothing else: not its
	// Since, not its parking, since nothing new is queued. A demand the
	// fleet no longer holds stays gone.
	Left bool `json:",omitempty"`
}

// HostReport is a rollout host's state, sent when what it serves changes
// and every ReportEvery as its lease.
type HostReport struct {
	Host  fleet.Host
	Stats []schemas.SlotStats // per run, what the host's model slots did
}

// ReportEvery is how often a host reports when nothing changes; the fleet
// drops a host silent for fleet.Policy.Lease.
const ReportEvery = 5 * time.Second

// Assignment is what one host should serve: weights keys, at most its
// number of model servers.
type Assignment struct {
	Weights []string
}

// Unservable names weights every live host failed to load, with causes.
type Unservable struct {
	Weights string
	Cause   string
}

// FleetInput carries the fleet's state across continue-as-new.
type FleetInput struct {
	Policy fleet.Policy
	State  fleet.State
	Stats  map[string][]schemas.SlotStats // by host
}

// FleetStatus is the fleet as `starter status` shows it.
type FleetStatus struct {
	State fleet.State
	Stats map[string][]schemas.SlotStats // by host
}
