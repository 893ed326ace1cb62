// Command minimal-episode plays one episode of the toy robot task against an
// OpenAI Chat Completions endpoint: the minimal harness's stand-in for RPent.
//
//	minimal-episode --base-url http://127.0.0.1:18200/ep/EPISODE/v1 --model toy \
//	    --task 2 --seed 45 --max-turns 8 --output-dir DIR [--timeout 60s] [--min-seconds 1]
//
// --min-seconds paces it: the episode lasts at least that long from the
// command's start, sleeping out the rest after its files are written, so
// a benchmark gets episodes of a real one's length with the same records.
//
// It writes DIR/outcome.json and DIR/transcript.json. Exit status 0 means the
// episode ran to an end (success or task failure); 1 means a planner or model
// error (outcome.json still says which); 2 means bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/env"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/episode"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	start := time.Now()
	fs := flag.NewFlagSet("minimal-episode", flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseURL := fs.String("base-url", "", "OpenAI API base URL, ending in /v1 (required)")
	model := fs.String("model", "", "model name to request (required)")
	task := fs.Int("task", 0, fmt.Sprintf("task number, 0..%d", env.NumTasks()-1))
	seed := fs.Int("seed", 0, "init id: picks the initial state")
	maxTurns := fs.Int("max-turns", env.DefaultMaxTurns, "model calls allowed")
	outDir := fs.String("output-dir", "", "directory for outcome.json and transcript.json (required)")
	timeout := fs.Duration("timeout", 60*time.Second, "timeout of each model request")
	temperature := fs.String("temperature", "1", `the requests' sampling temperature, or "default" to leave it to the model server`)
	minSeconds := fs.Float64("min-seconds", 0, "pace the episode: it lasts at least this many seconds, sleeping out the rest once its files are written (0: no pacing)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "minimal-episode: %v\n", err)
		return code
	}
	if err := check(*baseURL, *model, *outDir, *maxTurns, *timeout, *minSeconds); err != nil {
		return fail(2, err)
	}
	e, err := env.New(*task, *seed)
	if err != nil {
		return fail(2, err)
	}
	pl := &episode.OpenAI{BaseURL: *baseURL, Model: *model, Client: episode.NewHTTPClient(*timeout)}
	if *temperature != "default" {
		t, err := strconv.ParseFloat(*temperature, 64)
		if err != nil || t < 0 {
			return fail(2, fmt.Errorf(`--temperature %q: give a number ≥ 0, or "default" to leave it to the model server`, *temperature))
		}
		pl.Temperature = &t
	}
	out, msgs := episode.Run(context.Background(), pl, e, *maxTurns)
	// MINIMAL_EPISODE_DELAY (a duration) holds the finished episode before
	// it reports, so fault tests get slow hosts with real calls recorded.
	if d := os.Getenv("MINIMAL_EPISODE_DELAY"); d != "" {
		delay, err := time.ParseDuration(d)
		if err != nil {
			return fail(2, fmt.Errorf("MINIMAL_EPISODE_DELAY=%q: %w (write it like 15s)", d, err))
		}
		time.Sleep(delay)
	}
	if err := episode.WriteFiles(*outDir, out, msgs); err != nil {
		return fail(1, err)
	}
	// After the files, so pacing changes how long the episode takes and
	// nothing it records.
	time.Sleep(time.Until(start.Add(time.Duration(*minSeconds * float64(time.Second)))))
	fmt.Fprintf(stdout, "task %d seed %d: %s, success=%v after %d turns\n", *task, *seed, out.Termination, out.Success, out.Turns)
	if out.Termination == episode.ModelError {
		return fail(1, fmt.Errorf("model error: %s", out.Error))
	}
	return 0
}

func check(baseURL, model, outDir string, maxTurns int, timeout time.Duration, minSeconds float64) error {
	switch {
	case !strings.HasSuffix(strings.TrimSuffix(baseURL, "/"), "/v1"):
		return errors.New("--base-url must end in /v1")
	case model == "":
		return errors.New("--model is required")
	case outDir == "":
		return errors.New("--output-dir is required")
	case maxTurns < 1:
		return errors.New("--max-turns must be at least 1")
	case timeout <= 0:
		return errors.New("--timeout must be positive")
	case !(minSeconds >= 0 && minSeconds <= 3600): // NaN fails too
		return errors.New("--min-seconds must be between 0 and 3600")
	}
	return nil
}
