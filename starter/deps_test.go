package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The starter is the CLI: it reaches workflows through their contract
// (workflows/api) and does its work through library packages, so it links
// neither the activities nor the workflow bodies.
func TestStarterLinksNoActivitiesOrWorkflowBodies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const mod = "github.com/roundhouse-rl/roundhouse/"
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == mod+"activities" || pkg == mod+"workflows" || strings.HasPrefix(pkg, mod+"activities/") {
			t.Errorf("starter depends on %s: move what it needs into a library package (internal/…, schemas, workflows/api)", pkg)
		}
	}
}
