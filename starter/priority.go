package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/roundhouse-rl/roundhouse/internal/fleet"
)

// priorityFlag adds --priority: where the episodes stand on a shared
// fleet of rollout hosts (docs/design.md §10).
func priorityFlag(fl *pflag.FlagSet, p *int, def int, what string) {
	fl.IntVar(p, "priority", def, fmt.Sprintf("order of %s on a shared rollout fleet, 1 (served first) to %d; training defaults to %d, evaluations and sweeps to %d", what, fleet.MaxPriority, fleet.TrainPriority, fleet.EvalPriority))
}

// checkPriority refuses a priority out of range; 0 stands for the
// default (flag structs built in code, commands without the flag).
func checkPriority(p int) error {
	if p < 0 || p > fleet.MaxPriority {
		return fmt.Errorf("--priority %d: give 1 (served first) to %d", p, fleet.MaxPriority)
	}
	return nil
}
