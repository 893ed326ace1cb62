// Package harness loads harness files, fills their {var} templates and
// checks them, so a bad file fails before anything starts.
package harness

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

var serviceName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

var placeholder = regexp.MustCompile(`\{([a-zA-Z_][a-zA-Z0-9_]*)\}`)

// Load reads the harness file at path, applies overrides (from --var k=v) to
// its vars and fills every {var}. Runtime placeholders are left in place.
func Load(path string, overrides map[string]string) (schemas.Harness, error) {
	var h schemas.Harness
	raw, digestInput, root, err := read(path, 0)
	if err != nil {
		return h, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&h); err != nil {
		// yaml.v3 lists several problems on separate lines; keep the error one line.
		msg := strings.Join(strings.Fields(strings.ReplaceAll(strings.ReplaceAll(err.Error(), ":\n", ": "), "\n", "; ")), " ")
		return h, fmt.Errorf("harness file %s is not valid: %s (fix the YAML at that line)", path, msg)
	}
	h.Base = ""
	if h.Tasks, err = expandTasks(h.Tasks); err != nil {
		return h, fmt.Errorf("harness file %s: %w", path, err)
	}
	abs, err := filepath.Abs(filepath.Dir(root))
	if err != nil {
		return h, fmt.Errorf("harness file %s: %w", path, err)
	}
	h.Dir = abs
	if h.Vars == nil {
		h.Vars = map[string]string{}
	}
	for k := range h.Vars {
		if _, ok := schemas.RuntimeVars[k]; ok {
			return h, fmt.Errorf("harness file %s: vars.%s: {%s} is a runtime value (%s); remove the var", path, k, k, schemas.RuntimeVars[k])
		}
	}
	for k, v := range overrides {
		if _, ok := h.Vars[k]; !ok {
			if instead, ok := Upstream[k]; ok {
				return h, fmt.Errorf("--var %s=%s: %s has no such var: %s", k, v, path, instead)
			}
			return h, fmt.Errorf("--var %s=%s: %s declares no var %q; known vars: %s", k, v, path, k, strings.Join(sortedKeys(h.Vars), ", "))
		}
		h.Vars[k] = v
	}
	vars := map[string]string{"harness_dir": h.Dir}
	for k, v := range h.Vars {
		vars[k] = v
	}
	if err := fillAll(&h, vars); err != nil {
		return h, fmt.Errorf("harness file %s: %w", path, err)
	}
	if err := Check(h); err != nil {
		return h, fmt.Errorf("harness file %s: %w", path, err)
	}
	sum := sha256.New()
	sum.Write(digestInput)
	for _, k := range sortedKeys(h.Vars) {
		fmt.Fprintf(sum, "\n%s=%s", k, h.Vars[k])
	}
	h.Digest = hex.EncodeToString(sum.Sum(nil))[:16]
	return h, nil
}

// maxBases bounds a chain of base: files (and breaks a cycle).
const maxBases = 4

