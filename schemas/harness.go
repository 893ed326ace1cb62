package schemas

import "slices"

// Harness is a harness file (harnesses/<name>/harness.yaml) after loading.
// Strings may hold {name} placeholders: vars are filled when the file is
// loaded (defaults from Vars, overridden by --var k=v); runtime placeholders
// (RuntimeVars) are filled by the activity that runs the command.
type Harness struct {
	Name string `yaml:"name" json:"name"`
	// Base, optional, is a harness file this one varies (a path relative to
	// this file): the loader reads it first, then this file's mappings
	// merge into it key by key and its lists and values replace the base's
	// (docs/harness.md). Empty after loading.
	Base string `yaml:"base" json:"-"`
	// Dir is the absolute directory of the harness file (set by the loader).
	Dir  string            `yaml:"-" json:"dir"`
	Vars map[string]string `yaml:"vars" json:"vars"`
	// Services run once per rollout host and are shared by its episodes
	// (VLA, SAM3, an env server...), started in order before the model server.
	Services []Service   `yaml:"services" json:"services"`
	Model    ModelServer `yaml:"model_server" json:"model_server"`
	Episode  EpisodeSpec `yaml:"episode" json:"episode"`
	Tasks    TaskList    `yaml:"tasks" json:"tasks"`
	Splits   Splits      `yaml:"splits" json:"splits"`
	// Protocol, optional, is the final-score protocol the tasks make up
	// (LIBERO-PRO's 800 episodes, say): checked when the file loads and
	// when an eval_init_ids report would be called final.
	Protocol Protocol `yaml:"protocol" json:"protocol,omitempty"`
	Collect  Collect  `yaml:"collect" json:"collect"`
	Trainer  Trainer  `yaml:"trainer" json:"trainer"`
	// Digest is the sha256 of the harness file bytes plus the vars (set by the loader).
	Digest string `yaml:"-" json:"digest"`
}

// Service is a long-running process on a rollout host. Its command gets
// {port}, a port allocated on the host for it; other commands reach it as
// {<name>_port} and {<name>_url}.
type Service struct {
	Name    string            `yaml:"name" json:"name"`
	Command []string          `yaml:"command" json:"command"`
	Env     map[string]string `yaml:"env" json:"env"`
	Ready   Ready             `yaml:"ready" json:"ready"`
	// StartTimeout bounds start-up until Ready passes (default 1m).
	StartTimeout Duration `yaml:"start_timeout" json:"start_timeout"`
	// External, when non-empty after vars are filled, is the URL of a
	// service that already runs elsewhere: nothing is started and
	// {<name>_url} is this URL.
	External string `yaml:"external" json:"external"`
	// StopBeforeTraining frees the host (GPU memory) when it also trains.
	StopBeforeTraining bool `yaml:"stop_before_training" json:"stop_before_training"`
	// MemoryShare, optional, is the fraction of a host's accelerator
	// memory the service takes (vLLM's --gpu-memory-utilization): the
	// model servers and services of one host must fit in 1.
	MemoryShare float64 `yaml:"memory_share,omitempty" json:"memory_share,omitempty"`
}

// Ready says how to tell a service is ready; the first set field is used.
type Ready struct {
	// HTTP is a path answering 2xx to GET, e.g. /health.
	HTTP string `yaml:"http" json:"http"`
	// Post is a path answering 2xx to POST of Body (JSON), e.g. RPent's
	// POST /call {"method":"healthz"}; Expect, when set, must appear in the answer.
	Post   string `yaml:"post" json:"post"`
	Body   string `yaml:"body" json:"body"`
	Expect string `yaml:"expect" json:"expect"`
	// Log is text the service prints when ready, e.g. "RPC server listening on".
	Log string `yaml:"log" json:"log"`
}

