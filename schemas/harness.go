package schemas

// Harness is a harness file (harnesses/<name>/harness.yaml) after loading.
// Strings may hold {name} placeholders: vars are filled when the file is
// loaded (defaults from Vars, overridden by --var k=v); runtime placeholders
// (RuntimeVars) are filled by the activity that runs the command.
type Harness struct {
	Name string `yaml:"name" json:"name"`
	// Dir is the absolute directory of the harness file (set by the loader).
	Dir     string            `yaml:"-" json:"dir"`
	Vars    map[string]string `yaml:"vars" json:"vars"`
	Model   ModelServer       `yaml:"model_server" json:"model_server"`
	Episode EpisodeSpec       `yaml:"episode" json:"episode"`
	Tasks   []Task            `yaml:"tasks" json:"tasks"`
	Splits  Splits            `yaml:"splits" json:"splits"`
	Collect Collect           `yaml:"collect" json:"collect"`
	Trainer Trainer           `yaml:"trainer" json:"trainer"`
	// Digest is the sha256 of the harness file bytes plus the vars (set by the loader).
	Digest string `yaml:"-" json:"digest"`
}

// ModelServer is the OpenAI-compatible server the planner calls through the proxy.
// It is restarted whenever the weights change.
type ModelServer struct {
	Command      []string          `yaml:"command" json:"command"`
	Env          map[string]string `yaml:"env" json:"env"`
	ReadyPath    string            `yaml:"ready_path" json:"ready_path"` // HTTP GET path answering 200 when ready
	StartTimeout Duration          `yaml:"start_timeout" json:"start_timeout"`
	ServedName   string            `yaml:"served_name" json:"served_name"`
	// WeightsFile is the file (relative to a weights directory) the command reads.
	WeightsFile string `yaml:"weights_file" json:"weights_file"`
}

// EpisodeSpec is the command that runs one episode as a subprocess.
type EpisodeSpec struct {
	Command []string          `yaml:"command" json:"command"`
	Env     map[string]string `yaml:"env" json:"env"`
	Timeout Duration          `yaml:"timeout" json:"timeout"`
	// Outcome names the adapter that turns the output dir into an outcome.
	Outcome OutcomeSpec `yaml:"outcome" json:"outcome"`
}

// OutcomeSpec selects and configures an outcome adapter.
type OutcomeSpec struct {
	Adapter string `yaml:"adapter" json:"adapter"`
	File    string `yaml:"file" json:"file"`
}

// Task is one task of the harness; Suite groups tasks in reports.
type Task struct {
	ID    int32  `yaml:"id" json:"id"`
	Name  string `yaml:"name" json:"name"`
	Suite string `yaml:"suite" json:"suite"`
}

// Splits are the init-state id ranges, written like "11-44" or "1,3,5-7".
type Splits struct {
	Train string `yaml:"train_init_ids" json:"train_init_ids"`
	Val   string `yaml:"val_init_ids" json:"val_init_ids"`
	Eval  string `yaml:"eval_init_ids" json:"eval_init_ids"`
}

// Collect holds collection and selection defaults (DESIGN.md §4).
type Collect struct {
	Groups             int `yaml:"groups" json:"groups"`
	Attempts           int `yaml:"attempts" json:"attempts"`
	MaxCallsPerEpisode int `yaml:"max_calls_per_episode" json:"max_calls_per_episode"`
	// InfraRetries is how many more times an episode that failed for
	// infrastructure reasons is tried before it is recorded as invalid.
	InfraRetries int   `yaml:"infra_retries" json:"infra_retries"`
	Seed         int64 `yaml:"seed" json:"seed"`
	// PoolBand: tasks whose validation success rate lies strictly inside
	// (low, high) form the collection pool.
	PoolBand [2]float64 `yaml:"pool_band" json:"pool_band"`
	// ValidateEveryRound validates before every round, not only the first.
	ValidateEveryRound bool `yaml:"validate_every_round" json:"validate_every_round"`
	// FinalValidation validates the last round's weights after training.
	FinalValidation bool `yaml:"final_validation" json:"final_validation"`
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
	"weights":     "local path of the weights file the model server loads",
	"port":        "port allocated for the model server",
	"served_name": "the model name the server answers to",
	"base_url":    "the proxy base URL of this episode (ends in /v1)",
	"task":        "task id of the episode",
	"seed":        "init state id of the episode",
	"output_dir":  "the episode's output directory",
	"batch":       "local path of the training batch (batch.npz)",
	"weights_in":  "local path of the input weights file",
	"weights_out": "local path where the trainer writes new weights",
	"metrics_out": "local path where the trainer writes metrics.json",
	"rdzv_port":   "a free local port for torchrun's rendezvous",
	"round":       "round number",
	"harness_dir": "directory of the harness file",
}
