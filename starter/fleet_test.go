package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Status shows each host's assignment, loaded weights and figures — all
// runs', or one run's with --run — and the weights episodes wait for.
func TestRenderFleet(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	st := api.FleetStatus{
		State: fleet.State{
			Hosts: map[string]*fleet.Host{"h1": {Name: "h1", Slots: 4, Servers: 1, Loaded: []fleet.Server{{Weights: "tr/r1", Busy: 3}}}},
			Demands: map[string]fleet.Demand{
				"tr-1": {Key: "tr-1", Run: "tr", Weights: "tr/r1", Priority: 1, Episodes: 64},
				"sw-1": {Key: "sw-1", Run: "sweep-x", Weights: "sweep-x/c3", Priority: 3, Episodes: 35},
			},
			Assign:  map[string][]string{"h1": {"tr/r1"}},
			Waiting: map[string]time.Time{"sweep-x/c3": now.Add(-42 * time.Second)},
		},
		Stats: map[string][]schemas.SlotStats{"h1": {
			{Run: "sweep-x", Loads: 2, LoadTime: 40 * time.Second, Idle: 3 * time.Second, Waits: 4},
			{Run: "tr", Loads: 3, Failed: 1, LoadTime: 61 * time.Second, Idle: 9 * time.Second, Waits: 1, Waiting: 2},
		}},
	}
	var all bytes.Buffer
	renderFleet(&all, st, "", now)
	out := all.String()
	for _, want := range []string{"rollout fleet: 1 hosts", "tr/r1 (3)", "   5+1✗", "1m41s", "tr/r1 ", "sweep-x/c3", "42s"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "tr/r1      ") > strings.Index(out, "sweep-x/c3") {
		t.Errorf("training's weights are not listed first:\n%s", out)
	}
	var one bytes.Buffer
	renderFleet(&one, st, "tr", now)
	out = one.String()
	if !strings.Contains(out, "   3+1✗") || !strings.Contains(out, "1m1s") || strings.Contains(out, "sweep-x/c3") {
		t.Errorf("run tr's view:\n%s", out)
	}
}
