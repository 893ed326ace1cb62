// Command rpc-service is the test stand-in for RPent's RPC services (the
// LIBERO env server, the Pi0.5 VLA server, the SAM3 server): see package
// standin. It takes the real services' flags plus --component:
//
//	rpc-service --component vla --embodiment libero --cuda-device 0 --transport http --host 127.0.0.1 --port 18300
//	rpc-service --component env --suite libero_object_swap --task 2 --seed 0 --max-episode-steps 10000 --port 0
//
// It prints "RPC server listening on http://HOST:PORT" when ready and stops
// on SIGINT/SIGTERM. Failure knobs (flags, or the environment variables in
// brackets so harness command lines stay the real ones):
//
//	--fail-start exit|never-ready  [RPC_STANDIN_FAIL_START]
//	--fail-calls-every N           [RPC_STANDIN_FAIL_CALLS_EVERY]
//	--ready-delay 2s               [RPC_STANDIN_READY_DELAY]
//
// PI05_CHECKPOINT_PATH (vla) and SAM3_CHECKPOINT_PATH (sam3), when set, must
// name an existing file or directory, or the service fails to start.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/roundhouse-rl/roundhouse/harnesses/rpent_libero/standin"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "rpc-service: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	var c standin.ServeConfig
	envInt := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	envDur := func(k string) time.Duration { d, _ := time.ParseDuration(os.Getenv(k)); return d }
	fs := flag.NewFlagSet("rpc-service", flag.ContinueOnError)
	fs.StringVar(&c.Component, "component", "", "env, vla or sam3 (stand-in only: the real services are separate modules)")
	fs.String("embodiment", "libero", "robot embodiment (vla)")
	fs.Int("cuda-device", 0, "GPU index (ignored)")
	transport := fs.String("transport", "http", "http (socket is not in the stand-in)")
	fs.StringVar(&c.Host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&c.Port, "port", 0, "port to listen on (0: a free one)")
	fs.StringVar(&c.Suite, "suite", "", "env: LIBERO suite")
	fs.IntVar(&c.Task, "task", 0, "env: task number")
	fs.IntVar(&c.Seed, "seed", 0, "env: seed")
	fs.IntVar(&c.MaxSteps, "max-episode-steps", 10000, "env: steps allowed")
	fs.StringVar(&c.FailStart, "fail-start", os.Getenv("RPC_STANDIN_FAIL_START"), "exit or never-ready: fail to start (tests)")
	fs.IntVar(&c.FailEvery, "fail-calls-every", envInt("RPC_STANDIN_FAIL_CALLS_EVERY"), "fail every n-th call (tests; 0 never)")
	fs.DurationVar(&c.ReadyDelay, "ready-delay", envDur("RPC_STANDIN_READY_DELAY"), "loading time before it listens")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *transport != "http" {
		return fmt.Errorf("--transport %q: the stand-in speaks http only", *transport)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return standin.Serve(ctx, c, os.Stdout)
}
