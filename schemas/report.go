package schemas

import (
	"fmt"
	"strings"
)

// Report is eval/<tag>/report.json: outcomes of one evaluation or validation pass.
// A shard of an evaluation is a Report too, at eval/<tag>/shards/<i>-of-<n>.json,
// with Scope "shard": it is never a score of the split.
type Report struct {
	Run       string       `json:"run"`
	Tag       string       `json:"tag"`
	WeightsID string       `json:"weights_id"`
	InitKey   string       `json:"init_key"`
	Harness   string       `json:"harness"`
	Digest    string       `json:"config_digest"`
	Round     int32        `json:"round"`
	Tasks     []TaskResult `json:"tasks"`
	Overall   TaskResult   `json:"overall"`
	// Suites has one result per suite name (Task -1), in the order the
	// harness first names them.
	Suites []TaskResult `json:"suites,omitempty"`
	// WeightsDigest hashes the weights' manifest files (names, sizes,
	// SHA-256), so reports compare weights by content, not by id.
	WeightsDigest string `json:"weights_digest,omitempty"`
	// Scope is ScopeFull or ScopeShard ("" in reports from before: full).
	Scope  string `json:"scope,omitempty"`
	Shard  int    `json:"shard"`            // this shard's index (0 when full)
	Shards int    `json:"shards,omitempty"` // shard count; 1 when full
	// MergedFrom lists the shard reports a merged report was built from.
	MergedFrom []string `json:"merged_from,omitempty"`
	// SplitCells is the number of (task, init id) cells of the whole split;
	// Cells the ones this report covers (CellID form), so merged shards can
	// be checked complete and disjoint; Missing those of Cells without an
	// episode record (lost episodes, counted in Lost).
	SplitCells   int      `json:"split_cells,omitempty"`
	Cells        []string `json:"cells,omitempty"`
	Missing      []string `json:"missing,omitempty"`
	StartedAtMS  int64    `json:"started_at_ms,omitempty"`
	FinishedAtMS int64    `json:"finished_at_ms,omitempty"`
	// MaxInvalidShare is the harness's collect.max_invalid_share the report
	// was judged by, and OverInvalidLimit says Overall's invalid share
	// (invalid and lost over attempted) exceeds it: its success rate speaks
	// for the episodes that ran, not for the split. 0/false in reports from
	// before: unknown.
	MaxInvalidShare  float64 `json:"max_invalid_share,omitempty"`
	OverInvalidLimit bool    `json:"over_invalid_limit,omitempty"`
	// On eval_init_ids reports, the harness's final-score protocol: its
	// name, its episode count, and the tasks a final score must cover
	// (every task when the harness names no protocol).
	Protocol         string  `json:"protocol,omitempty"`
	ProtocolEpisodes int     `json:"protocol_episodes,omitempty"`
	RequiredTasks    []int32 `json:"required_tasks,omitempty"`
	// Stopped says the evaluation was stopped before every cell ran: the
	// report is incomplete (its skipped cells are missing), never a score
	// of the split. nil when every cell ran.
	Stopped *ReportStop `json:"stopped,omitempty"`
	// OmittedTasks, on a report's copy in workflow history (ForHistory),
	// is how many per-task rows were left out of Tasks (and RequiredTasks
	// with them); the stored report has them all. 0 in stored reports.
	OmittedTasks int `json:"omitted_tasks,omitempty"`
}

// Key is where the report is stored: eval/<tag>/report.json, or its
// shard's file.
func (r Report) Key() string {
	l := Layout{Run: r.Run}
	if r.IsShard() {
		return l.ShardReport(r.Tag, r.Shard, r.Shards)
	}
	return l.Report(r.Tag)
}

// HistoryTaskRows is the most per-task rows an evaluation's report carries
// into workflow history: about 170 bytes each, so 1000 rows stay near
// 170 KB, where 10,030 rows (LIBERO-Plus) would be 1.7 MB, close to the
// server's 2 MB payload limit (docs/design.md §2).
const HistoryTaskRows = 1000

// ForHistory is the report as an activity or workflow returns it: the
// counts, never the cell lists, and per-task rows only up to
// HistoryTaskRows. A validation report keeps every row, as pool selection
// reads them (training harnesses list tens to hundreds of tasks).
// Whoever needs the rows of a larger report reads it from S3.
func (r Report) ForHistory() Report {
	r.Cells, r.Missing = nil, nil
	if len(r.Tasks) > HistoryTaskRows && !IsValTag(r.Tag) {
		r.OmittedTasks = len(r.Tasks)
		r.Tasks, r.RequiredTasks = nil, nil
	}
	return r
}

