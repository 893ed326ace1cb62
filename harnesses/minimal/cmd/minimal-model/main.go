// Command minimal-model serves the toy policy over OpenAI Chat Completions
// the way vLLM does (see package server):
//
//	minimal-model --weights harnesses/minimal/weights/w0/policy.json --listen 127.0.0.1:18100 --served-name toy
//
// It prints "minimal-model listening on http://HOST:PORT" once it accepts
// connections (port 0 picks a free one) and stops cleanly on SIGINT/SIGTERM.
//
// MINIMAL_MODEL_START_DELAY (seconds, e.g. 2 or 0.5; from the environment,
// which a rollout host passes on from its worker's) imitates a big model's
// load time: for that long after it starts listening, every request, the
// /health readiness check included, is answered 503. Unset or 0: ready at
// once.
//
// --enable-sleep-mode serves vLLM's sleep-mode endpoints (package server,
// EnableSleepMode): POST /collective_rpc {"method": "reload_weights"}
// reads --weights again, so a rollout host swaps weights without a
// restart (harnesses/minimal/shared.yaml). MINIMAL_MODEL_RELOAD_DELAY
// (seconds, like the start delay) makes each reload take that long, as
// reading a big checkpoint does.
//
// --ignore-seed, or MINIMAL_MODEL_IGNORE_SEED=1 in the environment, makes
// it sample without the request's seed, like a server that does not
// honour per-request seeds: the recording proxy's seed check
// (collect.call_seeds) must then fail the episodes.
//
// --logprobs-mode raw_logprobs|processed_logprobs is vLLM's flag of that
// name (raw_logprobs by default, as in vLLM): raw logprobs are the model's
// own, processed ones those of the distribution the token was drawn from
// after temperature, truncation and penalties. --generation-config
// auto|vllm is vLLM's too: with auto (the default) the
// generation_config.json beside --weights, if there is one, sets the
// sampling values requests omit; with vllm they are the neutral ones.
// Both are read once at start (package server).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/server"
)

func main() {
	weights := flag.String("weights", "", "policy.json to serve (required)")
	listen := flag.String("listen", "127.0.0.1:18100", "HOST:PORT to listen on")
	name := flag.String("served-name", "toy", "model name clients must ask for")
	sleepMode := flag.Bool("enable-sleep-mode", false, "serve /sleep, /wake_up, /is_sleeping and /collective_rpc reload_weights, as vLLM does")
	ignoreSeed := flag.Bool("ignore-seed", false, "sample without the request's seed, as a server that ignores it (also MINIMAL_MODEL_IGNORE_SEED=1)")
	logprobsMode := flag.String("logprobs-mode", string(server.RawLogprobs), "raw_logprobs (the model's, before temperature and truncation) or processed_logprobs (of the distribution sampled from), as vLLM's flag")
	genConfig := flag.String("generation-config", "auto", "auto: generation_config.json beside --weights sets the sampling defaults of requests that omit them; vllm: neutral defaults (as vLLM's flag)")
	flag.Parse()
	if err := run(*weights, *listen, *name, *sleepMode, *ignoreSeed, *logprobsMode, *genConfig); err != nil {
		log.Fatalf("minimal-model: %v", err)
	}
}

func run(weights, listen, name string, sleepMode, ignoreSeed bool, logprobsMode, genConfig string) error {
	if weights == "" {
		return errors.New("--weights is required")
	}
	mode, err := server.ParseLogprobsMode(logprobsMode)
	if err != nil {
		return fmt.Errorf("--logprobs-mode: %w", err)
	}
	defaults, err := server.GenerationConfig(genConfig, filepath.Dir(weights))
	if err != nil {
		return fmt.Errorf("--generation-config: %w", err)
	}
	switch v := os.Getenv("MINIMAL_MODEL_IGNORE_SEED"); v {
	case "", "0":
	case "1":
		ignoreSeed = true
	default:
		return fmt.Errorf("MINIMAL_MODEL_IGNORE_SEED=%q: set 1 to ignore request seeds, or leave it unset", v)
	}
	delay, err := startDelay("MINIMAL_MODEL_START_DELAY", os.Getenv("MINIMAL_MODEL_START_DELAY"))
	if err != nil {
		return err
	}
	reloadDelay, err := startDelay("MINIMAL_MODEL_RELOAD_DELAY", os.Getenv("MINIMAL_MODEL_RELOAD_DELAY"))
	if err != nil {
		return err
	}
	p, err := policy.Load(weights)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	model := server.New(p, name, weights)
	model.IgnoreSeed = ignoreSeed
	model.LogprobsMode, model.Defaults = mode, defaults
	if defaults != (server.Defaults{}) {
		// vLLM warns the same way: requests that omit these fields do not
		// sample from the model's own distribution.
		fmt.Printf("minimal-model: default sampling parameters from %s: %s (--generation-config vllm for neutral ones)\n",
			filepath.Join(filepath.Dir(weights), server.GenerationConfigFile), defaults)
	}
	if ignoreSeed {
		fmt.Println("minimal-model: ignoring request seeds (--ignore-seed)")
	}
	if sleepMode {
		model.EnableSleepMode(func() (*policy.Policy, error) {
			time.Sleep(reloadDelay)
			return policy.Load(weights)
		})
	}
	if delay > 0 {
		model.ReadyAfter(delay)
		fmt.Printf("minimal-model: loading for %s (MINIMAL_MODEL_START_DELAY)\n", delay)
	}
	srv := &http.Server{
		Handler:           model.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      120 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Printf("minimal-model listening on http://%s\n", ln.Addr())
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// startDelay reads a delay variable (name): seconds, fractions allowed;
// empty is none.
func startDelay(name, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	sec, err := strconv.ParseFloat(v, 64)
	if err != nil || !(sec >= 0 && sec <= 24*3600) { // NaN fails too
		return 0, fmt.Errorf("%s=%q: give seconds, e.g. 20 or 0.5", name, v)
	}
	return time.Duration(sec * float64(time.Second)), nil
}
