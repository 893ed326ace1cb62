// Command worker runs Roundhouse workers: control, rollout and/or train.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/telemetry"
	"github.com/roundhouse-rl/roundhouse/workers"
)

func main() {
	e := connect.FromEnv()
	roles := flag.String("roles", "control,rollout,train", "comma-separated roles: control, rollout, train")
	slots := flag.Int("slots", 4, "concurrent episodes on this rollout host")
	workDir := flag.String("workdir", "", "local scratch directory (default: a folder under the temp dir)")
	proxyListen := flag.String("proxy-listen", "127.0.0.1:0", "address of the recording proxy")
	healthListen := flag.String("health-listen", "", "serve /livez and /readyz on host:port (a bare :8080 binds loopback; 0.0.0.0:8080 for Kubernetes probes); empty: off")
	flag.StringVar(&e.Temporal, "temporal", e.Temporal, "Temporal frontend host:port")
	flag.StringVar(&e.S3.Endpoint, "s3-endpoint", e.S3.Endpoint, "S3 endpoint URL")
	flag.StringVar(&e.S3.Bucket, "bucket", e.S3.Bucket, "S3 bucket")
	connect.AddFlags(flag.CommandLine, &e) // --namespace, --tls*, --api-key-file, --payload-key-file, --s3-path-style
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Traces and metrics go where the OTEL_* variables say; nowhere by default.
	shutdown, err := telemetry.Setup(ctx, "roundhouse-worker")
	if err != nil {
		slog.Error("worker", "error", err)
		os.Exit(1)
	}
	defer func() {
		if err := shutdown(context.Background()); err != nil { // flush on the way out
			slog.Warn("worker", "error", err)
		}
	}()
	c, err := connect.Temporal(ctx, e, workers.Logger())
	if err != nil {
		slog.Error("worker", "error", err)
		os.Exit(1)
	}
	defer c.Close()
	s, err := connect.Store(ctx, e)
	if err != nil {
		slog.Error("worker", "error", err)
		os.Exit(1)
	}
	cfg := workers.Config{Roles: strings.Split(*roles, ","), Slots: *slots, WorkDir: *workDir, ProxyListen: *proxyListen, Namespace: e.Namespace, HealthListen: *healthListen}
	connect.UnsetSecrets()
	if err := workers.Run(ctx, c, s, cfg); err != nil {
		slog.Error("worker", "error", err)
		os.Exit(1)
	}
}
