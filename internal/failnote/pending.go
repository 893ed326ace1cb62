package failnote

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Bounds of one Pending walk: a run's workflow, its episode chunks (or a
// sweep's evaluations and theirs), each described once.
const (
	maxDepth        = 3
	maxWorkflows    = 64
	describeTimeout = 10 * time.Second
)

// Pending lists the activities of workflow id, and of its running child
// workflows, whose last attempt failed and which Temporal has not given up
// on: the server's own account, so timeouts and lost workers show too.
func Pending(ctx context.Context, c client.Client, id string) ([]schemas.ActivityFailure, error) {
	var out []schemas.ActivityFailure
	seen := 0
	var walk func(id string, depth int) error
	walk = func(id string, depth int) error {
		if seen >= maxWorkflows {
			return nil
		}
		seen++
		dctx, cancel := context.WithTimeout(ctx, describeTimeout)
		d, err := c.DescribeWorkflowExecution(dctx, id, "")
		cancel()
		if err != nil {
			return fmt.Errorf("describe %s: %w", id, err)
		}
		for _, a := range d.GetPendingActivities() {
			lf := a.GetLastFailure()
			if lf == nil {
				continue
			}
			f := schemas.ActivityFailure{Workflow: id, Activity: a.GetActivityType().GetName(), ActivityID: a.GetActivityId(),
				Attempt: a.GetAttempt(), Cause: Cause(lf.GetMessage())}
			// The server counts the retry as soon as it schedules it, so the
			// last failure belongs to the attempt before.
			if f.Attempt > 1 {
				f.Attempt--
			}
			if t := a.GetLastAttemptCompleteTime(); t != nil {
				f.FailedAt = t.AsTime()
			}
			switch t := a.GetNextAttemptScheduleTime(); {
			case t != nil && t.AsTime().Unix() > 0:
				f.NextRetry = t.AsTime()
			case a.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED && a.GetLastStartedTime() != nil:
				f.NextRetry = a.GetLastStartedTime().AsTime() // the retry is running
			}
			out = append(out, f)
		}
		if depth >= maxDepth {
			return nil
		}
		for _, ch := range d.GetPendingChildren() {
			// A child that ended between the two calls has nothing pending.
			_ = walk(ch.GetWorkflowId(), depth+1)
		}
		return nil
	}
	if err := walk(id, 1); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].FailedAt.Before(out[j].FailedAt) })
	return out, nil
}

// Printer prints each failed attempt once, however often it is listed.
type Printer struct {
	seen map[string]bool
	// Max bounds the lines of one Print: a broken model server fails every
	// episode at once, and one line says what the next twenty would.
	Max int
}

// Print writes the failures not printed before and returns how many lines
// it wrote.
func (p *Printer) Print(out io.Writer, fs []schemas.ActivityFailure, now time.Time) int {
	if p.seen == nil {
		p.seen = map[string]bool{}
	}
	max := p.Max
	if max <= 0 {
		max = 3
	}
	var fresh []schemas.ActivityFailure
	for _, f := range fs {
		k := fmt.Sprintf("%s/%s/%d", f.Workflow, f.ActivityID, f.Attempt)
		if !p.seen[k] {
			p.seen[k] = true
			fresh = append(fresh, f)
		}
	}
	n := 0
	for i, f := range fresh {
		if i == max {
			fmt.Fprintf(out, "! … and %d more failed attempts (starter status --run shows the latest)\n", len(fresh)-max)
			n++
			break
		}
		fmt.Fprintln(out, Line(f, now))
		n++
	}
	return n
}
