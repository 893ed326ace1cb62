package schemas

import "time"

// SlotStats is what a rollout host's model-server slot did for one run: how often
// it loaded the run's weights and for how long, how long it sat loaded
// but unused, and how many of the run's episodes waited for it to be
// free of other weights. They show what switching weights costs a shared
// fleet.
type SlotStats struct {
	Run      string        `json:"run"`
	Loads    int           `json:"loads"`     // model-server starts for the run's weights
	Reloads  int           `json:"reloads"`   // of them, weights swapped into a running server (model_server.reload)
	Failed   int           `json:"failed"`    // starts that did not become ready
	LoadTime time.Duration `json:"load_time"` // fetching weights and starting, summed
	// FetchTime is the transfer part of LoadTime: fetching the weights.
	// The rest is the serving pause: starting the server, or swapping the
	// weights into it (Reloads), until it answers again.
	FetchTime time.Duration `json:"fetch_time,omitempty"`
	Idle      time.Duration `json:"idle"`  // loaded with the run's weights, no episode using it
	Waits     int           `json:"waits"` // episodes that waited while other weights were in use
	WaitTime  time.Duration `json:"wait_time"`
	Waiting   int           `json:"waiting"` // episodes waiting now
}

// Add sums o's figures into s (Run stays s's): a host's, or a run's
// across hosts.
func (s *SlotStats) Add(o SlotStats) {
	s.Loads += o.Loads
	s.Reloads += o.Reloads
	s.Failed += o.Failed
	s.LoadTime += o.LoadTime
	s.FetchTime += o.FetchTime
	s.Idle += o.Idle
	s.Waits += o.Waits
	s.WaitTime += o.WaitTime
	s.Waiting += o.Waiting
}

// Paused is the serving pause of the loads: LoadTime less FetchTime.
func (s SlotStats) Paused() time.Duration { return s.LoadTime - s.FetchTime }