// read returns the YAML to decode for the harness file at path, its base
// files merged in; the bytes its digest covers: the file alone when it has
// no base (so the digests of runs made before bases existed stay), else
// every file of the chain; and the path of the chain's first file, whose
// directory is {harness_dir}: the commands a variant inherits name files
// next to the base that wrote them.
func read(path string, depth int) ([]byte, []byte, string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, "", fmt.Errorf("harness file %s does not exist: pass --config harnesses/<name>/harness.yaml", path)
		}
		return nil, nil, "", fmt.Errorf("read harness file %s: %w", path, err)
	}
	var head struct {
		Base string `yaml:"base"`
	}
	if err := yaml.Unmarshal(raw, &head); err != nil || head.Base == "" {
		return raw, raw, path, nil // a YAML error is reported by the strict decode
	}
	if depth >= maxBases {
		return nil, nil, "", fmt.Errorf("harness file %s: base: chain longer than %d files (a file is its own base?)", path, maxBases)
	}
	basePath := head.Base
	if !filepath.IsAbs(basePath) {
		basePath = filepath.Join(filepath.Dir(path), basePath)
	}
	baseRaw, baseDigest, root, err := read(basePath, depth+1)
	if err != nil {
		return nil, nil, "", fmt.Errorf("harness file %s: base %s: %w", path, head.Base, err)
	}
	var base, over yaml.Node
	if err := yaml.Unmarshal(baseRaw, &base); err != nil {
		return nil, nil, "", fmt.Errorf("harness file %s: %w", basePath, err)
	}
	if err := yaml.Unmarshal(raw, &over); err != nil {
		return nil, nil, "", fmt.Errorf("harness file %s: %w", path, err)
	}
	merge(&base, &over)
	out, err := yaml.Marshal(&base)
	if err != nil {
		return nil, nil, "", fmt.Errorf("harness file %s: merge with base %s: %w", path, head.Base, err)
	}
	digest := append(append(append([]byte{}, baseDigest...), "\n---\n"...), raw...)
	return out, digest, root, nil
}

// merge lays over onto base: mappings merge key by key, anything else
// (lists, values) replaces, so a variant restates a list it changes whole
// (tasks, a command) and never half-merges it.
func merge(base, over *yaml.Node) {
	if base.Kind == yaml.DocumentNode && over.Kind == yaml.DocumentNode && len(base.Content) == 1 && len(over.Content) == 1 {
		merge(base.Content[0], over.Content[0])
		return
	}
	if base.Kind != yaml.MappingNode || over.Kind != yaml.MappingNode {
		*base = *over
		return
	}
	for i := 0; i+1 < len(over.Content); i += 2 {
		k, v := over.Content[i], over.Content[i+1]
		found := false
		for j := 0; j+1 < len(base.Content); j += 2 {
			if base.Content[j].Value == k.Value {
				merge(base.Content[j+1], v)
				found = true
				break
			}
		}
		if !found {
			base.Content = append(base.Content, k, v)
		}
	}
}

// expandTasks turns range entries ({suite, numbers, first_id}) into one
// task each and checks single entries do not use range fields.
func expandTasks(in []schemas.Task) ([]schemas.Task, error) {
	var out []schemas.Task
	for i, t := range in {
		at := fmt.Sprintf("tasks.%d", i)
		if t.Numbers == "" {
			if t.FirstID != nil {
				return nil, &FieldError{at + ".first_id", errors.New("belongs to a range entry: give numbers: too, e.g. {suite: S, numbers: \"0-9\", first_id: 10}")}
			}
			out = append(out, t)
			continue
		}
		switch {
		case t.FirstID == nil:
			return nil, &FieldError{at, errors.New("a range entry (numbers:) needs first_id:, the id of its first task, so ids stay the same when other entries change")}
		case t.Suite == "":
			return nil, &FieldError{at + ".suite", errors.New("is missing: a range entry's tasks are named after their suite")}
		case t.Name != "" || t.Number != nil || t.ID != 0:
			return nil, &FieldError{at, errors.New("a range entry takes suite, numbers and first_id only; write single tasks as {id, name, suite, number}")}
		}
		nums, err := ParseIDs(t.Numbers)
		if err != nil {
			return nil, &FieldError{at + ".numbers", err}
		}
		out = append(out, schemas.RangeTasks(t.Suite, *t.FirstID, nums)...)
	}
	return out, nil
}

