package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
)

// Sweeps' schedules: one Temporal Schedule per sweep starts its Sweep
// workflows. The spec's errors name the starter's flags (--every,
// --cron), the only way a schedule is made.

// scheduleTimeout bounds each call to the schedule client.
const scheduleTimeout = 15 * time.Second

// ErrNoSweep is wrapped by the errors of a sweep whose schedule does not exist.
var ErrNoSweep = errors.New("no such sweep")

// ErrSweepExists is wrapped by CreateSweep's error when the schedule exists.
var ErrSweepExists = errors.New("sweep exists")

// SweepSpec checks --every or --cron (exactly one) and returns the
// schedule's spec and how to say it, without contacting any server.
func SweepSpec(every, cronExpr string) (client.ScheduleSpec, string, error) {
	var spec client.ScheduleSpec
	switch {
	case every != "" && cronExpr != "":
		return spec, "", errors.New(`--every and --cron both given: choose one, e.g. --every 6h or --cron "0 3 * * *"`)
	case every == "" && cronExpr == "":
		return spec, "", errors.New(`--every or --cron is required: e.g. --every 6h or --cron "0 3 * * *"`)
	case every != "":
		d, err := time.ParseDuration(every)
		if err != nil {
			return spec, "", fmt.Errorf("--every %q is not a duration: write it like 6h, 90m or 24h (no d unit)", every)
		}
		if d < time.Minute {
			return spec, "", fmt.Errorf("--every %s is shorter than a minute: sweeps evaluate whole splits, give e.g. --every 1h", every)
		}
		spec.Intervals = []client.ScheduleIntervalSpec{{Every: d}}
		return spec, "every " + every, nil
	}
	if err := checkCron(cronExpr); err != nil {
		return spec, "", err
	}
	spec.CronExpressions = []string{cronExpr}
	return spec, "cron " + cronExpr, nil
}

// cronParser is the classic five fields, with the descriptors below and
// an optional CRON_TZ= prefix: the part of Temporal's cron syntax whose
// meaning the two agree on.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// checkCron validates a --cron expression before Temporal sees it.
func checkCron(expr string) error {
	spec := strings.TrimSpace(expr)
	if tz, rest, ok := strings.Cut(spec, " "); ok && (strings.HasPrefix(tz, "CRON_TZ=") || strings.HasPrefix(tz, "TZ=")) {
		spec = strings.TrimSpace(rest)
	}
	if strings.HasPrefix(spec, "@every") {
		return fmt.Errorf("--cron %q: use --every for intervals, e.g. --every 6h", expr)
	}
	if strings.HasPrefix(spec, "@") {
		switch spec {
		case "@yearly", "@monthly", "@weekly", "@daily", "@hourly":
		default:
			return fmt.Errorf("--cron %q: the shorthands are @yearly, @monthly, @weekly, @daily and @hourly", expr)
		}
	}
	if _, err := cronParser.Parse(expr); err != nil {
		return fmt.Errorf(`--cron %q: %v; write five fields (minute hour day-of-month month day-of-week), e.g. "0 3 * * *" for 03:00 daily`, expr, err)
	}
	return nil
}

// CreateSweep creates the schedule of sweep in.Name, which starts a Sweep
// workflow at the times of spec (said as when, e.g. "every 6h").
func CreateSweep(ctx context.Context, c client.Client, in SweepInput, spec client.ScheduleSpec, when string) (client.ScheduleHandle, error) {
	ctx, cancel := context.WithTimeout(ctx, scheduleTimeout)
	defer cancel()
	id := SweepScheduleID(in.Name)
	h, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:   id,
		Spec: spec,
		Action: &client.ScheduleWorkflowAction{
			ID: id, Workflow: SweepWorkflow, Args: []any{in}, TaskQueue: ControlQueue,
			StaticSummary:         fmt.Sprintf("sweep %s: new weights of %s, evaluated in run %s on %s", in.Name, in.Source, in.Run, in.InitKey),
			TypedSearchAttributes: temporal.NewSearchAttributes(KindAttr.ValueSet("sweep"), RunAttr.ValueSet(in.Run)),
		},
		// A sweep due while the last one runs would evaluate the same
		// weights twice: skip it.
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
		Memo:    map[string]any{SweepMemoSource: in.Source, SweepMemoRun: in.Run, SweepMemoWhen: when, SweepMemoInitKey: in.InitKey},
	})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return nil, fmt.Errorf("schedule %s: %w", id, ErrSweepExists)
	}
	return h, err // the caller says which schedule, on which server
}

