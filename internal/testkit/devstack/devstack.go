// Package devstack is the dev stack's own part: the pinned Temporal CLI dev
// server (with its UI) and versitygw as S3, where they are built, and their
// command lines. The demo, the integration tests and CI start them with
// internal/proc, as production code starts its services.
package devstack

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Pinned tools, built from the Go module proxy with `go install`, each in
// its own GOBIN so their dependencies never touch this module's.
var (
	TemporalTool  = Tool{Name: "temporal", Module: "github.com/temporalio/cli/cmd/temporal", Version: "v1.5.1"}
	VersitygwTool = Tool{Name: "versitygw", Module: "github.com/versity/versitygw/cmd/versitygw", Version: "v1.8.0"}

	// The production-shaped cluster (issue 27): the Temporal server, its
	// SQL schema tool and the Temporal UI server. Their releases ask for a
	// newer Go than the module's, which GOTOOLCHAIN fetches from the
	// module proxy; the server's build tag is its own release build's.
	ServerTool   = Tool{Name: "temporal-server", Bin: "server", Module: "go.temporal.io/server/cmd/server", Version: "v1.32.2", Toolchain: ServerToolchain, Tags: "disable_grpc_modules"}
	SQLTool      = Tool{Name: "temporal-sql-tool", Bin: "sql", Module: "go.temporal.io/server/cmd/tools/sql", Version: "v1.32.2", Toolchain: ServerToolchain}
	UIServerTool = Tool{Name: "temporal-ui-server", Bin: "server", Module: "github.com/temporalio/ui-server/v2/cmd/server", Version: "v2.55.0", Toolchain: ServerToolchain}
)

// ClusterTools are what the production-shaped Temporal runs.
var ClusterTools = []Tool{ServerTool, SQLTool, UIServerTool}

// ServerToolchain is the Go that builds the cluster's tools (their go.mod
// asks for go1.26.10).
const ServerToolchain = "go1.27.3"

// Tool is a pinned Go-installable binary. Bin is the name go install
// gives it when that is not Name (two of them are "server"); Toolchain,
// when set, is the GOTOOLCHAIN that builds it; Tags its build tags.
type Tool struct{ Name, Bin, Module, Version, Toolchain, Tags string }

// ToolsDir is where built tools live: $ROUNDHOUSE_TOOLS, or a folder under
// the user cache dir, which survives fresh clones of the repository.
func ToolsDir() (string, error) {
	if d := os.Getenv("ROUNDHOUSE_TOOLS"); d != "" {
		return d, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache dir (set ROUNDHOUSE_TOOLS to a folder for built tools): %w", err)
	}
	return filepath.Join(c, "roundhouse", "tools"), nil
}

// Path is where the tool's binary is (or will be) installed.
func (t Tool) Path() (string, error) {
	d, err := ToolsDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, t.Name+"-"+t.Version, t.Name), nil
}

// Find returns the binary's path, or an error that says how to build it.
func (t Tool) Find() (string, error) {
	p, err := t.Path()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s %s is not built at %s: run `go tool task tools` first", t.Name, t.Version, p)
	}
	return p, nil
}

// Ensure builds the tool when it is missing. A cold build takes minutes.
func (t Tool) Ensure(ctx context.Context, log io.Writer) (string, error) {
	p, err := t.Path()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	fmt.Fprintf(log, "building %s %s into %s (first time only; several minutes)\n", t.Name, t.Version, filepath.Dir(p))
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	args := []string{"install"}
	if t.Tags != "" {
		args = append(args, "-tags", t.Tags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, t.Module+"@"+t.Version)...)
	cmd.Env = append(os.Environ(), "GOBIN="+filepath.Dir(p), "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0")
	if t.Toolchain != "" {
		cmd.Env = append(cmd.Env, "GOTOOLCHAIN="+t.Toolchain)
	}
	cmd.Dir = os.TempDir() // outside this module, so its go.mod is not consulted
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w", t.Module, t.Version, err)
	}
	if t.Bin != "" && t.Bin != t.Name {
		if err := os.Rename(filepath.Join(filepath.Dir(p), t.Bin), p); err != nil {
			return "", fmt.Errorf("name %s's binary: %w", t.Name, err)
		}
	}
	return p, nil
}

// TemporalArgs is the dev server command line on loopback: a database file
// keeps history across restarts; uiPort 0 runs it headless.
func TemporalArgs(bin, dbFile string, port, uiPort int) []string {
	return TemporalArgsOn(bin, "127.0.0.1", dbFile, port, uiPort)
}

// TemporalArgsOn is TemporalArgs listening on ip (the test rig's hub
// address instead of loopback).
func TemporalArgsOn(bin, ip, dbFile string, port, uiPort int) []string {
	args := []string{bin, "server", "start-dev", "--ip", ip, "--port", strconv.Itoa(port),
		"--db-filename", dbFile, "--log-level", "warn",
		// Task priority (episodes of a collection before a validation's in
		// one queue) needs the priority matcher: the default from server
		// v1.32 on, off in the v1.29 this CLI embeds.
		"--dynamic-config-value", "matching.useNewMatcher=true"}
	if uiPort > 0 {
		args = append(args, "--ui-port", strconv.Itoa(uiPort))
	} else {
		args = append(args, "--headless")
	}
	return args
}

// VersitygwArgs serves dir over S3 on loopback; credentials come from env.
func VersitygwArgs(bin, dir string, port int) []string {
	return VersitygwArgsOn(bin, "127.0.0.1", dir, port)
}

// VersitygwArgsOn is VersitygwArgs listening on ip.
func VersitygwArgsOn(bin, ip, dir string, port int) []string {
	return []string{bin, "--port", net.JoinHostPort(ip, strconv.Itoa(port)), "posix", dir}
}

// VersitygwEnv sets the root credentials versitygw accepts.
func VersitygwEnv(access, secret string) []string {
	return []string{"ROOT_ACCESS_KEY=" + access, "ROOT_SECRET_KEY=" + secret}
}
