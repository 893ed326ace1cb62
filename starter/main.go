// Command starter is what users type: start and follow train runs.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/roundhouse-rl/roundhouse/internal/telemetry"
)

func main() {
	// Traces and metrics go where the OTEL_* variables say; nowhere by default.
	shutdown, err := telemetry.Setup(context.Background(), "roundhouse-starter")
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	err = rootCmd().Execute()
	if serr := shutdown(context.Background()); serr != nil {
		fmt.Fprintln(os.Stderr, "warning:", serr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
