// Package schemas holds every data shape Roundhouse stores or exchanges:
// Parquet rows, reports, run state and the harness configuration.
// It is the single source of truth; other packages import these types.
package schemas

// Phases of a round, used in record partitions and episode ids.
const (
	PhaseVal   = "val"   // validation on val_init_ids
	PhaseTrain = "train" // grouped collection on train_init_ids
	PhaseEval  = "eval"  // evaluation runs
)

// Failure classes of an episode.
const (
	FailureNone    = ""               // episode completed (success or task failure)
	FailureTask    = "task"           // valid episode, the task was not solved
	FailureInfra   = "infrastructure" // services or planner failed: invalid episode
	FailureTimeout = "timeout"        // rows written before failure classes by origin (docs/design.md §7): invalid
)

// Call is one model request seen by the recording proxy
// (calls/round=R/phase=P/<episode>.parquet).
type Call struct {
	Run       string `parquet:"run" json:"run"`
	Round     int32  `parquet:"round" json:"round"`
	Phase     string `parquet:"phase" json:"phase"`
	EpisodeID string `parquet:"episode_id" json:"episode_id"`
	Group     int32  `parquet:"group" json:"group"`
	Attempt   int32  `parquet:"attempt" json:"attempt"`
	Retry     int32  `parquet:"retry" json:"retry"`
	CallIndex int32  `parquet:"call_index" json:"call_index"`
	WeightsID string `parquet:"weights_id" json:"weights_id"`
	Model     string `parquet:"model" json:"model"`
	// StartedAtMS is the Unix time in milliseconds when the proxy received the request.
	StartedAtMS int64   `parquet:"started_at_ms" json:"started_at_ms"`
	LatencyMS   float64 `parquet:"latency_ms" json:"latency_ms"`
	HTTPStatus  int32   `parquet:"http_status" json:"http_status"`
	Error       string  `parquet:"error" json:"error"`
	Stream      bool    `parquet:"stream" json:"stream"`
	// Request is the JSON body exactly as the harness sent it, except that
	// each inline base64 image is replaced by its blob reference
	// (blob://sha256/<name>, the bytes stored once under blobs/).
	Request string `parquet:"request" json:"request"`
	// Seed is the sampling seed of the call as forwarded: the harness's own
	// or, with SeedInjected, the one the proxy derived (collect.call_seeds);
	// nil when the call went without one, and in files written before it.
	Seed         *int64 `parquet:"seed,optional" json:"seed,omitempty"`
	SeedInjected bool   `parquet:"seed_injected" json:"seed_injected,omitempty"`
	// Images are the blob names (<sha256>.<ext>) of the request's inline
	// images in the order they appear in it, which is prompt order; an image
	// sent twice is listed twice. The batch hands them to the trainer.
	Images             []string  `parquet:"images,list" json:"images"`
	PromptTokenIDs     []int32   `parquet:"prompt_token_ids,list" json:"prompt_token_ids"`
	CompletionTokenIDs []int32   `parquet:"completion_token_ids,list" json:"completion_token_ids"`
	CompletionLogprobs []float32 `parquet:"completion_logprobs,list" json:"completion_logprobs"`
	FinishReason       string    `parquet:"finish_reason" json:"finish_reason"`
	// ToolCalls is the JSON array of tool calls the model returned ("" when none).
	ToolCalls        string `parquet:"tool_calls" json:"tool_calls"`
	Content          string `parquet:"content" json:"content"`
	PromptTokens     int32  `parquet:"prompt_tokens" json:"prompt_tokens"`
	CompletionTokens int32  `parquet:"completion_tokens" json:"completion_tokens"`
	// Sampling is what the completion was sampled with: the request's
	// settings, the model server's defaults for those it left out.
	Sampling
	// Trainable is false when the call cannot train: the upstream returned
	// no token ids or logprobs, or the trainer cannot reproduce the
	// distribution its tokens were drawn from. Such a call is kept for the
	// record but never selected for training; UntrainableReason says why.
	Trainable bool `parquet:"trainable" json:"trainable"`
	// UntrainableReason is "" for a trainable call, else the reasons,
	// comma-separated (docs/design.md §3, "Sampling settings"): failed,
	// no_token_ids, no_logprobs, token_count_mismatch, or what in the
	// sampling the trainer cannot reproduce (greedy, temperature_raw,
	// top_p, top_k, min_p, repetition_penalty, presence_penalty,
	// frequency_penalty, structured_output, logit_bias, bad_words,
	// allowed_token_ids, min_tokens, unknown_logprobs_mode).
	UntrainableReason string `parquet:"untrainable_reason" json:"untrainable_reason,omitempty"`
}

// Sampling is a call's effective sampling settings (docs/design.md §3,
// "Sampling settings"), flat columns of the calls table. Rows written
// before they existed read as zero values with LogprobsMode "".
type Sampling struct {
	Temperature float64 `parquet:"temperature" json:"temperature" yaml:"temperature"`
	TopP        float64 `parquet:"top_p" json:"top_p" yaml:"top_p"`
	// TopK 0 is no top-k (vLLM's -1 and 0 both mean that).
	TopK              int32   `parquet:"top_k" json:"top_k" yaml:"top_k"`
	MinP              float64 `parquet:"min_p" json:"min_p" yaml:"min_p"`
	RepetitionPenalty float64 `parquet:"repetition_penalty" json:"repetition_penalty" yaml:"repetition_penalty"`
	PresencePenalty   float64 `parquet:"presence_penalty" json:"presence_penalty" yaml:"presence_penalty"`
	FrequencyPenalty  float64 `parquet:"frequency_penalty" json:"frequency_penalty" yaml:"frequency_penalty"`
	// Defaulted names the settings above that the request left out, so
	// the server's defaults gave them.
	Defaulted []string `parquet:"sampling_defaulted,list" json:"sampling_defaulted" yaml:"-"`
	// Constraints names what else in the request shaped the distribution:
	// structured output (response_format, tool_choice required or named,
	// structured_outputs or guided_*), logit_bias, bad_words,
	// allowed_token_ids, min_tokens.
	Constraints []string `parquet:"sampling_constraints,list" json:"sampling_constraints" yaml:"-"`
	// LogprobsMode is what the server's logprobs were (model_server.sampling).
	LogprobsMode string `parquet:"logprobs_mode" json:"logprobs_mode" yaml:"-"`
}