// Upstream says, for the vars the single-host controller
// (AgenticRoboRL's local_ctl.py) took and a harness does not declare, what
// Roundhouse does instead.
var Upstream = map[string]string{
	"model_port": "Roundhouse gives each host's model server a free port itself, so workers on one machine never collide; drop it",
	"proxy_port": "each rollout worker's recording proxy takes a free port itself (the worker's --proxy-listen sets one); drop it",
	"vla_port":   "harness services get a free port per host; to use a VLA that already runs, pass --var vla_endpoint=http://HOST:PORT (rpent_libero)",
	"sam3_port":  "harness services get a free port per host; to use a SAM3 that already runs, pass --var sam3_endpoint=http://HOST:PORT (rpent_libero)",
	"env_port":   "rpent spawns each episode's LIBERO env server on a free port of its own; drop it",
	"gpu":        "this harness declares no GPU (the minimal harness runs on the CPU); rpent_libero takes --var gpu=N",
}

// ParseVars turns ["k=v", ...] into a map, rejecting malformed entries.
func ParseVars(kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--var %q: write it as name=value, e.g. --var max_turns=12", kv)
		}
		out[k] = v
	}
	return out, nil
}

// Fill replaces {name} in s with vars[name]; unknown names stay as they are.
func Fill(s string, vars map[string]string) string {
	return placeholder.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := vars[m[1:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// FillArgs fills every argument and fails on a placeholder left unfilled,
// so a command never runs with a literal {name} in it.
func FillArgs(args []string, vars map[string]string) ([]string, error) {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = Fill(a, vars)
		if m := placeholder.FindStringSubmatch(out[i]); m != nil {
			return nil, fmt.Errorf("argument %q: no value for {%s}", a, m[1])
		}
	}
	return out, nil
}

// fillAll fills load-time vars in every command, env value and hyperparameter.
func fillAll(h *schemas.Harness, vars map[string]string) error {
	for k, v := range h.Trainer.Hyper {
		h.Trainer.Hyper[k] = Fill(v, vars)
	}
	all := map[string]string{}
	for k, v := range vars {
		all[k] = v
	}
	// Services publish {<name>_port} and {<name>_url} to later commands.
	runtime := map[string]bool{}
	for k := range schemas.RuntimeVars {
		runtime[k] = true
	}
	for _, s := range h.Services {
		runtime[s.Name+"_port"], runtime[s.Name+"_url"] = true, true
	}
	for k, v := range h.Trainer.Hyper {
		all[k] = v
	}
	fill := func(where string, ss []string) error {
		for i, s := range ss {
			ss[i] = Fill(s, all)
			for _, m := range placeholder.FindAllStringSubmatch(ss[i], -1) {
				if !runtime[m[1]] {
					return &FieldError{where, fmt.Errorf("uses {%s}, which is neither a var of the file nor a runtime value; declare it under vars:", m[1])}
				}
			}
		}
		return nil
	}
	fillEnv := func(where string, env map[string]string) error {
		for k, v := range env {
			s := []string{v}
			if err := fill(where+"."+k, s); err != nil {
				return err
			}
			env[k] = s[0]
		}
		return nil
	}
	for i := range h.Services {
		sv := &h.Services[i]
		where := fmt.Sprintf("services.%d", i)
		ext := []string{sv.External}
		for _, err := range []error{fill(where+".command", sv.Command), fillEnv(where+".env", sv.Env), fill(where+".external", ext)} {
			if err != nil {
				return err
			}
		}
		sv.External = ext[0]
	}
	for _, err := range []error{
		fill("model_server.command", h.Model.Command),
		fillEnv("model_server.env", h.Model.Env),
		fill("episode.command", h.Episode.Command),
		fillEnv("episode.env", h.Episode.Env),
		fill("trainer.command", h.Trainer.Command),
		fillEnv("trainer.env", h.Trainer.Env),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// Check validates a loaded harness: commands present, splits disjoint, tasks unique.
func Check(h schemas.Harness) error {
	switch {
	case h.Name == "":
		return &FieldError{"name", errors.New("is missing")}
	case len(h.Model.Command) == 0:
		return &FieldError{"model_server.command", errors.New("is missing: give the model server's argument list")}
	case len(h.Episode.Command) == 0:
		return &FieldError{"episode.command", errors.New("is missing: give the episode's argument list")}
	case len(h.Trainer.Command) == 0:
		return &FieldError{"trainer.command", errors.New("is missing: give the trainer's argument list")}
	case len(h.Tasks) == 0:
		return &FieldError{"tasks", errors.New("is empty: list at least one task")}
	case h.Collect.Attempts < 2:
		return &FieldError{"collect.attempts", fmt.Errorf("is %d: leave-one-out advantages need at least 2", h.Collect.Attempts)}
	case h.Collect.Groups < 1:
		return &FieldError{"collect.groups", fmt.Errorf("is %d: need at least 1", h.Collect.Groups)}
	}
	if err := checkMemory(h); err != nil {
		return err
	}
	if err := CheckOverlap(h, h.Collect.MaxStaleness, "collect.max_staleness"); err != nil {
		return err
	}
	if err := checkSampling(h.Model); err != nil {
		return err
	}
	for i, st := range h.Model.Reload {
		if !strings.HasPrefix(st.Post, "/") {
			return &FieldError{fmt.Sprintf("model_server.reload.%d.post", i), fmt.Errorf("%q: give the path to POST, e.g. /collective_rpc", st.Post)}
		}
	}
	names := map[string]bool{"model": true}
	for i, s := range h.Services {
		at := fmt.Sprintf("services.%d", i)
		switch {
		case !serviceName.MatchString(s.Name):
			return &FieldError{at + ".name", fmt.Errorf("%q must be a lowercase word like vla or sam3", s.Name)}
		case names[s.Name]:
			return &FieldError{at + ".name", fmt.Errorf("%q is used twice (\"model\" is the model server's)", s.Name)}
		case len(s.Command) == 0 && s.External == "":
			return &FieldError{at, fmt.Errorf("service %s needs a command, or an external URL of a running service", s.Name)}
		}
		names[s.Name] = true
	}
	switch h.Collect.Selection {
	case "", "random", "first", "last", "spread":
	default:
		return &FieldError{"collect.selection", fmt.Errorf("%q: use random, first, last or spread", h.Collect.Selection)}
	}
	switch h.Episode.Outcome.Adapter {
	case "minimal", "rpent_libero":
	case "json":
		if h.Episode.Outcome.File == "" || h.Episode.Outcome.Success == "" {
			return &FieldError{"episode.outcome", errors.New("the json adapter needs file: and success: (a dotted path to a boolean)")}
		}
	default:
		return &FieldError{"episode.outcome.adapter", fmt.Errorf("%q: use minimal, rpent_libero or json", h.Episode.Outcome.Adapter)}
	}
	seen := map[int32]bool{}
	for i, t := range h.Tasks {
		if seen[t.ID] {
			return &FieldError{fmt.Sprintf("tasks.%d.id", i), fmt.Errorf("id %d appears twice", t.ID)}
		}
		seen[t.ID] = true
	}
	splits := map[string]string{"train_init_ids": h.Splits.Train, "val_init_ids": h.Splits.Val, "eval_init_ids": h.Splits.Eval}
	owner := map[int32]string{}
	for _, key := range []string{"train_init_ids", "val_init_ids", "eval_init_ids"} {
		ids, err := ParseIDs(splits[key])
		if err != nil {
			return &FieldError{"splits." + key, err}
		}
		if len(ids) == 0 {
			return &FieldError{"splits." + key, errors.New("is empty: give ids like \"11-44\"")}
		}
		for _, id := range ids {
			if other, ok := owner[id]; ok {
				return &FieldError{"splits." + key, fmt.Errorf("init id %d is in both %s and %s; the splits must not overlap", id, other, key)}
			}
			owner[id] = key
		}
	}
	return checkProtocol(h)
}

// CheckOverlap checks that the harness can overlap its rounds with bound
// eta (set by what): collection runs while the trainer trains, so a model
// server or service that must stop to free the host for training
// (stop_before_training) cannot serve then.
func CheckOverlap(h schemas.Harness, eta int32, what string) error {
	if eta < 0 {
		return &FieldError{what, fmt.Errorf("is %d: give 0 (rounds one after another) or the most weights versions a sample may lag, e.g. 1", eta)}
	}
	if eta == 0 {
		return nil
	}
	for _, s := range append([]schemas.Service{h.Model.Service}, h.Services...) {
		if s.StopBeforeTraining {
			name := "model_server"
			if s.Name != "" && s.Name != "model" {
				name = "service " + s.Name
			}
			return &FieldError{what, fmt.Errorf("is %d, but %s has stop_before_training: the trainer shares its host's GPU, and overlapped rounds collect while it trains; "+
				"train on hosts of their own and drop stop_before_training, or set max_staleness 0", eta, name)}
		}
	}
	return nil
}

// checkProtocol checks the protocol's suites exist and, when it gives a
// count, that the tasks make it up: a task list that lost a suite or a
// task fails here, not as a final score over fewer cells.
func checkProtocol(h schemas.Harness) error {
	p := h.Protocol
	for i, s := range p.Suites {
		if !slices.ContainsFunc(h.Tasks, func(t schemas.Task) bool { return t.Suite == s }) {
			return &FieldError{fmt.Sprintf("protocol.suites.%d", i), fmt.Errorf("suite %q has no task: list its tasks under tasks:, or remove it from the protocol", s)}
		}
	}
	if p.Episodes == 0 {
		return nil
	}
	ids, _ := ParseIDs(h.Splits.Eval) // checked above
	required := h.RequiredTasks()
	if got := len(required) * len(ids); got != p.Episodes {
		name := cmp.Or(p.Name, "the protocol")
		return &FieldError{"protocol.episodes", fmt.Errorf("%s has %d episodes, but its %d required tasks (%s) × %d eval_init_ids make %d: a suite or task is missing from tasks:, or episodes is wrong",
			name, p.Episodes, len(required), suiteCounts(h, p), len(ids), got)}
	}
	return nil
}

// suiteCounts says how many tasks each required suite has: "a:10 b:9".
func suiteCounts(h schemas.Harness, p schemas.Protocol) string {
	var order []string
	n := map[string]int{}
	for _, t := range h.Tasks {
		if !p.Required(t.Suite) {
			continue
		}
		if n[t.Suite] == 0 {
			order = append(order, t.Suite)
		}
		n[t.Suite]++
	}
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%s:%d", cmp.Or(s, "(no suite)"), n[s])
	}
	return strings.Join(parts, " ")
}

// ParseIDs parses "11-44" or "1,3,5-7" into sorted unique ids.
func ParseIDs(s string) ([]int32, error) {
	set := map[int32]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil {
			return nil, fmt.Errorf("%q is not an id or a range like 11-44", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil || b < a {
				return nil, fmt.Errorf("%q is not a range like 11-44", part)
			}
		}
		for i := a; i <= b; i++ {
			set[int32(i)] = true
		}
	}
	out := make([]int32, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// IDs returns the init ids of a split key (train_init_ids, val_init_ids, eval_init_ids).
func IDs(h schemas.Harness, key string) ([]int32, error) {
	switch key {
	case "train_init_ids":
		return ParseIDs(h.Splits.Train)
	case "val_init_ids":
		return ParseIDs(h.Splits.Val)
	case "eval_init_ids":
		return ParseIDs(h.Splits.Eval)
	}
	return nil, fmt.Errorf("init key %q: use train_init_ids, val_init_ids or eval_init_ids", key)
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkMemory refuses a harness whose model servers per host do not fit
// in a host's accelerator memory beside its services.
func checkMemory(h schemas.Harness) error {
	m := h.Model
	switch {
	case m.PerHost < 0:
		return &FieldError{"model_server.per_host", fmt.Errorf("is %d: give how many model servers one host keeps loaded, 1 or more", m.PerHost)}
	case m.MemoryShare < 0 || m.MemoryShare > 1:
		return &FieldError{"model_server.memory_share", fmt.Errorf("is %g: give a fraction of the host's accelerator memory, above 0 and at most 1", m.MemoryShare)}
	case m.PerHost > 1 && m.MemoryShare == 0:
		return &FieldError{"model_server.per_host", fmt.Errorf("is %d: say how much of a host's accelerator memory one model server takes (model_server.memory_share, e.g. 0.4) so that %d of them are known to fit beside the services", m.PerHost, m.PerHost)}
	}
	total := float64(max(m.PerHost, 1)) * m.MemoryShare
	var parts []string
	for i, s := range h.Services {
		if s.MemoryShare < 0 || s.MemoryShare > 1 {
			return &FieldError{fmt.Sprintf("services.%d.memory_share", i), fmt.Errorf("is %g: give a fraction of the host's accelerator memory, above 0 and at most 1", s.MemoryShare)}
		}
		if s.External == "" && s.MemoryShare > 0 {
			total += s.MemoryShare
			parts = append(parts, fmt.Sprintf("%s %g", s.Name, s.MemoryShare))
		}
	}
	if total > 1+1e-9 {
		room := 1.0
		for _, s := range h.Services {
			if s.External == "" {
				room -= s.MemoryShare
			}
		}
		fit := 0
		if m.MemoryShare > 0 {
			fit = int(room/m.MemoryShare + 1e-9)
		}
		return &FieldError{"model_server.per_host", fmt.Errorf("%d model servers × memory_share %g + services (%s) = %.2f of a host's memory, more than it has: %d fit; lower per_host or the shares",
			max(m.PerHost, 1), m.MemoryShare, strings.Join(parts, ", "), total, fit)}
	}
	return nil
}

// checkSampling checks model_server.sampling against the server command:
// the logprobs mode and the source of defaults the harness declares are
// what the proxy judges every call by (docs/design.md §3, "Sampling
// settings"), so a command that starts the server otherwise would train on
// a distribution the tokens were not drawn from. A flag the command does
// not give takes vLLM's default.
func checkSampling(m schemas.ModelServer) error {
	for _, c := range []struct {
		field, flag, value, dflt string
		allowed                  []string
	}{
		{"model_server.sampling.logprobs_mode", "--logprobs-mode", m.Sampling.LogprobsMode, schemas.LogprobsRaw,
			[]string{schemas.LogprobsRaw, schemas.LogprobsProcessed}},
		{"model_server.sampling.generation_config", "--generation-config", m.Sampling.GenerationConfig, schemas.GenerationConfigAuto,
			[]string{schemas.GenerationConfigAuto, schemas.GenerationConfigVLLM}},
	} {
		declared := cmp.Or(c.value, c.dflt)
		if !slices.Contains(c.allowed, declared) {
			if strings.HasSuffix(declared, "_logits") {
				return &FieldError{c.field, fmt.Errorf("%q: logits are not logprobs, and no call could train on them; use %s", declared, strings.Join(c.allowed, " or "))}
			}
			return &FieldError{c.field, fmt.Errorf("%q: use %s", declared, strings.Join(c.allowed, " or "))}
		}
		given, ok := flagValue(m.Command, c.flag)
		switch {
		case ok && given != declared:
			return &FieldError{c.field, fmt.Errorf("is %s but model_server.command starts the server with %s %s: make them agree", declared, c.flag, given)}
		case !ok && declared != c.dflt:
			return &FieldError{c.field, fmt.Errorf("is %s but model_server.command does not pass %s, so the server uses its default %s: add %q, %q to the command", declared, c.flag, c.dflt, c.flag, declared)}
		}
	}
	return nil
}

// flagValue is the value of flag in args, as "--flag value" or "--flag=value".
func flagValue(args []string, flag string) (string, bool) {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}