// ReportStop is why a report is incomplete: the stop's reason and how
// many of its cells were skipped.
type ReportStop struct {
	Reason  string `json:"reason"`
	Skipped int    `json:"skipped"`
}

// Report scopes: a full report covers every cell of its split; a shard
// report only cells i with i % Shards == Shard.
const (
	ScopeFull  = "full"
	ScopeShard = "shard"
)

// IsShard says the report covers one shard of its split, not all of it.
func (r Report) IsShard() bool { return r.Scope == ScopeShard || r.Shards > 1 }

// CellID names a (task, init id) cell in Report.Cells and Report.Missing.
func CellID(task, initID int32) string { return fmt.Sprintf("%d:%d", task, initID) }

// TaskResult counts outcomes of one task (or a suite, or all tasks, in Overall).
type TaskResult struct {
	Task        int32   `json:"task"`
	Name        string  `json:"name,omitempty"`
	Suite       string  `json:"suite,omitempty"`
	Episodes    int     `json:"episodes"`
	Valid       int     `json:"valid"`
	Invalid     int     `json:"invalid"`
	Successes   int     `json:"successes"`
	SuccessRate float64 `json:"success_rate"`   // successes / valid
	Lost        int     `json:"lost,omitempty"` // cells without an episode record
	// SuccessCI95 is the 95 % Wilson interval [lo, hi] of SuccessRate
	// (absent in reports from before, or without a valid episode).
	SuccessCI95 []float64 `json:"success_ci95,omitempty"`
	// InvalidByCause counts Invalid by the episodes' failure class
	// (absent in reports from before).
	InvalidByCause map[string]int `json:"invalid_by_cause,omitempty"`
}

// Attempted is every episode the result asked for: valid, invalid and lost.
func (r TaskResult) Attempted() int { return r.Episodes + r.Lost }

// InvalidShare is the share of attempted episodes that did not count:
// invalid and lost (0 when none was attempted).
func (r TaskResult) InvalidShare() float64 {
	if r.Attempted() == 0 {
		return 0
	}
	return float64(r.Invalid+r.Lost) / float64(r.Attempted())
}

// RoundSummary is what one round did; rounds/round=R/summary.json and the
// workflow result carry it.
type RoundSummary struct {
	Round        int32   `json:"round"`
	WeightsID    string  `json:"weights_in"`
	NewWeightsID string  `json:"weights_out"`
	ValSuccess   float64 `json:"val_success"` // validation success rate of WeightsID (-1 when not validated)
	PoolTasks    []int32 `json:"pool_tasks"`
	// The collection's counts; InvalidByCause also counts "lost" episodes
	// whose activity failed for good and left no record.
	BatchSummary
	SuccessRate float64        `json:"success_rate"` // collection success over valid episodes
	Trainer     TrainerMetrics `json:"trainer"`
	Prefix      string         `json:"prefix"` // S3 prefix of the run
	// Val is the overall result of the validation that opened the round
	// (nil when none ran, or in summaries from before).
	Val *TaskResult `json:"val,omitempty"`
	// MaxInvalidShare is the harness's collect.max_invalid_share when the
	// round ran (0 in summaries from before: the default applies).
	MaxInvalidShare float64 `json:"max_invalid_share,omitempty"`
	// OverInvalidLimit names what of the round went over that limit
	// (OverLimit's answer when the round ended; "" when nothing did, or in
	// summaries from before).
	OverInvalidLimit string `json:"over_invalid_limit,omitempty"`
	// Overlapped rounds (collect.max_staleness ≥ 1; docs/design.md §4):
	// CollectedOn is the weights the round's episodes ran on (WeightsID
	// is what its trainer started from), PoolFrom the tag of the
	// validation report its pool was chosen from, and MaxStaleness the
	// bound η it ran under. Empty in synchronous rounds.
	CollectedOn string `json:"collected_on,omitempty"`
	// When the round's collection and training ran (workflow time, Unix
	// ms; 0 in summaries from before, and for a training that did not
	// run): what the idle shares of the fleet and the trainer come from.
	CollectStartMS int64  `json:"collect_start_ms,omitempty"`
	CollectEndMS   int64  `json:"collect_end_ms,omitempty"`
	TrainStartMS   int64  `json:"train_start_ms,omitempty"`
	TrainEndMS     int64  `json:"train_end_ms,omitempty"`
	PoolFrom       string `json:"pool_from,omitempty"`
	MaxStaleness   int32  `json:"max_staleness,omitempty"`
}

// Attempted is every collection episode the round asked for: valid,
// invalid, and lost (counted in InvalidByCause["lost"], not in Episodes).
func (r RoundSummary) Attempted() int { return r.Episodes + r.InvalidByCause["lost"] }

