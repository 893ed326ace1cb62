// Package deploy_test checks deploy/ offline — no Docker engine, no cluster:
// every YAML file parses; the Compose file and the Kubernetes manifests run
// the worker and the starter with flags the real binaries define, probe the
// paths and port the worker's health server serves, and reference only
// ConfigMap and Secret keys, images, Dockerfile stages and files that exist;
// the images run as a non-root user; the collector configuration is
// consistent and identical in Compose and Kubernetes.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/roundhouse-rl/roundhouse/internal/testkit/cluster"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/devstack"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	itest.Cleanup()
	os.Exit(code)
}

// The worker's health server (workers/health.go) serves these.
const (
	livePath  = "/livez"
	readyPath = "/readyz"
)

var roles = []string{"control", "rollout", "train"}

// ---- YAML helpers

// docs decodes every document of a YAML file, skipping empty ones.
func docs(t *testing.T, path string) []any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for i := 0; ; i++ {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: document %d does not parse: %v", path, i+1, err)
		}
		if v != nil {
			out = append(out, v)
		}
	}
}

// get walks maps by key; a missing key or a non-map gives nil.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any, keys ...string) string {
	s, _ := get(v, keys...).(string)
	return s
}

func list(v any, keys ...string) []any {
	l, _ := get(v, keys...).([]any)
	return l
}

func strs(v any, keys ...string) []string {
	var out []string
	for _, x := range list(v, keys...) {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// ---- the binaries' flags

// flagSet maps each flag name to whether it is a boolean (takes no value).
type flagSet map[string]bool

var (
	goFlagLine    = regexp.MustCompile(`^  -([\w-]+)(?: (\S+))?$`)
	cobraFlagLine = regexp.MustCompile(`^\s+(?:-\w, )?--([\w-]+)(?: (\w+))?\s{2,}`)
)

// helpText runs a built binary with args and returns what it printed; -h
// exits 2 for a Go flag set, so the exit status is not checked.
func helpText(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %v: %v", bin, args, ctx.Err())
	}
	return string(out)
}

func parseFlags(t *testing.T, help string, re *regexp.Regexp) flagSet {
	t.Helper()
	fs := flagSet{}
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			fs[m[1]] = m[2] == ""
		}
	}
	if len(fs) == 0 {
		t.Fatalf("no flags found in the help text:\n%s", help)
	}
	return fs
}

var binDir string

func binaries(t *testing.T) string {
	t.Helper()
	if binDir == "" {
		binDir = itest.Build(t, "./workers/worker", "./starter")
	}
	return binDir
}

// workerFlags are the flags of the real worker binary (workers/worker).
func workerFlags(t *testing.T) flagSet {
	t.Helper()
	fs := parseFlags(t, helpText(t, filepath.Join(binaries(t), "worker"), "-h"), goFlagLine)
	for _, want := range []string{"roles", "slots", "health-listen"} {
		if _, ok := fs[want]; !ok {
			t.Fatalf("worker -h lists no -%s: the help parser is broken (%v)", want, sortedKeys(fs))
		}
	}
	return fs
}

// starterFlags are the flags of `starter <sub>`, global ones included.
func starterFlags(t *testing.T, sub string) flagSet {
	t.Helper()
	return parseFlags(t, helpText(t, filepath.Join(binaries(t), "starter"), sub, "--help"), cobraFlagLine)
}

// parseArgs checks a command line against a binary's flags and returns the
// flags given (last value wins). A Go flag set stops at the first
// non-flag argument and ignores the rest, so a positional argument is an
// error too.
func parseArgs(args []string, fs flagSet) (map[string]string, []error) {
	got := map[string]string{}
	var errs []error
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			errs = append(errs, fmt.Errorf("argument %q is not a flag: the binary would ignore it and all after it", a))
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		isBool, ok := fs[name]
		if !ok {
			errs = append(errs, fmt.Errorf("unknown flag %q (the binary defines %s)", a, strings.Join(sortedKeys(fs), ", ")))
			continue
		}
		if !hasVal && !isBool {
			if i+1 == len(args) {
				errs = append(errs, fmt.Errorf("flag %q has no value", a))
				continue
			}
			i++
			val = args[i]
		}
		got[name] = val
	}
	return got, errs
}

// checkRoles checks --roles and returns the roles.
func checkRoles(t *testing.T, where, v string) []string {
	t.Helper()
	var out []string
	for _, r := range strings.Split(v, ",") {
		r = strings.TrimSpace(r)
		if !slices.Contains(roles, r) {
			t.Errorf("%s: --roles %q: unknown role %q (use %v)", where, v, r, roles)
		}
		out = append(out, r)
	}
	return out
}

