package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/fleet"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// renderFleet writes the rollout fleet's part of `starter status`: per
// host what it serves and what its model servers did (for one run when
// run is set), then the weights episodes wait for.
func renderFleet(w io.Writer, st api.FleetStatus, run string, now time.Time) {
	s := st.State
	names := slices.Sorted(maps.Keys(s.Hosts))
	if run == "" {
		fmt.Fprintf(w, "\nrollout fleet: %d hosts\n", len(names))
	} else {
		fmt.Fprintf(w, "\non the rollout fleet (model servers for run %s):\n", run)
	}
	if len(names) > 0 {
		fmt.Fprintf(w, "  %-16s %-28s %-34s %6s %9s %9s %7s %8s\n", "HOST", "ASSIGNED", "LOADED (BUSY)", "LOADS", "LOADING", "IDLE", "WAITED", "WAITING")
	}
	for _, n := range names {
		h := s.Hosts[n]
		var loaded []string
		for _, sv := range h.Loaded {
			loaded = append(loaded, fmt.Sprintf("%s (%d)", sv.Weights, sv.Busy))
		}
		var sum schemas.SlotStats
		for _, x := range st.Stats[n] {
			if run != "" && x.Run != run {
				continue
			}
			sum.Add(x)
		}
		loads := fmt.Sprint(sum.Loads)
		if sum.Failed > 0 {
			loads += fmt.Sprintf("+%d✗", sum.Failed)
		}
		fmt.Fprintf(w, "  %-16s %-28s %-34s %6s %9s %9s %7d %8d\n", n, dash(strings.Join(s.Assign[n], ", ")), dash(strings.Join(loaded, ", ")),
			loads, sum.LoadTime.Round(100*time.Millisecond), sum.Idle.Round(time.Second), sum.Waits, sum.Waiting)
	}
	by := s.ServedBy()
	keys := make([]string, 0, len(s.Demands))
	for k, d := range s.Demands {
		if run == "" || d.Run == run {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := s.Demands[keys[i]], s.Demands[keys[j]]
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		return keys[i] < keys[j]
	})
	if len(keys) == 0 {
		fmt.Fprintln(w, "  no episodes waiting for weights")
		return
	}
	fmt.Fprintf(w, "  %-32s %-10s %4s %8s %-20s %s\n", "WEIGHTS", "PRIORITY", "", "EPISODES", "SERVED BY", "UNSERVED FOR")
	for _, k := range keys {
		d := s.Demands[k]
		wait := "—"
		if at, ok := s.Waiting[d.Weights]; ok {
			wait = now.Sub(at).Round(time.Second).String()
		}
		note := ""
		switch {
		case s.Boost[d.Weights]:
			note = fmt.Sprintf("boosted: waited %s", fleet.DefaultPolicy.MaxWait)
		case !s.Parked[d.Weights].IsZero():
			note = "parked: nothing queued"
		}
		fmt.Fprintf(w, "  %-32s %-10d %4s %8d %-20s %s %s\n", d.Weights, d.Priority, "", d.Episodes, dash(strings.Join(by[d.Weights], ", ")), wait, note)
	}
}