// ModelServer is the OpenAI-compatible server the planner calls through the
// proxy. It is a service restarted whenever the weights change.
type ModelServer struct {
	Service    `yaml:",inline"`
	ServedName string `yaml:"served_name" json:"served_name"`
	// WeightsFile, optional, is the one file of a weights directory that the
	// model server and trainer use: {weights}, {weights_in} and
	// {weights_out} then name that file instead of the directory.
	WeightsFile string `yaml:"weights_file" json:"weights_file"`
	// Vision says the model reads images: the batch takes each request's
	// images to the trainer, and a weights directory (one with config.json)
	// must carry its processor (preprocessor_config.json). False, the
	// default, declares a text-only model: a selected call that sent images
	// stops the batch rather than train on a prompt with its pictures gone.
	Vision bool `yaml:"vision" json:"vision"`
	// PerHost is how many model servers, each with other weights, one host
	// keeps loaded at once (default 1). Above 1 it needs MemoryShare, and
	// PerHost × MemoryShare plus the services' shares must fit in 1.
	PerHost int `yaml:"per_host,omitempty" json:"per_host,omitempty"`
	// Reload, when set, swaps the weights of a running model server
	// instead of restarting it: {weights} is then a path the host points
	// at the new weights before it sends these requests in order (vLLM:
	// sleep, collective_rpc reload_weights, wake_up) and checks Ready.
	Reload []ReloadStep `yaml:"reload,omitempty" json:"reload,omitempty"`
	// Sampling says what the server returns as logprobs and where the
	// settings a request leaves out come from (docs/design.md §3,
	// "Sampling settings").
	Sampling SamplingSpec `yaml:"sampling,omitempty" json:"sampling,omitempty"`
	// ProcessorProbe, for a vision model, is a command the rollout host
	// runs once per weights it serves, with the model server's
	// {placeholders}: it prints, as JSON on its last line, the processor
	// the model server makes pixels with (ProcessorInfo). The trainer gets
	// it as {rollout_processor} and flags a different one before training.
	ProcessorProbe []string `yaml:"processor_probe,omitempty" json:"processor_probe,omitempty"`
}

// Logprobs modes of a model server (vLLM's --logprobs-mode) and sources of
// its sampling defaults (vLLM's --generation-config).
const (
	LogprobsRaw          = "raw_logprobs"       // vLLM's default: before penalties, temperature and truncation
	LogprobsProcessed    = "processed_logprobs" // vLLM ≥ 0.10.2: of the distribution the token was drawn from
	GenerationConfigAuto = "auto"               // vLLM's default: the weights' generation_config.json, then vLLM's own
	GenerationConfigVLLM = "vllm"               // vLLM's own neutral defaults only
)

// SamplingSpec is model_server.sampling. Both fields take vLLM's defaults
// when left out, so a harness that says nothing is judged as vLLM serves it.
type SamplingSpec struct {
	// LogprobsMode is what the server's logprobs are: raw_logprobs or
	// processed_logprobs. It must match the server command's --logprobs-mode.
	LogprobsMode string `yaml:"logprobs_mode,omitempty" json:"logprobs_mode,omitempty"`
	// GenerationConfig is where a request's missing settings come from:
	// auto, the weights' generation_config.json (read by the rollout host
	// from the weights it serves) over vLLM's own, or vllm, vLLM's own
	// (temperature 1, no truncation, no penalty). It must match the server
	// command's --generation-config.
	GenerationConfig string `yaml:"generation_config,omitempty" json:"generation_config,omitempty"`
}

// ReloadStep is one request of a model server's in-place reload: POST
// Post (a path) with Body; Expect, when set, must appear in the answer.
type ReloadStep struct {
	Post   string `yaml:"post" json:"post"`
	Body   string `yaml:"body,omitempty" json:"body,omitempty"`
	Expect string `yaml:"expect,omitempty" json:"expect,omitempty"`
}

// EpisodeSpec is the command that runs one episode as a subprocess.
type EpisodeSpec struct {
	Command []string          `yaml:"command" json:"command"`
	Env     map[string]string `yaml:"env" json:"env"`
	Timeout Duration          `yaml:"timeout" json:"timeout"`
	// Outcome names the adapter that turns the output dir into an outcome.
	Outcome OutcomeSpec `yaml:"outcome" json:"outcome"`
	// Artifacts are glob patterns, relative to the output dir, of the files
	// uploaded with the episode's records (default: every file).
	Artifacts []string `yaml:"artifacts" json:"artifacts"`
}