// TestParseArgs: the checker itself fails on what it must catch.
func TestParseArgs(t *testing.T) {
	fs := flagSet{"roles": false, "slots": false, "verbose": true}
	if got, errs := parseArgs([]string{"--roles", "rollout", "--slots=4", "-verbose"}, fs); len(errs) > 0 || got["roles"] != "rollout" || got["slots"] != "4" {
		t.Fatalf("valid command line: %v %v", got, errs)
	}
	for _, bad := range [][]string{
		{"--slot=4"},             // a typo
		{"--roles"},              // no value
		{"rollout", "--slots=4"}, // positional: the worker would ignore the rest
	} {
		if _, errs := parseArgs(bad, fs); len(errs) == 0 {
			t.Errorf("%v: accepted, want an error", bad)
		}
	}
}

// TestHealthPaths ties the probe paths checked here to the server's routes.
func TestHealthPaths(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "workers", "health.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{livePath, readyPath} {
		if !bytes.Contains(src, []byte(`"GET `+p+`"`)) {
			t.Errorf("workers/health.go serves no GET %s, which deploy/ probes", p)
		}
	}
}

// TestYAMLParses: every YAML file under deploy/ parses, all its documents.
func TestYAMLParses(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := filepath.Ext(path); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			if len(docs(t, path)) == 0 {
				t.Errorf("%s: no YAML document", path)
			}
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 8 {
		t.Fatalf("found %d YAML files under deploy/, expected the compose, otel and k8s files", n)
	}
}

// ---- Dockerfile

type stage struct {
	name, from string
	user       string // last USER in the stage ("" = inherited)
	copyFrom   []string
	lines      []string // instructions, continuations joined
}

func parseDockerfile(t *testing.T, path string) []*stage {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages []*stage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		f := strings.Fields(line)
		switch strings.ToUpper(f[0]) {
		case "FROM":
			s := &stage{from: f[1]}
			if len(f) >= 4 && strings.EqualFold(f[2], "AS") {
				s.name = f[3]
			}
			stages = append(stages, s)
		case "USER":
			if len(stages) > 0 {
				stages[len(stages)-1].user = f[1]
			}
		case "COPY":
			for _, a := range f[1:] {
				if v, ok := strings.CutPrefix(a, "--from="); ok && len(stages) > 0 {
					stages[len(stages)-1].copyFrom = append(stages[len(stages)-1].copyFrom, v)
				}
			}
		}
		if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
		} else if up := strings.ToUpper(f[0]); up != "ARG" {
			t.Errorf("%s: %s before the first FROM", path, f[0])
		}
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if c, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), `\`); ok {
			cur.WriteString(c + " ")
			continue
		}
		cur.WriteString(l)
		flush()
	}
	flush()
	return stages
}

// effectiveUser follows a stage's FROM chain within the Dockerfile.
func effectiveUser(stages []*stage, name string) string {
	for seen := 0; seen < len(stages); seen++ {
		i := slices.IndexFunc(stages, func(s *stage) bool { return s.name == name })
		if i < 0 {
			return ""
		}
		if stages[i].user != "" {
			return stages[i].user
		}
		name = stages[i].from
	}
	return ""
}

func isRoot(user string) bool {
	u, _, _ := strings.Cut(user, ":")
	return u == "" || u == "root" || u == "0"
}

var secretName = regexp.MustCompile(`(?i)(SECRET|PASSWORD|PASSWD|TOKEN|API_KEY|ACCESS_KEY|PRIVATE_KEY)`)

func TestDockerfile(t *testing.T) {
	path := filepath.Join("docker", "Dockerfile")
	stages := parseDockerfile(t, path)
	names := map[string]bool{}
	for _, s := range stages {
		for _, from := range s.copyFrom {
			if !names[from] {
				t.Errorf("%s: stage %q copies --from=%s, not an earlier stage", path, s.name, from)
			}
		}
		if s.name != "" {
			names[s.name] = true
		}
		for _, l := range s.lines {
			f := strings.Fields(l)
			switch strings.ToUpper(f[0]) {
			case "ENV", "ARG":
				// No credentials in image layers: they come from the
				// environment at run time.
				for _, kv := range f[1:] {
					if k, _, _ := strings.Cut(kv, "="); secretName.MatchString(k) {
						t.Errorf("%s: %s %s bakes a credential into the image", path, f[0], k)
					}
				}
			case "COPY":
				// Build-context sources must exist (paths after the flags, but the destination).
				var src []string
				for _, a := range f[1:] {
					if !strings.HasPrefix(a, "--") {
						src = append(src, a)
					}
				}
				for _, a := range src[:max(len(src)-1, 0)] {
					if !slices.ContainsFunc(f, func(s string) bool { return strings.HasPrefix(s, "--from=") }) {
						if _, err := os.Stat(filepath.Join("..", a)); err != nil {
							t.Errorf("%s: COPY %s: %v", path, a, err)
						}
					}
				}
			case "RUN":
				// The packages it builds exist.
				if strings.Contains(l, "go build") {
					for _, a := range f {
						if strings.HasPrefix(a, "./") {
							dir := strings.TrimSuffix(strings.TrimSuffix(a, "..."), "/")
							if st, err := os.Stat(filepath.Join("..", dir)); err != nil || !st.IsDir() {
								t.Errorf("%s: go build %s: no such package directory", path, a)
							}
						}
					}
				}
			}
		}
	}
	for _, target := range []string{"worker", "starter"} {
		if !names[target] {
			t.Errorf("%s: no stage %q", path, target)
			continue
		}
		if u := effectiveUser(stages, target); isRoot(u) {
			t.Errorf("%s: target %q runs as %q, want a non-root USER", path, target, u)
		}
	}
	// The final stage too: a plain `docker build` builds it.
	if last := stages[len(stages)-1]; isRoot(effectiveUser(stages, last.name)) {
		t.Errorf("%s: the final stage %q runs as root", path, last.name)
	}
	ignore, err := os.ReadFile(filepath.Join("docker", "Dockerfile.dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".git", ".dev"} {
		if !slices.Contains(strings.Fields(string(ignore)), want) {
			t.Errorf("Dockerfile.dockerignore does not exclude %s", want)
		}
	}
}

// ---- Compose

// composeEnv returns a service's environment as a map (map or list form).
func composeEnv(svc any) map[string]string {
	env := map[string]string{}
	switch e := get(svc, "environment").(type) {
	case map[string]any:
		for k, v := range e {
			env[k] = fmt.Sprint(v)
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(fmt.Sprint(kv), "=")
			env[k] = v
		}
	}
	return env
}

var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[-?+][^}]*)?\}`)

