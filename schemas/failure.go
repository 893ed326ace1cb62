package schemas

import "time"

// ActivityFailure is one failed attempt of an activity that Temporal may
// still retry: what the terminal prints while following a run and what the
// workflow's current details show in the Temporal UI (docs/design.md §7).
type ActivityFailure struct {
	Workflow   string // workflow id the activity belongs to
	Activity   string // activity type, e.g. Train
	ActivityID string
	Label      string `json:",omitempty"` // what the attempt worked on, e.g. an episode; "" when unknown
	Attempt    int32
	Cause      string    // the last line of the failure's message
	FailedAt   time.Time // zero when unknown
	NextRetry  time.Time // zero: no retry is scheduled
	// Recovered marks a later attempt that succeeded: the failure is over.
	Recovered bool `json:",omitempty"`
}
