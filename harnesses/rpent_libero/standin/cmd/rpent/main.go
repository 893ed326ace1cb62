// Command rpent is the test stand-in for RPent's CLI (package standin): the
// same flags, an OpenAI client with tools against --base-url, RPent's output
// files. Exit status: 0 the episode ran to an end, 1 planner error, 2 usage.
//
//	rpent --robot libero --libero-type pro --suite libero_object_swap --task 2 --seed 12 \
//	    --planner api --model openai-chat:toy --base-url http://127.0.0.1:18200/v1 \
//	    --max-turns 100 --output-dir DIR [--vla-endpoint URL --sam3-endpoint URL --env-endpoint URL]
//	    [--policy-mode code --code-timeout-s 120 --code-max-calls 100]
//
// Environment: OPENAI_API_KEY (required, any value), RPENT_STANDIN_HANG_TASKS
// and RPENT_STANDIN_HANG_FOR (hang after the first model call, for timeout
// tests), RPENT_STANDIN_RPC_SERVICE (the rpc-service binary it spawns).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/roundhouse-rl/roundhouse/harnesses/rpent_libero/standin"
)

func main() {
	cfg, err := standin.ParseArgs(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rpent: %v\n", err)
		os.Exit(standin.ExitUsage)
	}
	knobs, err := standin.KnobsFromEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "rpent: %v\n", err)
		os.Exit(standin.ExitUsage)
	}
	// SIGTERM ends the episode as a planner error; SIGKILL (a timeout in
	// Roundhouse) ends it with no files, as it would end RPent.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := standin.Run(ctx, cfg, knobs, os.Stdout)
	stop()
	os.Exit(code)
}