// hostPort takes the host and port of "host:port" or a URL.
func hostPort(s string) (string, string) {
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		return u.Hostname(), u.Port()
	}
	h, p, _ := net.SplitHostPort(s)
	return h, p
}

func TestCompose(t *testing.T) {
	dir := "compose"
	path := filepath.Join(dir, "compose.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ds := docs(t, path)
	services, _ := get(ds[0], "services").(map[string]any)
	if len(services) == 0 {
		t.Fatalf("%s: no services", path)
	}

	// Every variable is documented in .env.example and has a default, so
	// the stack comes up without a .env.
	example := map[string]bool{}
	exRaw, err := os.ReadFile(filepath.Join(dir, ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(exRaw), "\n") {
		if k, _, ok := strings.Cut(strings.TrimSpace(l), "="); ok && !strings.HasPrefix(k, "#") {
			example[k] = true
		}
	}
	for _, m := range composeVar.FindAllStringSubmatch(string(raw), -1) {
		if !example[m[1]] {
			t.Errorf("%s: ${%s} is not in .env.example", path, m[1])
		}
		if !strings.HasPrefix(m[2], ":-") {
			t.Errorf("%s: ${%s} has no default (write ${%s:-value})", path, m[1], m[1])
		}
	}
	for k := range example {
		if !strings.Contains(string(raw), "${"+k) {
			t.Errorf(".env.example: %s is not used by %s", k, path)
		}
	}

	stages := parseDockerfile(t, filepath.Join("docker", "Dockerfile"))
	wflags := workerFlags(t)
	covered := map[string]bool{}
	for _, name := range sortedKeys(services) {
		svc := services[name]
		where := path + ": service " + name
		build := get(svc, "build")
		image := str(svc, "image")
		switch {
		case build != nil:
			ctxDir := filepath.Join(dir, str(build, "context"))
			df := filepath.Join(ctxDir, str(build, "dockerfile"))
			if _, err := os.Stat(df); err != nil {
				t.Errorf("%s: build.dockerfile: %v", where, err)
			} else if target := str(build, "target"); target == "" {
				t.Errorf("%s: build has no target (the Dockerfile has several)", where)
			} else if !slices.ContainsFunc(stages, func(s *stage) bool { return s.name == target }) {
				t.Errorf("%s: build.target %q is no stage of %s", where, target, df)
			}
			if abs, _ := filepath.Abs(df); abs != mustAbs(t, filepath.Join("docker", "Dockerfile")) {
				t.Errorf("%s: builds %s, expected deploy/docker/Dockerfile", where, df)
			}
		case image == "":
			t.Errorf("%s: neither image nor build", where)
		default:
			// Third-party images are pinned to a version.
			i := strings.LastIndex(image, ":")
			if i < strings.LastIndex(image, "/") || i < 0 || image[i+1:] == "latest" {
				t.Errorf("%s: image %q is not pinned to a tag", where, image)
			}
		}
		for _, v := range strs(svc, "volumes") {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join(dir, src)); err != nil {
					t.Errorf("%s: bind mount %s: %v", where, src, err)
				}
			}
		}
		if deps, ok := get(svc, "depends_on").(map[string]any); ok {
			for dep, spec := range deps {
				target, ok := services[dep]
				if !ok {
					t.Errorf("%s: depends on unknown service %s", where, dep)
					continue
				}
				if str(spec, "condition") == "service_healthy" && get(target, "healthcheck") == nil {
					t.Errorf("%s: waits for %s to be healthy, which has no healthcheck", where, dep)
				}
				if len(strs(target, "profiles")) > 0 && len(strs(svc, "profiles")) == 0 {
					t.Errorf("%s: depends on %s, which only runs in profile %v", where, dep, strs(target, "profiles"))
				}
			}
		}
		if str(build, "target") != "worker" {
			continue
		}

		// A worker: real flags, a health endpoint its healthcheck reads,
		// endpoints that are services of this file.
		got, errs := parseArgs(strs(svc, "command"), wflags)
		for _, err := range errs {
			t.Errorf("%s: command: %v", where, err)
		}
		for _, r := range checkRoles(t, where, got["roles"]) {
			covered[r] = true
		}
		if _, ok := got["roles"]; !ok {
			t.Errorf("%s: no --roles (the default runs every role)", where)
		}
		_, port := hostPort(got["health-listen"])
		if port == "" {
			t.Errorf("%s: no --health-listen host:port, so /readyz is not served", where)
		}
		test := strings.Join(strs(svc, "healthcheck", "test"), " ")
		if want := ":" + port + readyPath; port != "" && !strings.Contains(test, want) {
			t.Errorf("%s: healthcheck %q does not read %s", where, test, want)
		}
		env := composeEnv(svc)
		for _, k := range []string{"TEMPORAL_ADDRESS", "ROUNDHOUSE_S3_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
			h, p := hostPort(env[k])
			if _, ok := services[h]; !ok || p == "" {
				t.Errorf("%s: %s=%q is not host:port of a service of this file", where, k, env[k])
			}
		}
		for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
			if v := env[k]; !strings.HasPrefix(v, "${") {
				t.Errorf("%s: %s is written in the file, want it from the environment (.env)", where, k)
			}
		}
	}
	for _, r := range roles {
		if !covered[r] {
			t.Errorf("%s: no worker serves the %s role", path, r)
		}
	}
	if col := services["otel-collector"]; col == nil || !slices.ContainsFunc(strs(col, "volumes"), func(v string) bool { return strings.HasPrefix(v, "../otel/collector.yaml:") }) {
		t.Errorf("%s: the otel-collector service does not mount deploy/otel/collector.yaml", path)
	}
}