// CallCounts is the projection of Call that advantages and selection read:
// no token arrays, no request, so a round's calls are cheap to scan.
type CallCounts struct {
	EpisodeID        string `parquet:"episode_id"`
	CallIndex        int32  `parquet:"call_index"`
	PromptTokens     int32  `parquet:"prompt_tokens"`
	CompletionTokens int32  `parquet:"completion_tokens"`
	Trainable        bool   `parquet:"trainable"`
	// UntrainableReason lets a round count why calls did not train.
	UntrainableReason string `parquet:"untrainable_reason"`
	// Temperature and LogprobsMode give the trainer the temperature of
	// processed logprobs (schemas.BatchTemperatures).
	Temperature  float64 `parquet:"temperature"`
	LogprobsMode string  `parquet:"logprobs_mode"`
}

// CallTokens is the projection of Call that the training batch needs.
type CallTokens struct {
	EpisodeID          string    `parquet:"episode_id"`
	CallIndex          int32     `parquet:"call_index"`
	PromptTokenIDs     []int32   `parquet:"prompt_token_ids,list"`
	CompletionTokenIDs []int32   `parquet:"completion_token_ids,list"`
	CompletionLogprobs []float32 `parquet:"completion_logprobs,list"`
	Images             []string  `parquet:"images,list"`
}

// Episode is the outcome of one episode
// (episodes/round=R/phase=P/<episode>.parquet).
type Episode struct {
	Run       string `parquet:"run" json:"run"`
	Round     int32  `parquet:"round" json:"round"`
	Phase     string `parquet:"phase" json:"phase"`
	EpisodeID string `parquet:"episode_id" json:"episode_id"`
	Task      int32  `parquet:"task" json:"task"`
	TaskName  string `parquet:"task_name" json:"task_name"`
	Suite     string `parquet:"suite" json:"suite"`
	InitID    int32  `parquet:"init_id" json:"init_id"`
	Group     int32  `parquet:"group" json:"group"`
	Attempt   int32  `parquet:"attempt" json:"attempt"`
	// Retry is the number of earlier tries of this same episode (0 on the first).
	Retry        int32   `parquet:"retry" json:"retry"`
	WeightsID    string  `parquet:"weights_id" json:"weights_id"`
	Success      bool    `parquet:"success" json:"success"`
	Reward       float64 `parquet:"reward" json:"reward"`
	Valid        bool    `parquet:"valid" json:"valid"`
	FailureClass string  `parquet:"failure_class" json:"failure_class"`
	Termination  string  `parquet:"termination" json:"termination"`
	// Reason is a task failure's short, countable cause: out_of_time,
	// planner_error, or how the episode ran out (the toy's max_turns,
	// finish_claimed; RPent's finish_claimed, gave_up, not_terminated, and in code mode code_error,
	// code_timeout, code_max_calls when its last snippet failed so); ""
	// otherwise and in rows written before it existed.
	Reason   string `parquet:"reason" json:"reason,omitempty"`
	NumCalls int32  `parquet:"num_calls" json:"num_calls"`
	// SuccessCall is the index of the first call made after the environment
	// reported success (so calls from it on are post-success), or -1 when
	// success never came or the outcome adapter cannot tell when it came.
	SuccessCall int32  `parquet:"success_call" json:"success_call"`
	StartedAtMS int64  `parquet:"started_at_ms" json:"started_at_ms"`
	DurationMS  int64  `parquet:"duration_ms" json:"duration_ms"`
	Host        string `parquet:"host" json:"host"`
	Artifacts   string `parquet:"artifacts" json:"artifacts"`
	// Try names the try this row is (schemas.TryID): the one the workflow
	// accepted, whose staged records were published ("" in rows written
	// before tries were fenced).
	Try string `parquet:"try" json:"try,omitempty"`
}

// Sample is one call selected for training (samples/round=R/samples.parquet).
type Sample struct {
	Run              string  `parquet:"run" json:"run"`
	Round            int32   `parquet:"round" json:"round"`
	EpisodeID        string  `parquet:"episode_id" json:"episode_id"`
	Group            int32   `parquet:"group" json:"group"`
	CallIndex        int32   `parquet:"call_index" json:"call_index"`
	Advantage        float64 `parquet:"advantage" json:"advantage"`
	Weight           float64 `parquet:"weight" json:"weight"`
	PromptTokens     int32   `parquet:"prompt_tokens" json:"prompt_tokens"`
	CompletionTokens int32   `parquet:"completion_tokens" json:"completion_tokens"`
	// Temperature is what the trainer divides the call's logits by
	// (BatchTemperatures): the call's temperature when its logprobs were
	// processed, else 1.
	Temperature float64 `parquet:"temperature" json:"temperature"`
	// WeightsID is the weights that sampled the call (its episode's), and
	// Staleness how many versions older they are than the trainer's
	// starting weights (BatchStaleness; 0 in synchronous rounds).
	WeightsID string `parquet:"weights_id" json:"weights_id,omitempty"`
	Staleness int32  `parquet:"staleness" json:"staleness"`
}
