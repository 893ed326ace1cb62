package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/cluster"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/devstack"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/prereq"
)

// The cluster keeps its state under .dev/cluster; endpoints.json there
// says it runs (and how to reach it) until `cluster down`.
var (
	clusterDir      = filepath.Join(stateDir, "cluster")
	clusterFile     = filepath.Join(clusterDir, "endpoints.json")
	clusterServices = append([]string{"postgres", "ui"}, cluster.Services...)
)

// clusterEndpoints are the running cluster's, if one runs.
func clusterEndpoints() (connect.Endpoints, bool) {
	body, err := os.ReadFile(clusterFile)
	if err != nil {
		return connect.Endpoints{}, false
	}
	var e connect.Endpoints
	if json.Unmarshal(body, &e) != nil || e.Temporal == "" {
		return connect.Endpoints{}, false
	}
	return e, true
}

// clusterNeeds is what the cluster needs beyond the demo's: Debian's
// PostgreSQL server, and root (PostgreSQL runs as its own user).
func clusterNeeds() []prereq.Need {
	return []prereq.Need{{
		Name: "PostgreSQL's server (/usr/lib/postgresql/*/bin/postgres)", For: "the production-shaped Temporal's persistence and visibility",
		Debian: []string{"postgresql"},
		Check: func(context.Context) error {
			if _, err := cluster.PostgresBin(); err != nil {
				return errors.New("not installed")
			}
			return nil
		},
	}}
}

func clusterCmd(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: devstack cluster up|demo|down [starter train flags...]")
	}
	switch args[0] {
	case "up", "demo":
		if os.Geteuid() != 0 {
			return errors.New("the production-shaped cluster runs PostgreSQL as its own user: run it as root (sudo go tool task cluster:demo)")
		}
		if err := ensure(ctx, "cluster", args[1:]); err != nil {
			return err
		}
		if err := clusterUp(ctx); err != nil {
			return err
		}
		if args[0] == "demo" {
			return demo(ctx, args[1:])
		}
		return nil
	case "down":
		return clusterDown()
	}
	return fmt.Errorf("unknown cluster command %q: use up, demo or down", args[0])
}

// clusterUp brings the cluster up (unless it runs), then S3 and the
// worker as `up` does, pointed at it.
func clusterUp(ctx context.Context) error {
	if _, ok := clusterEndpoints(); !ok {
		if pidAlive("temporal") {
			return errors.New("the dev server runs: `go tool task down` first (the cluster replaces it)")
		}
		began := time.Now()
		for _, t := range devstack.ClusterTools {
			if _, err := t.Find(); err != nil {
				fmt.Printf("production-shaped Temporal: building %s %s, %s and %s once (about 8 minutes on 2 cores)\n",
					devstack.ServerTool.Name, devstack.ServerTool.Version, devstack.SQLTool.Name, devstack.UIServerTool.Name)
				break
			}
		}
		abs, _ := filepath.Abs(clusterDir)
		dyn, _ := filepath.Abs(cluster.DynamicConfigFile)
		c, err := cluster.Up(ctx, cluster.Options{Dir: abs, IP: "127.0.0.1", Ports: cluster.DefaultPorts(), Namespace: "roundhouse",
			DynamicConfig: dyn, Detach: true, UI: true, Log: os.Stderr})
		if err != nil {
			return err
		}
		for _, name := range clusterServices {
			if p := c.Proc(name); p != nil {
				writePid("cluster-"+name, p)
			}
		}
		body, _ := json.MarshalIndent(c.Endpoints(), "", "  ")
		if err := os.WriteFile(clusterFile, body, 0o644); err != nil {
			return err
		}
		fmt.Printf("production-shaped Temporal up in %s: frontend %s (mTLS, namespace %s), history, matching, worker; PostgreSQL %d; UI http://127.0.0.1:%d; logs in %s\n",
			time.Since(began).Round(time.Second), c.Endpoints().Temporal, c.Endpoints().Namespace, cluster.DefaultPorts().Postgres, cluster.DefaultPorts().UI, filepath.Join(abs, "logs"))
	}
	e, _ := clusterEndpoints()
	if err := upRest(ctx, fmt.Sprintf("%s (production-shaped, mTLS; UI http://127.0.0.1:%d)", e.Temporal, cluster.DefaultPorts().UI)); err != nil {
		return err
	}
	// The starter in another shell needs the frontend, the namespace and
	// the client certificate: one file to source.
	var b strings.Builder
	for _, kv := range env() {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s='%s'\n", k, v)
	}
	envFile := filepath.Join(clusterDir, "env")
	if err := os.WriteFile(envFile, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", envFile, err)
	}
	fmt.Printf("  starter   `. %s` points starter in another shell at it (frontend, namespace, client certificate)\n", envFile)
	return nil
}

func clusterDown() error {
	stopPid("worker")
	stopPid("s3")
	// The services first, PostgreSQL last: none writes to a stopped database.
	for _, name := range []string{"ui", "worker", "frontend", "matching", "history", "postgres"} {
		stopPid("cluster-" + name)
	}
	os.Remove(clusterFile)
	fmt.Printf("production-shaped cluster stopped (data kept: PostgreSQL's, and .dev/s3)\n")
	return nil
}

// pidAlive reports whether the process of pid file name runs.
func pidAlive(name string) bool {
	b, err := os.ReadFile(pidFile(name))
	if err != nil {
		return false
	}
	var pid int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &pid); err != nil || pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	return err == nil && p.Signal(nil) == nil
}