// TestComposeMatchesRehearsal keeps deploy/compose's Temporal and the
// production-shaped rehearsal cluster (internal/testkit/cluster) one
// Temporal: the same server and UI releases and the same dynamic config file.
func TestComposeMatchesRehearsal(t *testing.T) {
	path := filepath.Join("compose", "compose.yaml")
	services, _ := get(docs(t, path)[0], "services").(map[string]any)
	want := strings.TrimPrefix(devstack.ServerTool.Version, "v")
	seen := 0
	for name, svc := range services {
		image := str(svc, "image")
		if tag, ok := strings.CutPrefix(image, "temporalio/ui:"); ok {
			seen++
			if ui := strings.TrimPrefix(devstack.UIServerTool.Version, "v"); tag != ui {
				t.Errorf("%s: service %s runs %s, the rehearsal's UI is ui-server %s (devstack.UIServerTool), whose release that image is: bump both together", path, name, image, devstack.UIServerTool.Version)
			}
		}
		for _, repo := range []string{"temporalio/server:", "temporalio/admin-tools:"} {
			if tag, ok := strings.CutPrefix(image, repo); ok {
				seen++
				if tag != want {
					t.Errorf("%s: service %s runs %s, the rehearsal cluster's server is %s (devstack.ServerTool): bump both together", path, name, image, devstack.ServerTool.Version)
				}
			}
		}
		dyn := composeEnv(svc)["DYNAMIC_CONFIG_FILE_PATH"]
		if dyn == "" {
			continue
		}
		// The file as the container sees it, mounted from ./dynamicconfig.
		if filepath.Base(dyn) != filepath.Base(cluster.DynamicConfigFile) {
			t.Errorf("%s: service %s reads dynamic config %s, the rehearsal cluster %s: use the one file", path, name, dyn, cluster.DynamicConfigFile)
		}
		if !slices.ContainsFunc(strs(svc, "volumes"), func(v string) bool { return strings.HasPrefix(v, "./dynamicconfig:") }) {
			t.Errorf("%s: service %s does not mount ./dynamicconfig", path, name)
		}
	}
	if seen < 3 {
		t.Errorf("%s: %d Temporal images (server, admin-tools, ui) found", path, seen)
	}
	if _, err := os.Stat(filepath.Join("..", cluster.DynamicConfigFile)); err != nil {
		t.Errorf("the rehearsal's dynamic config: %v", err)
	}
	// Development-only settings stay out of the shared file.
	body, err := os.ReadFile(filepath.Join("..", cluster.DynamicConfigFile))
	if err == nil && strings.Contains(string(body), "forceSearchAttributesCacheRefreshOnRead") {
		t.Errorf("%s sets system.forceSearchAttributesCacheRefreshOnRead, a setting for development only", cluster.DynamicConfigFile)
	}
}

// ---- OpenTelemetry Collector

