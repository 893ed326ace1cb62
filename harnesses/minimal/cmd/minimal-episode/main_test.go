package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/episode"
)

func readOutcome(t *testing.T, dir string) episode.Outcome {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "outcome.json"))
	if err != nil {
		t.Fatal(err)
	}
	var o episode.Outcome
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "transcript.json")); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestAgainstModelBinary runs the real minimal-model command and plays
// episodes against it: the pair the harness config launches.
func TestAgainstModelBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds minimal-model")
	}
	bin := filepath.Join(t.TempDir(), "minimal-model")
	if out, err := exec.Command("go", "build", "-o", bin, "../minimal-model").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--weights", "../../weights/w0/policy.json", "--listen", "127.0.0.1:0", "--served-name", "toy")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no ready line: %v\n%s", err, stderr.String())
	}
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "minimal-model listening on ")
	if !ok {
		t.Fatalf("ready line %q", line)
	}
	if resp, err := http.Get(url + "/health"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health: %v %v", resp, err)
	}
	outcomes := map[bool]int{}
	for seed := 45; seed <= 49; seed++ {
		dir := t.TempDir()
		var so, se bytes.Buffer
		code := run([]string{"--base-url", url + "/v1", "--model", "toy", "--task", "2", "--seed", strconv.Itoa(seed), "--max-turns", "8", "--output-dir", dir, "--timeout", "30s"}, &so, &se)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, se.String())
		}
		o := readOutcome(t, dir)
		outcomes[o.Success]++
		if o.Termination == episode.ModelError || o.Calls == 0 {
			t.Fatalf("outcome %+v", o)
		}
	}
	// A wrong model name is a model error: exit 1, outcome written.
	dir := t.TempDir()
	var so, se bytes.Buffer
	if code := run([]string{"--base-url", url + "/v1", "--model", "gpt-4", "--task", "0", "--output-dir", dir}, &so, &se); code != 1 {
		t.Fatalf("wrong model: exit %d, want 1", code)
	}
	if o := readOutcome(t, dir); o.Termination != episode.ModelError || !strings.Contains(o.Error, "404") {
		t.Fatalf("wrong model: outcome %+v", o)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("minimal-model did not stop cleanly: %v\n%s", err, stderr.String())
	}
}

func TestBadFlags(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	defer ts.Close()
	for _, args := range [][]string{
		{"--model", "toy", "--output-dir", "x"},                                              // no base URL
		{"--base-url", ts.URL, "--model", "toy", "--output-dir", "x"},                        // not ending in /v1
		{"--base-url", ts.URL + "/v1", "--output-dir", "x"},                                  // no model
		{"--base-url", ts.URL + "/v1", "--model", "toy", "--output-dir", "x", "--task", "9"}, // no such task
		{"--base-url", ts.URL + "/v1", "--model", "toy", "--max-turns", "0", "--output-dir", "x"},
		{"--base-url", ts.URL + "/v1", "--model", "toy", "--output-dir", "x", "--min-seconds", "-1"},
		{"--base-url", ts.URL + "/v1", "--model", "toy", "--output-dir", "x", "--min-seconds", "NaN"},
	} {
		var so, se bytes.Buffer
		if code := run(args, &so, &se); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestMinSecondsKeepsRecords plays the same episode against a scripted
// model with and without --min-seconds: pacing changes only how long it
// takes, never what it writes (outcome and transcript byte for byte).
func TestMinSecondsKeepsRecords(t *testing.T) {
	// Deterministic replies: the n-th call names the tools in turn, with
	// id call-n (the toy server's ids are random).
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
			Tools []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Tools) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		n := 0
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				n++
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{
			"finish_reason": "tool_calls",
			"message": map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
				"id": "call-" + strconv.Itoa(n), "type": "function",
				"function": map[string]any{"name": req.Tools[(n+1)%len(req.Tools)].Function.Name, "arguments": "{}"},
			}}},
		}}})
	}))
	defer ts.Close()
	files := func(extra ...string) map[string]string {
		dir := t.TempDir()
		var so, se bytes.Buffer
		args := append([]string{"--base-url", ts.URL + "/v1", "--model", "toy", "--task", "1", "--seed", "45", "--max-turns", "4", "--output-dir", dir}, extra...)
		if code := run(args, &so, &se); code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, se.String())
		}
		out := map[string]string{}
		for _, f := range []string{"outcome.json", "transcript.json"} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			out[f] = string(b)
		}
		return out
	}
	plain, paced := files(), files("--min-seconds", "0.2")
	for f, want := range plain {
		if paced[f] != want {
			t.Errorf("%s with --min-seconds:\n%s\nwithout:\n%s", f, paced[f], want)
		}
	}
	var o episode.Outcome
	if err := json.Unmarshal([]byte(plain["outcome.json"]), &o); err != nil || o.Calls == 0 || o.Termination == episode.ModelError {
		t.Fatalf("the scripted episode did not run: %+v, %v", o, err)
	}
}