// OutcomeSpec selects and configures an outcome adapter: "minimal" (the
// toy's outcome.json), "rpent_libero" (RPent's output dir) or "json" (any
// harness writing a JSON file: name the file and the fields).
type OutcomeSpec struct {
	Adapter string `yaml:"adapter" json:"adapter"`
	File    string `yaml:"file" json:"file"`
	// For the json adapter: dotted paths into File (a.b.0.c). Success is a
	// boolean; Reward a number (default: 1 on success, else 0); Error, when
	// a non-empty string or true, marks an infrastructure failure.
	Success string `yaml:"success" json:"success"`
	Reward  string `yaml:"reward" json:"reward"`
	Error   string `yaml:"error" json:"error"`
	// SuccessTurn, optional, is the 1-based planner turn at which the
	// environment reported success; it lets the post-success filter work.
	SuccessTurn string `yaml:"success_turn" json:"success_turn"`
}

// Task is one task of the harness; Suite groups tasks in reports. ID
// names the task in every record and report, so it is unique in the
// harness; Number is its number within its suite, which a multi-suite
// harness passes to the episode (RPent's --suite S --task N).
type Task struct {
	ID    int32  `yaml:"id" json:"id"`
	Name  string `yaml:"name" json:"name"`
	Suite string `yaml:"suite" json:"suite"`
	// Number is what {task_number} gives the episode command (default: ID).
	Number *int32 `yaml:"number" json:"number,omitempty"`
	// Numbers and FirstID write many tasks of one suite in one entry:
	// {suite: S, numbers: "0-9", first_id: 10} is the tasks with ids
	// 10..19 and numbers 0..9, named S_0..S_9. The loader expands them.
	// In JSON (TaskList) they are the compact form of a run of tasks.
	Numbers string `yaml:"numbers" json:"numbers,omitempty"`
	FirstID *int32 `yaml:"first_id" json:"first_id,omitempty"`
}

// SuiteNumber is the task's number within its suite.
func (t Task) SuiteNumber() int32 {
	if t.Number != nil {
		return *t.Number
	}
	return t.ID
}

// Protocol is a final-score protocol: the suites whose every task a final
// score must cover, and the number of episodes that makes (required tasks
// × eval_init_ids).
type Protocol struct {
	// Name labels final scores, e.g. LIBERO-PRO.
	Name string `yaml:"name" json:"name,omitempty"`
	// Suites are the required suites (default: every suite of the tasks).
	Suites []string `yaml:"suites" json:"suites,omitempty"`
	// Episodes, when set, is the protocol's published episode count; the
	// loader refuses a file whose required tasks × eval_init_ids differ.
	Episodes int `yaml:"episodes" json:"episodes,omitempty"`
}

// Required says whether a task of suite s is required by the protocol.
func (p Protocol) Required(suite string) bool {
	return len(p.Suites) == 0 || slices.Contains(p.Suites, suite)
}

// RequiredTasks lists the ids of the tasks a final score must cover.
func (h Harness) RequiredTasks() []int32 {
	var out []int32
	for _, t := range h.Tasks {
		if h.Protocol.Required(t.Suite) {
			out = append(out, t.ID)
		}
	}
	return out
}

// Splits are the init-state id ranges, written like "11-44" or "1,3,5-7".
type Splits struct {
	Train string `yaml:"train_init_ids" json:"train_init_ids"`
	Val   string `yaml:"val_init_ids" json:"val_init_ids"`
	Eval  string `yaml:"eval_init_ids" json:"eval_init_ids"`
}

