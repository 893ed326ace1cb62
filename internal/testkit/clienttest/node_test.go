package clienttest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// nodeDir holds package.json, package-lock.json and the scripts.
const nodeDir = "node"

// fixCmd is what a developer runs by hand when the automatic install fails.
const fixCmd = "cd internal/testkit/clienttest/node && npm ci --no-audit --no-fund"

const (
	npmCITimeout   = 5 * time.Minute
	nodeRunTimeout = 2 * time.Minute
)

var (
	nodeOnce sync.Once
	nodeErr  error
)

// ensureNode makes node/node_modules match package-lock.json, running
// npm ci when it is missing or was installed from another lockfile. It skips
// only under -short: when Node.js is absent the test fails and says how to
// install it, so that a CI machine without Node is noticed.
func ensureNode(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("drives the proxy with Node.js packages (npm ci); skipped under -short")
	}
	nodeOnce.Do(func() { nodeErr = installNode() })
	if nodeErr != nil {
		t.Fatal(nodeErr)
	}
}

func installNode() error {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not on PATH: install Node.js 20 or newer and npm, then run `%s`", tool, fixCmd)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := exec.CommandContext(ctx, "node", "--version").Output()
	if err != nil {
		return fmt.Errorf("node --version: %v", err)
	}
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(strings.TrimSpace(string(v)), "v"), ".", 2)[0])
	if major < 20 {
		return fmt.Errorf("node %s is too old: the pinned packages need Node.js 20 or newer", strings.TrimSpace(string(v)))
	}

	want, err := lockStamp()
	if err != nil {
		return err
	}
	stamp := filepath.Join(nodeDir, "node_modules", ".roundhouse-lock-sha256")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return nil
	}
	ctx, cancel = context.WithTimeout(context.Background(), npmCITimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = nodeDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (timed out after %s)", err, npmCITimeout)
		}
		return fmt.Errorf("npm ci in %s failed: %v\n%s\nfix the cause above, then run `%s`", nodeDir, err, out, fixCmd)
	}
	// npm ci recreated node_modules, so the stamp is written after it.
	return os.WriteFile(stamp, []byte(want), 0o644)
}

// lockStamp identifies the dependency declaration node_modules was built from.
func lockStamp() (string, error) {
	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(nodeDir, f))
		if err != nil {
			return "", fmt.Errorf("read %s: %w", f, err)
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// runNode runs a script from node/ and returns its standard output.
func runNode(t *testing.T, script string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), nodeRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	cmd.Dir = nodeDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (timed out after %s)", err, nodeRunTimeout)
		}
		t.Fatalf("node %s: %v\nstderr:\n%s", script, err, stderr.String())
	}
	return stdout.Bytes()
}