func TestCollectorConfig(t *testing.T) {
	path := filepath.Join("otel", "collector.yaml")
	conf := docs(t, path)[0]
	used := map[string]bool{}
	pipelines, _ := get(conf, "service", "pipelines").(map[string]any)
	if len(pipelines) == 0 {
		t.Fatalf("%s: no pipelines", path)
	}
	for _, p := range sortedKeys(pipelines) {
		for _, kind := range []string{"receivers", "processors", "exporters"} {
			names := strs(pipelines[p], kind)
			if kind != "processors" && len(names) == 0 {
				t.Errorf("%s: pipeline %s has no %s", path, p, kind)
			}
			for _, n := range names {
				used[kind+"/"+n] = true
				if _, ok := get(conf, kind).(map[string]any)[n]; !ok {
					t.Errorf("%s: pipeline %s uses %s %q, which is not defined", path, p, kind, n)
				}
			}
		}
	}
	for _, n := range strs(conf, "service", "extensions") {
		used["extensions/"+n] = true
		if _, ok := get(conf, "extensions").(map[string]any)[n]; !ok {
			t.Errorf("%s: service uses extension %q, which is not defined", path, n)
		}
	}
	for _, kind := range []string{"receivers", "processors", "exporters", "extensions"} {
		m, _ := get(conf, kind).(map[string]any)
		for _, n := range sortedKeys(m) {
			if !used[kind+"/"+n] {
				t.Errorf("%s: %s %q is defined but used by no pipeline", path, kind, n)
			}
		}
	}
	// The ports the processes and Prometheus are pointed at.
	for keys, want := range map[[4]string]string{
		{"receivers", "otlp", "protocols", "grpc"}: "4317",
		{"receivers", "otlp", "protocols", "http"}: "4318",
	} {
		if _, p := hostPort(str(conf, append(keys[:], "endpoint")...)); p != want {
			t.Errorf("%s: %v endpoint port %q, want %s", path, keys, p, want)
		}
	}
	if _, p := hostPort(str(conf, "exporters", "prometheus", "endpoint")); p != "8889" {
		t.Errorf("%s: prometheus exporter on port %q, want 8889 (scraped there)", path, p)
	}
	prom := docs(t, filepath.Join("compose", "prometheus.yml"))[0]
	var targets []string
	for _, sc := range list(prom, "scrape_configs") {
		for _, stc := range list(sc, "static_configs") {
			targets = append(targets, strs(stc, "targets")...)
		}
	}
	if !slices.Contains(targets, "otel-collector:8889") {
		t.Errorf("compose/prometheus.yml scrapes %v, not otel-collector:8889", targets)
	}
}

// ---- Kubernetes

type object struct {
	file string
	v    map[string]any
}

func (o object) kind() string { return str(o.v, "kind") }
func (o object) name() string { return str(o.v, "metadata", "name") }
func (o object) String() string {
	return fmt.Sprintf("%s: %s/%s", o.file, o.kind(), o.name())
}

func k8sObjects(t *testing.T) (objs []object, resources []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("k8s", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		for _, d := range docs(t, f) {
			m, ok := d.(map[string]any)
			if !ok {
				t.Errorf("%s: a document is not a mapping", f)
				continue
			}
			if filepath.Base(f) == "kustomization.yaml" {
				resources = strs(m, "resources")
				continue
			}
			objs = append(objs, object{file: f, v: m})
		}
	}
	return objs, resources
}