// Collect holds collection and selection defaults (docs/design.md §4).
type Collect struct {
	Groups             int `yaml:"groups" json:"groups"`
	Attempts           int `yaml:"attempts" json:"attempts"`
	MaxCallsPerEpisode int `yaml:"max_calls_per_episode" json:"max_calls_per_episode"`
	// Selection is the rule picking an episode's calls when it has more than
	// MaxCallsPerEpisode: random (default, seeded), first, last or spread.
	Selection string `yaml:"selection" json:"selection"`
	// InfraRetries is how many more times an episode that failed for
	// infrastructure reasons is tried before it is recorded as invalid.
	InfraRetries int   `yaml:"infra_retries" json:"infra_retries"`
	Seed         int64 `yaml:"seed" json:"seed"`
	// CallSeeds gives every model call that carries no "seed" of its own
	// one derived from Seed and the call's cell (task, init id), attempt and
	// call index, so that two evaluations of the same weights sample alike
	// (docs/design.md §3). Only for model servers that honour a per-request
	// seed, as vLLM does; the proxy checks that they do.
	CallSeeds bool `yaml:"call_seeds" json:"call_seeds,omitempty"`
	// PoolBand: tasks whose validation success rate lies strictly inside
	// (low, high) form the collection pool.
	PoolBand [2]float64 `yaml:"pool_band" json:"pool_band"`
	// ValidateEveryRound validates before every round, not only the first.
	ValidateEveryRound bool `yaml:"validate_every_round" json:"validate_every_round"`
	// FinalValidation validates the last round's weights after training.
	FinalValidation bool `yaml:"final_validation" json:"final_validation"`
	// Filters drop calls before selection (docs/design.md §4); all off by default.
	Filters Filters `yaml:"filters" json:"filters"`
	// MaxInvalidShare is the share of attempted episodes (invalid and lost
	// included) above which a round's or an evaluation's success rate is
	// flagged as unreliable, and a final score refused (0: the default,
	// DefaultMaxInvalidShare; 1: never flag).
	MaxInvalidShare float64 `yaml:"max_invalid_share" json:"max_invalid_share,omitempty"`
	// MaxStaleness is η of overlapped rounds (docs/design.md §4, "Overlapped
	// rounds"): with η ≥ 1, round k+1 collects on the newest weights while
	// round k trains, and no trainer gets a sample of weights more than η
	// versions older than its starting weights. 0, the default, is the
	// synchronous loop: validation, collection, training, one after another.
	MaxStaleness int32 `yaml:"max_staleness" json:"max_staleness,omitempty"`
}

// DefaultMaxInvalidShare is Collect.MaxInvalidShare when unset: past one
// episode in five invalid, what failed says more than what succeeded.
const DefaultMaxInvalidShare = 0.2

// InvalidLimit is MaxInvalidShare, or its default when unset.
func (c Collect) InvalidLimit() float64 {
	if c.MaxInvalidShare <= 0 {
		return DefaultMaxInvalidShare
	}
	return c.MaxInvalidShare
}

// Filters are the optional selection filters. Each is off when its main
// field is zero/false and, when on, applies from round *FromRound on (0 or 1:
// from the first round), so "post-success from round 6" is
// {post_success: true, post_success_from_round: 6}.
type Filters struct {
	// MaxTokens drops calls whose prompt + completion token count exceeds it (0: off).
	MaxTokens          int   `yaml:"max_tokens" json:"max_tokens"`
	MaxTokensFromRound int32 `yaml:"max_tokens_from_round" json:"max_tokens_from_round"`
	// PostSuccess drops calls made after the environment already reported
	// success (Episode.SuccessCall); episodes where that is unknown keep all calls.
	PostSuccess          bool  `yaml:"post_success" json:"post_success"`
	PostSuccessFromRound int32 `yaml:"post_success_from_round" json:"post_success_from_round"`
}

// Trainer is the command that performs one training update.
type Trainer struct {
	Command []string          `yaml:"command" json:"command"`
	Env     map[string]string `yaml:"env" json:"env"`
	Timeout Duration          `yaml:"timeout" json:"timeout"`
	// Hyper are named hyperparameters available to Command as {name}.
	Hyper map[string]string `yaml:"hyper" json:"hyper"`
}

// RuntimeVars are the placeholders filled when a command runs, not at load time.
var RuntimeVars = map[string]string{
	"weights":           "local path of the weights file the model server loads",
	"port":              "port allocated for the model server",
	"served_name":       "the model name the server answers to",
	"base_url":          "the proxy base URL of this episode (ends in /v1)",
	"task":              "task id of the episode (unique in the harness)",
	"task_number":       "the task's number within its suite (tasks: number:, default the id)",
	"suite":             "the task's suite",
	"seed":              "init state id of the episode",
	"output_dir":        "the episode's output directory",
	"batch":             "local path of the training batch (batch.npz)",
	"images":            "local folder holding the batch's images as <sha256>.<ext> files, each checked against its name",
	"weights_in":        "local path of the input weights file",
	"weights_out":       "local path where the trainer writes new weights",
	"metrics_out":       "local path where the trainer writes metrics.json",
	"rdzv_port":         "a free local port for torchrun's rendezvous",
	"rollout_processor": "local path of the model server's processor info (model_server.processor_probe), \"\" when no host reported one",
	"round":             "round number",
	"harness_dir":       "directory of the harness file",
}
