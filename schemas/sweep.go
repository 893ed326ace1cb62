package schemas

// Leaderboard is sweeps/<name>/leaderboard.json: every weights id a
// scheduled validation sweep evaluated, best first. leaderboard.md beside
// it is the same as a markdown table.
type Leaderboard struct {
	Sweep string `json:"sweep"`
	// Source is where the sweep finds weights: a run name, or an
	// s3://bucket/prefix/ URL whose sub-directories are weights ids.
	Source string `json:"source"`
	// Run is the evaluation run: its prefix holds harness.json, the
	// (imported) weights and the eval/<tag>/report.json of each entry.
	Run         string             `json:"run"`
	InitKey     string             `json:"init_key"`
	UpdatedAtMS int64              `json:"updated_at_ms"`
	Entries     []LeaderboardEntry `json:"entries"`
}

// LeaderboardEntry is the evaluation of one weights id.
type LeaderboardEntry struct {
	WeightsID string `json:"weights_id"` // as named in the source
	// RunWeightsID is the id evaluated in the evaluation run: WeightsID for
	// a run source; for an s3 prefix, the imported copy's id
	// (<id>-<content digest>), so ids of different sources never clash.
	RunWeightsID  string  `json:"run_weights_id"`
	Tag           string  `json:"tag"`
	SuccessRate   float64 `json:"success_rate"` // successes / valid
	Successes     int     `json:"successes"`
	Valid         int     `json:"valid"`
	Episodes      int     `json:"episodes"`
	ReportKey     string  `json:"report_key"`
	EvaluatedAtMS int64   `json:"evaluated_at_ms"`
	// Invalid and Lost count the other attempted episodes (Episodes counts
	// valid and invalid ones): success / attempted is
	// Successes / (Episodes + Lost).
	Invalid int `json:"invalid,omitempty"`
	Lost    int `json:"lost,omitempty"`
	// SuccessCI95 is the 95 % Wilson interval [lo, hi] of SuccessRate;
	// WithinNoise marks an entry whose interval overlaps the leader's (the
	// leader's included): the data cannot tell it from the leader.
	// Both are set when the leaderboard is sorted.
	SuccessCI95 []float64 `json:"success_ci95,omitempty"`
	WithinNoise bool      `json:"within_noise_of_leader,omitempty"`
}

// SweepRun is the evaluation run of a sweep over an s3 weights prefix:
// runs/sweep-<name>/ holds its harness.json, imported weights and reports.
func SweepRun(name string) string { return "sweep-" + name }

// SweepTag is the report tag of a sweep's evaluation of a weights id.
func SweepTag(name, weightsID string) string { return "sweep-" + name + "-" + weightsID }

// ImportedID is the id weights from an s3 prefix get in the evaluation
// run: the source id plus the start of their content digest, so weights of
// other prefixes (or changed in place) never overwrite each other.
func ImportedID(id, digest string) string { return id + "-" + digest[:min(12, len(digest))] }
