package workflows

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Clients start workflows by the type names in package api, so that they
// need not link the bodies; Temporal registers a body under its function's
// name (the package does not count), which must be that name.
func TestRegisteredNames(t *testing.T) {
	for want, fn := range map[string]any{api.TrainWorkflow: Train, api.EvalWorkflow: Eval, api.SweepWorkflow: Sweep, api.EpisodesWorkflow: Episodes, api.FleetWorkflow: Fleet} {
		full := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
		if got := full[strings.LastIndex(full, ".")+1:]; got != want {
			t.Errorf("workflow %s is registered as %q, package api names it %q", full, got, want)
		}
	}
}