// podSpec is the pod template of a workload, or nil.
func podSpec(o object) any {
	switch o.kind() {
	case "Deployment", "DaemonSet", "StatefulSet", "Job":
		return get(o.v, "spec", "template", "spec")
	}
	return nil
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func TestKubernetes(t *testing.T) {
	objs, resources := k8sObjects(t)

	// kustomization.yaml lists every manifest but the examples.
	listed := map[string]bool{}
	for _, r := range resources {
		if _, err := os.Stat(filepath.Join("k8s", r)); err != nil {
			t.Errorf("kustomization.yaml: resource %s: %v", r, err)
		}
		listed[r] = true
	}
	files, _ := filepath.Glob(filepath.Join("k8s", "*.yaml"))
	for _, f := range files {
		b := filepath.Base(f)
		if b != "kustomization.yaml" && !strings.HasSuffix(b, ".example.yaml") && !listed[b] {
			t.Errorf("kustomization.yaml does not list %s", b)
		}
		if strings.HasSuffix(b, ".example.yaml") && listed[b] {
			t.Errorf("kustomization.yaml applies the template %s", b)
		}
	}

	// Every object is well-formed and in the namespace; collect the
	// ConfigMaps' and Secrets' keys.
	ns := ""
	keys := map[string]map[string]string{} // "ConfigMap/name" → key → value
	for _, o := range objs {
		if str(o.v, "apiVersion") == "" || o.kind() == "" || o.name() == "" {
			t.Errorf("%s: an object lacks apiVersion, kind or metadata.name", o)
		}
		if o.kind() == "Namespace" {
			ns = o.name()
		}
		switch o.kind() {
		case "ConfigMap", "Secret":
			m := map[string]string{}
			for _, field := range []string{"data", "stringData"} {
				d, _ := get(o.v, field).(map[string]any)
				for k, v := range d {
					m[k] = fmt.Sprint(v)
				}
			}
			keys[o.kind()+"/"+o.name()] = m
		}
	}
	if ns == "" {
		t.Fatal("no Namespace object")
	}
	for _, o := range objs {
		if o.kind() != "Namespace" && str(o.v, "metadata", "namespace") != ns {
			t.Errorf("%s: namespace %q, want %q", o, str(o.v, "metadata", "namespace"), ns)
		}
	}
	// The Secret template holds placeholders only.
	for k, m := range keys {
		if strings.HasPrefix(k, "Secret/") {
			for key, v := range m {
				if !strings.HasPrefix(v, "<") {
					t.Errorf("%s: key %s holds %q, want a <placeholder>", k, key, v)
				}
			}
		}
	}

	wflags := workerFlags(t)
	covered := map[string]bool{}
	images := map[string]bool{}
	for _, o := range objs {
		spec := podSpec(o)
		if spec == nil {
			continue
		}
		if get(spec, "securityContext", "runAsNonRoot") != true {
			t.Errorf("%s: pod securityContext.runAsNonRoot is not true", o)
		}
		for _, v := range list(spec, "volumes") {
			for kind, field := range map[string]string{"ConfigMap": "configMap", "Secret": "secret"} {
				ref := get(v, field)
				if ref == nil || get(ref, "optional") == true {
					continue
				}
				name := str(ref, "name")
				if kind == "Secret" {
					name = str(ref, "secretName")
				}
				if _, ok := keys[kind+"/"+name]; !ok {
					t.Errorf("%s: volume %s mounts %s %q, which no manifest defines", o, str(v, "name"), kind, name)
				}
			}
		}
		for _, c := range list(spec, "containers") {
			where := fmt.Sprintf("%s container %s", o, str(c, "name"))
			if listed[filepath.Base(o.file)] {
				images[str(c, "image")] = true
			}
			if get(c, "securityContext", "allowPrivilegeEscalation") != false {
				t.Errorf("%s: allowPrivilegeEscalation is not false", where)
			}
			// env: references exist; $(VAR) only of variables defined before.
			defined := map[string]bool{}
			for _, e := range list(c, "env") {
				for _, m := range envRef.FindAllStringSubmatch(str(e, "value"), -1) {
					if !defined[m[1]] {
						t.Errorf("%s: env %s uses $(%s), not defined before it", where, str(e, "name"), m[1])
					}
				}
				defined[str(e, "name")] = true
				for kind, field := range map[string]string{"ConfigMap": "configMapKeyRef", "Secret": "secretKeyRef"} {
					ref := get(e, "valueFrom", field)
					if ref == nil {
						continue
					}
					m, ok := keys[kind+"/"+str(ref, "name")]
					if !ok {
						t.Errorf("%s: env %s reads %s %q, which no manifest defines", where, str(e, "name"), kind, str(ref, "name"))
					} else if _, ok := m[str(ref, "key")]; !ok {
						t.Errorf("%s: env %s reads key %q of %s %q, which has %v", where, str(e, "name"), str(ref, "key"), kind, str(ref, "name"), sortedKeys(m))
					}
				}
			}
			for _, ef := range list(c, "envFrom") {
				for kind, field := range map[string]string{"ConfigMap": "configMapRef", "Secret": "secretRef"} {
					if ref := get(ef, field); ref != nil {
						if _, ok := keys[kind+"/"+str(ref, "name")]; !ok {
							t.Errorf("%s: envFrom %s %q, which no manifest defines", where, kind, str(ref, "name"))
						}
					}
				}
			}
			cmd, args := strs(c, "command"), strs(c, "args")
			// Kubernetes leaves $(UNDEFINED) as is: a flag would get the literal text.
			for _, a := range append(slices.Clone(cmd), args...) {
				for _, m := range envRef.FindAllStringSubmatch(a, -1) {
					if !defined[m[1]] {
						t.Errorf("%s: argument %q uses $(%s), which the container's env does not define", where, a, m[1])
					}
				}
			}
			if len(cmd) == 0 {
				continue
			}
			switch filepath.Base(cmd[0]) {
			case "worker":
				got, errs := parseArgs(append(cmd[1:], args...), wflags)
				for _, err := range errs {
					t.Errorf("%s: %v", where, err)
				}
				if _, ok := got["roles"]; !ok {
					t.Errorf("%s: no --roles (the default runs every role)", where)
				}
				rs := checkRoles(t, where, got["roles"])
				for _, r := range rs {
					covered[r] = true
				}
				checkWorkerPod(t, where, o, spec, c, got, rs)
			case "starter":
				if len(args) == 0 {
					t.Errorf("%s: starter without a subcommand", where)
					continue
				}
				_, errs := parseArgs(args[1:], starterFlags(t, args[0]))
				for _, err := range errs {
					t.Errorf("%s: starter %s: %v", where, args[0], err)
				}
			}
		}
	}
	for _, r := range roles {
		if !covered[r] {
			t.Errorf("k8s: no worker serves the %s role", r)
		}
	}

	// Images: the bare names the manifests use are the ones
	// kustomization.yaml maps to a registry.
	kust := docs(t, filepath.Join("k8s", "kustomization.yaml"))[0]
	mapped := map[string]bool{}
	for _, im := range list(kust, "images") {
		mapped[str(im, "name")] = true
		if !images[str(im, "name")] {
			t.Errorf("kustomization.yaml maps image %q, which no manifest uses", str(im, "name"))
		}
	}
	for im := range images {
		if !strings.ContainsAny(im, "/:") && !mapped[im] {
			t.Errorf("image %q is neither pinned nor mapped in kustomization.yaml", im)
		}
	}

	checkServices(t, objs)
	checkCollector(t, objs, keys)
}

// checkWorkerPod: the health endpoint is reachable by the kubelet and
// probed where it serves, slots come from configuration, GPU roles get GPUs.
func checkWorkerPod(t *testing.T, where string, o object, spec, c any, flags map[string]string, rs []string) {
	t.Helper()
	hl, ok := flags["health-listen"]
	host, port := hostPort(hl)
	if !ok || port == "" {
		t.Errorf("%s: no --health-listen host:port, so the probes have nothing to read", where)
		return
	}
	if ip := net.ParseIP(host); host == "" || ip == nil || ip.IsLoopback() || !ip.IsUnspecified() {
		t.Errorf("%s: --health-listen=%s is not reachable by the kubelet: use 0.0.0.0:%s", where, hl, port)
	}
	ports := map[string]string{}
	for _, p := range list(c, "ports") {
		ports[str(p, "name")] = fmt.Sprint(get(p, "containerPort"))
	}
	for probe, path := range map[string]string{"livenessProbe": livePath, "readinessProbe": readyPath, "startupProbe": livePath} {
		pr := get(c, probe)
		if pr == nil {
			if probe != "startupProbe" {
				t.Errorf("%s: no %s", where, probe)
			}
			continue
		}
		if got := str(pr, "httpGet", "path"); got != path {
			t.Errorf("%s: %s reads %q, want %s", where, probe, got, path)
		}
		pp := fmt.Sprint(get(pr, "httpGet", "port"))
		if named, ok := ports[pp]; ok {
			pp = named
		}
		if pp != port {
			t.Errorf("%s: %s on port %s, the health endpoint listens on %s", where, probe, pp, port)
		}
		if to, ok := get(pr, "timeoutSeconds").(int); probe == "readinessProbe" && (!ok || to < 4) {
			t.Errorf("%s: readinessProbe timeoutSeconds %v: the checks take up to 3 s, allow more", where, get(pr, "timeoutSeconds"))
		}
	}
	gpus := get(c, "resources", "limits", "nvidia.com/gpu")
	onGPU := get(spec, "nodeSelector") != nil || get(spec, "affinity", "nodeAffinity") != nil
	if slices.Contains(rs, "rollout") || slices.Contains(rs, "train") {
		if gpus == nil || !onGPU {
			t.Errorf("%s: a %v worker without nvidia.com/gpu limits or a GPU node selector", where, rs)
		}
	} else if gpus != nil {
		t.Errorf("%s: a %v worker takes GPUs it does not use", where, rs)
	}
	if slices.Contains(rs, "rollout") {
		if o.kind() != "DaemonSet" {
			t.Errorf("%s: rollout workers are one per GPU node: a DaemonSet, not a %s", where, o.kind())
		}
		// --slots from the ConfigMap, through an env variable.
		m := envRef.FindStringSubmatch(flags["slots"])
		ok := false
		for _, e := range list(c, "env") {
			if m != nil && str(e, "name") == m[1] && get(e, "valueFrom", "configMapKeyRef") != nil {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s: --slots=%q does not come from the ConfigMap", where, flags["slots"])
		}
	}
	if slices.Contains(rs, "train") {
		if r, _ := get(o.v, "spec", "replicas").(int); o.kind() != "Deployment" || r != 1 {
			t.Errorf("%s: the training worker is one Deployment replica", where)
		}
	}
}

// checkServices: a Service selects pods of a workload and targets ports
// they declare.
func checkServices(t *testing.T, objs []object) {
	t.Helper()
	for _, svc := range objs {
		if svc.kind() != "Service" {
			continue
		}
		sel, _ := get(svc.v, "spec", "selector").(map[string]any)
		var match []any
		for _, o := range objs {
			spec := podSpec(o)
			if spec == nil {
				continue
			}
			labels, _ := get(o.v, "spec", "template", "metadata", "labels").(map[string]any)
			ok := len(sel) > 0
			for k, v := range sel {
				if labels[k] != v {
					ok = false
				}
			}
			if ok {
				match = append(match, list(spec, "containers")...)
			}
		}
		if len(match) == 0 {
			t.Errorf("%s: selects no pods", svc)
			continue
		}
		for _, p := range list(svc.v, "spec", "ports") {
			target := fmt.Sprint(get(p, "targetPort"))
			found := false
			for _, c := range match {
				for _, cp := range list(c, "ports") {
					if str(cp, "name") == target || fmt.Sprint(get(cp, "containerPort")) == target {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("%s: targetPort %s is no port of the selected containers", svc, target)
			}
		}
	}
}

// checkCollector: the in-cluster collector runs deploy/otel/collector.yaml
// verbatim and the workers' OTLP endpoint is its Service.
func checkCollector(t *testing.T, objs []object, keys map[string]map[string]string) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join("otel", "collector.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cm, ok := keys["ConfigMap/otel-collector"]
	if !ok {
		t.Fatal("k8s: no ConfigMap otel-collector")
	}
	if cm["collector.yaml"] != string(want) {
		t.Errorf("k8s: ConfigMap otel-collector's collector.yaml differs from deploy/otel/collector.yaml: copy it over")
	}
	ep := keys["ConfigMap/roundhouse-config"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
	host, port := hostPort(ep)
	svcName, rest, _ := strings.Cut(host, ".")
	svcNS, _, _ := strings.Cut(rest, ".")
	found := false
	for _, o := range objs {
		if o.kind() == "Service" && o.name() == svcName && str(o.v, "metadata", "namespace") == svcNS {
			for _, p := range list(o.v, "spec", "ports") {
				if strconv.Itoa(toInt(get(p, "port"))) == port {
					found = true
				}
			}
		}
	}
	if !found {
		t.Errorf("k8s: OTEL_EXPORTER_OTLP_ENDPOINT=%s is no Service port of the manifests", ep)
	}
}

// ---- environment variable names

// goLiterals collects the string literals matching re in the non-test Go
// files under dir.
func goLiterals(t *testing.T, dir string, re *regexp.Regexp) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != dir {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			out[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// moduleDir is where the module's source is, from the module cache.
func moduleDir(t *testing.T, mod string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go list -m %s: %v (is it still in go.mod?)", mod, err)
	}
	return strings.TrimSpace(string(out))
}

// Standard variables of the OpenTelemetry and AWS SDKs that deploy/ may set.
var sdkEnv = map[string]bool{
	"OTEL_EXPORTER_OTLP_ENDPOINT": true, "OTEL_EXPORTER_OTLP_PROTOCOL": true, "OTEL_EXPORTER_OTLP_HEADERS": true,
	"OTEL_SERVICE_NAME": true, "OTEL_RESOURCE_ATTRIBUTES": true, "OTEL_TRACES_EXPORTER": true, "OTEL_METRICS_EXPORTER": true,
	"AWS_REGION": true, "AWS_ACCESS_KEY_ID": true, "AWS_SECRET_ACCESS_KEY": true, "AWS_SESSION_TOKEN": true, "AWS_PROFILE": true,
	"OMP_NUM_THREADS": true, // PyTorch's CPU threads, read by the trainer
}

// TestEnvNames: every variable deploy/ gives the worker or the starter is
// one they read — a misspelt name is silently ignored at run time — or is
// used in the container's own $(VAR) references.
func TestEnvNames(t *testing.T) {
	ours := goLiterals(t, "..", regexp.MustCompile(`"(ROUNDHOUSE_[A-Z0-9_]+)"`))
	sdk := goLiterals(t, moduleDir(t, "go.temporal.io/sdk/contrib/envconfig"), regexp.MustCompile(`"(TEMPORAL_[A-Z0-9_]+)"`))
	check := func(where string, names []string, refs string) {
		for _, n := range names {
			known := false
			switch {
			case strings.HasPrefix(n, "ROUNDHOUSE_"):
				known = ours[n]
			case strings.HasPrefix(n, "TEMPORAL_"):
				known = sdk[n]
			default:
				known = sdkEnv[n] || strings.Contains(refs, "$("+n+")")
			}
			if !known {
				t.Errorf("%s: sets %s, which neither Roundhouse, the Temporal SDK's envconfig nor the OTel/AWS SDKs read", where, n)
			}
		}
	}

	path := filepath.Join("compose", "compose.yaml")
	services, _ := get(docs(t, path)[0], "services").(map[string]any)
	for _, name := range sortedKeys(services) {
		if get(services[name], "build") == nil {
			continue // third-party images have their own variables
		}
		check(path+": service "+name, sortedKeys(composeEnv(services[name])), "")
	}
	objs, _ := k8sObjects(t)
	for _, o := range objs {
		for _, c := range list(podSpec(o), "containers") {
			cmd := strs(c, "command")
			if len(cmd) == 0 || (filepath.Base(cmd[0]) != "worker" && filepath.Base(cmd[0]) != "starter") {
				continue
			}
			var names []string
			refs := strings.Join(append(cmd, strs(c, "args")...), " ")
			for _, e := range list(c, "env") {
				names = append(names, str(e, "name"))
				refs += " " + str(e, "value")
			}
			check(fmt.Sprintf("%s container %s", o, str(c, "name")), names, refs)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func toInt(v any) int {
	i, _ := v.(int)
	return i
}