// DescribeSweep describes sweep name's schedule; the error wraps
// ErrNoSweep when there is none.
func DescribeSweep(ctx context.Context, c client.Client, name string) (*client.ScheduleDescription, error) {
	ctx, cancel := context.WithTimeout(ctx, scheduleTimeout)
	defer cancel()
	id := SweepScheduleID(name)
	d, err := c.ScheduleClient().GetHandle(ctx, id).Describe(ctx)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil, fmt.Errorf("describe schedule %s: %w", id, ErrNoSweep)
	}
	if err != nil {
		return nil, fmt.Errorf("describe schedule %s: %w", id, err)
	}
	return d, nil
}

// PauseSweep pauses sweep name's schedule; a running sweep finishes.
func PauseSweep(ctx context.Context, c client.Client, name string) error {
	return onSweep(ctx, c, name, func(ctx context.Context, h client.ScheduleHandle) error {
		return h.Pause(ctx, client.SchedulePauseOptions{Note: "starter sweep pause"})
	})
}

// UnpauseSweep resumes sweep name's paused schedule.
func UnpauseSweep(ctx context.Context, c client.Client, name string) error {
	return onSweep(ctx, c, name, func(ctx context.Context, h client.ScheduleHandle) error {
		return h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: "starter sweep unpause"})
	})
}

// DeleteSweep deletes sweep name's schedule; a running sweep finishes.
func DeleteSweep(ctx context.Context, c client.Client, name string) error {
	return onSweep(ctx, c, name, func(ctx context.Context, h client.ScheduleHandle) error { return h.Delete(ctx) })
}

// onSweep finds sweep name's schedule, then does one thing with it.
func onSweep(ctx context.Context, c client.Client, name string, do func(context.Context, client.ScheduleHandle) error) error {
	if _, err := DescribeSweep(ctx, c, name); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, scheduleTimeout)
	defer cancel()
	return do(ctx, c.ScheduleClient().GetHandle(ctx, SweepScheduleID(name)))
}

// TriggerSweep starts sweep name now and returns the workflow it started,
// or nil when the schedule skipped it because a sweep was running.
func TriggerSweep(ctx context.Context, c client.Client, name string) (*client.ScheduleWorkflowExecution, error) {
	before, err := DescribeSweep(ctx, c, name)
	if err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, scheduleTimeout)
	defer cancel()
	if err := c.ScheduleClient().GetHandle(tctx, SweepScheduleID(name)).Trigger(tctx, client.ScheduleTriggerOptions{}); err != nil {
		return nil, fmt.Errorf("trigger sweep %s: %w", name, err)
	}
	// The schedule takes the action asynchronously: watch its counters to
	// learn whether it started a sweep or skipped one that would overlap.
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := DescribeSweep(ctx, c, name)
		if err != nil {
			return nil, err
		}
		if d.Info.NumActionsSkippedOverlap > before.Info.NumActionsSkippedOverlap {
			return nil, nil
		}
		if d.Info.NumActions > before.Info.NumActions && len(d.Info.RecentActions) > 0 {
			if started := d.Info.RecentActions[len(d.Info.RecentActions)-1].StartWorkflowResult; started != nil {
				return started, nil
			}
			return nil, fmt.Errorf("sweep %s: the schedule's last action started no workflow", name)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("sweep %s: triggered, but the schedule took no action within 30s (is it paused? `starter sweep list`)", name)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// SweepView is one sweep's schedule as `starter sweep list` shows it.
type SweepView struct {
	Name, When, Source, Run string
	Paused                  bool
	Last, Next              time.Time // zero when none
}

// ListSweeps lists the sweeps' schedules; dc decodes their memos.
func ListSweeps(ctx context.Context, c client.Client, dc converter.DataConverter) ([]SweepView, error) {
	ctx, cancel := context.WithTimeout(ctx, scheduleTimeout)
	defer cancel()
	it, err := c.ScheduleClient().List(ctx, client.ScheduleListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	var views []SweepView
	for it.HasNext() {
		s, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		name, ok := strings.CutPrefix(s.ID, "sweep-")
		if !ok || name == "" || s.WorkflowType.Name != SweepWorkflow {
			continue
		}
		v := SweepView{Name: name, Paused: s.Paused, When: memoString(dc, s.Memo, SweepMemoWhen),
			Source: memoString(dc, s.Memo, SweepMemoSource), Run: memoString(dc, s.Memo, SweepMemoRun)}
		if n := len(s.RecentActions); n > 0 {
			v.Last = s.RecentActions[n-1].ActualTime
		}
		if len(s.NextActionTimes) > 0 {
			v.Next = s.NextActionTimes[0]
		}
		views = append(views, v)
	}
	return views, nil
}

// memoString reads a string the schedule's memo holds ("-" when absent).
func memoString(dc converter.DataConverter, m *commonpb.Memo, key string) string {
	if m == nil || m.Fields[key] == nil {
		return "-"
	}
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	var v string
	if err := dc.FromPayload(m.Fields[key], &v); err != nil {
		return "-"
	}
	return v
}
