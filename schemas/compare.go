package schemas

// Comparison is a paired comparison of two evaluations on the same cells
// (same harness, tasks, init states): `starter compare` writes it as JSON
// next to the reports (Layout.Comparison).
type Comparison struct {
	Run      string `json:"run"`
	A        string `json:"a"` // report tags
	B        string `json:"b"`
	WeightsA string `json:"weights_a"`
	WeightsB string `json:"weights_b"`
	// Digest is both reports' harness config digest (they must agree).
	Digest string         `json:"config_digest"`
	Tasks  []PairedResult `json:"tasks"`
	// Suites has one result per suite (Task -1) when the tasks span
	// several, in the order the harness names them.
	Suites  []PairedResult `json:"suites,omitempty"`
	Overall PairedResult   `json:"overall"`
	// Discordant lists the cells one weights solved and the other did not.
	Discordant []DiscordantCell `json:"discordant"`
	// Unpaired counts cells without a valid episode under both weights
	// (an infrastructure failure or a lost episode on either side): they
	// say nothing about the planner and are left out of the test.
	Unpaired int `json:"unpaired"`
}

// PairedResult is one task's (or, Task -1, all tasks') paired counts.
type PairedResult struct {
	Task     int32  `json:"task"`
	Name     string `json:"name,omitempty"`
	Suite    string `json:"suite,omitempty"`
	Pairs    int    `json:"pairs"`     // cells valid under both
	SuccessA int    `json:"success_a"` // of the pairs
	SuccessB int    `json:"success_b"`
	OnlyA    int    `json:"only_a"` // discordant: A solved, B did not
	OnlyB    int    `json:"only_b"`
	// Difference is (SuccessB − SuccessA) / Pairs, B's gain over A.
	Difference float64 `json:"difference"`
	// PValue is the exact two-sided McNemar test on the discordant pairs
	// (binomial, p = 1/2): how likely so lopsided a split is if A and B
	// were equally good. 1 when there is no discordant pair.
	PValue float64 `json:"p_value"`
}

// DiscordantCell is a cell the two weights disagree on, with both
// episodes, so a person can open their artifacts.
type DiscordantCell struct {
	Task   int32       `json:"task"`
	InitID int32       `json:"init_id"`
	Winner string      `json:"winner"` // "a" or "b"
	A      EpisodeLink `json:"a"`
	B      EpisodeLink `json:"b"`
}

// EpisodeLink names an episode and where its files are.
type EpisodeLink struct {
	EpisodeID   string `json:"episode_id"`
	Success     bool   `json:"success"`
	Termination string `json:"termination"`
	Artifacts   string `json:"artifacts"`
}
