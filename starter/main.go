// Command starter is what users type: start and follow train runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
	"github.com/roundhouse-rl/roundhouse/internal/store"
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

// runName is what --run (and a sweep's --name) may be.
var runName = runs.NamePattern

func rootCmd() *cobra.Command {
	e := connect.FromEnv()
	root := &cobra.Command{Use: "starter", Short: "Start and follow Roundhouse runs", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().StringVar(&e.Temporal, "temporal", e.Temporal, "Temporal frontend host:port (env ROUNDHOUSE_TEMPORAL)")
	root.PersistentFlags().StringVar(&e.S3.Endpoint, "s3-endpoint", e.S3.Endpoint, "S3 endpoint URL (env ROUNDHOUSE_S3_ENDPOINT)")
	root.PersistentFlags().StringVar(&e.S3.Bucket, "bucket", e.S3.Bucket, "S3 bucket (env ROUNDHOUSE_BUCKET)")
	sec := flag.NewFlagSet("connect", flag.ContinueOnError) // --namespace, --tls*, --api-key-file, --payload-key-file, --s3-path-style
	connect.AddFlags(sec, &e)
	root.PersistentFlags().AddGoFlagSet(sec)
	// The single-host controller's --run-dir, which users still type: say
	// where a run lives instead of "unknown flag".
	runDir := root.PersistentFlags().String("run-dir", "", "")
	_ = root.PersistentFlags().MarkHidden("run-dir")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if *runDir != "" {
			return fmt.Errorf("--run-dir %s: a run lives in the bucket under runs/<run>/ (records, reports, weights, episode files), not in a local folder; name it with --run NAME and read it with `starter report --run NAME`", *runDir)
		}
		// A bad payload key fails every command now, not only those
		// that decode history.
		_, err := e.DataConverter()
		return err
	}
	root.AddCommand(trainCmd(&e), statusCmd(&e), validateCmd(), reportCmd(&e), compareCmd(&e), stopCmd(&e), cancelCmd(&e), sweepCmd(&e), evalCmd(&e), driftCmd(&e))
	return root
}

// connectBoth connects to Temporal and S3 (connect.Both) with the CLI's
// quiet logger; the caller closes the client.
func connectBoth(ctx context.Context, e *connect.Endpoints) (client.Client, *store.Store, error) {
	return connect.Both(ctx, *e, quietLogger())
}

// quietLogger keeps the SDK's own logs out of the CLI's output unless they are warnings.
func quietLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// priorityFlag adds --priority: where the episodes stand on a shared
// fleet of rollout hosts (docs/design.md §10).
func priorityFlag(fl *pflag.FlagSet, p *int, def int, what string) {
	fl.IntVar(p, "priority", def, fmt.Sprintf("order of %s on a shared rollout fleet, 1 (served first) to %d; training defaults to %d, evaluations and sweeps to %d", what, fleet.MaxPriority, fleet.TrainPriority, fleet.EvalPriority))
}