// InvalidShare is the share of the collection's attempted episodes that
// did not count: invalid or lost (0 when none was attempted).
func (r RoundSummary) InvalidShare() float64 {
	if r.Attempted() == 0 {
		return 0
	}
	return float64(r.Attempted()-r.Valid) / float64(r.Attempted())
}

// InvalidLimit is the invalid share the round is judged by.
func (r RoundSummary) InvalidLimit() float64 {
	if r.MaxInvalidShare > 0 {
		return r.MaxInvalidShare
	}
	return DefaultMaxInvalidShare
}

// OverLimit names what of the round went over its invalid limit
// ("collection", "validation", both joined by " and "), "" when nothing did.
func (r RoundSummary) OverLimit() string {
	var over []string
	if r.InvalidShare() > r.InvalidLimit() {
		over = append(over, "collection")
	}
	if r.Val != nil && r.Val.InvalidShare() > r.InvalidLimit() {
		over = append(over, "validation")
	}
	return strings.Join(over, " and ")
}

// BatchSummary is what building a round's training batch reports.
type BatchSummary struct {
	Episodes       int            `json:"episodes"`
	Valid          int            `json:"valid"`
	Invalid        int            `json:"invalid"`
	InvalidByCause map[string]int `json:"invalid_by_cause,omitempty"`
	// TaskFailuresByReason counts valid episodes without success by
	// Episode.Reason ("unrecorded" for rows from before reasons).
	TaskFailuresByReason map[string]int `json:"task_failures_by_reason,omitempty"`
	Successes            int            `json:"successes"`
	Groups               int            `json:"groups"`
	GroupsWithSignal     int            `json:"groups_with_signal"`
	Calls                int            `json:"calls"`
	UntrainableCalls     int            `json:"untrainable_calls"`
	// UntrainableByReason counts them by Call.UntrainableReason
	// ("unrecorded" for calls recorded before reasons).
	UntrainableByReason map[string]int `json:"untrainable_by_reason,omitempty"`
	// Calls dropped by the selection filters (schemas.Filters), before selection.
	DroppedLength      int `json:"dropped_length"`
	DroppedPostSuccess int `json:"dropped_post_success"`
	Samples            int `json:"samples"`
	ZeroWeightSamples  int `json:"zero_weight_samples"`
	// Images the samples' requests sent: distinct blobs, and summed over
	// samples (an image every turn repeats counts each time).
	Images    int    `json:"images,omitempty"`
	ImageRefs int    `json:"image_refs,omitempty"`
	BatchKey  string `json:"batch_key"` // S3 key of batch.npz ("" when no sample)
	// Staleness is the samples by staleness against the trainer's
	// starting weights (nil in summaries from before; {0: Samples} in a
	// synchronous round), SampledBy the samples by the weights that
	// sampled them.
	Staleness Staleness      `json:"staleness,omitempty"`
	SampledBy map[string]int `json:"sampled_by,omitempty"`
}

// State is runs/<run>/state.json: where a run stands, for people and tools
// (the workflow itself resumes from Temporal history, not from this file).
type State struct {
	Run              string         `json:"run"`
	Harness          string         `json:"harness"`
	InitialWeightsID string         `json:"initial_weights"`
	WeightsID        string         `json:"weights"`
	RoundsDone       int32          `json:"rounds_done"`
	Rounds           int32          `json:"rounds"`
	Summaries        []RoundSummary `json:"summaries"`
	FinalValSuccess  float64        `json:"final_val_success"`
	// Stopped: the run ended on a stop request during round RoundsDone+1
	// in StoppedPhase; resuming restarts that round, skipping what it did.
	Stopped      bool   `json:"stopped,omitempty"`
	StoppedPhase string `json:"stopped_phase,omitempty"`
	UpdatedAtMS  int64  `json:"updated_at_ms"`
}

// RunSpec is a run's run.json: how `starter train` started it.
type RunSpec struct {
	Run              string   `json:"run"`
	Rounds           int32    `json:"rounds"`
	Groups           int      `json:"groups"`
	Attempts         int      `json:"attempts"`
	PoolReport       string   `json:"pool_report,omitempty"` // bucket key
	WeightsSource    string   `json:"weights_source"`        // the --weights path, for people
	HeartbeatTimeout Duration `json:"heartbeat_timeout"`
	StartedAtMS      int64    `json:"started_at_ms"`
	// MaxStaleness is η the run started with (collect.max_staleness or
	// --max-staleness): a resume must keep it.
	MaxStaleness int32 `json:"max_staleness,omitempty"`
}
