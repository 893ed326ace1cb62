package workflows

import (
	"fmt"
	"sort"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// failures keeps the failed attempts the worker interceptor signals
// (internal/failnote) for activities still being retried, so the workflow's
// current details say why a phase is not moving. Receiving a signal issues
// no command, so histories recorded before this replay unchanged.
type failures struct {
	byID map[string]schemas.ActivityFailure
}

// watchFailures starts receiving failure signals; onChange runs after each.
func watchFailures(ctx workflow.Context, onChange func()) *failures {
	f := &failures{byID: map[string]schemas.ActivityFailure{}}
	ch := workflow.GetSignalChannel(ctx, api.ActivityFailureSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var n schemas.ActivityFailure
			if !ch.Receive(ctx, &n) {
				return
			}
			if n.Recovered {
				// Only the attempt that failed last is shown; a success of a
				// later attempt ends it.
				if old, ok := f.byID[n.ActivityID]; ok && old.Attempt < n.Attempt {
					delete(f.byID, n.ActivityID)
				}
			} else {
				f.byID[n.ActivityID] = n
			}
			onChange()
		}
	})
	return f
}

// list is the failures in activity id order (deterministic).
func (f *failures) list() []schemas.ActivityFailure {
	if f == nil {
		return nil
	}
	ids := make([]string, 0, len(f.byID))
	for id := range f.byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]schemas.ActivityFailure, 0, len(ids))
	for _, id := range ids {
		out = append(out, f.byID[id])
	}
	return out
}

// maxFailureRows bounds the table: twenty episodes failing alike say no more
// than five.
const maxFailureRows = 5

// markdown is the failures as a table for the current details, or "".
func (f *failures) markdown() string {
	fs := f.list()
	if len(fs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| failing activity | attempt | cause | next try (UTC) |\n|---|---|---|---|\n")
	for i, x := range fs {
		if i == maxFailureRows {
			fmt.Fprintf(&b, "| … %d more | | | |\n", len(fs)-maxFailureRows)
			break
		}
		next := "not retried"
		if !x.NextRetry.IsZero() {
			next = x.NextRetry.UTC().Format("15:04:05")
		}
		what := x.Activity + " #" + x.ActivityID
		if x.Label != "" {
			what = x.Activity + " " + x.Label
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s |\n", cell(what), x.Attempt, cell(x.Cause), next)
	}
	return b.String() + "\n"
}

// cell keeps a cause from breaking the table.
func cell(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s)
}
