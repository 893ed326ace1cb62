package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// slotSpan is how long one RunEpisode activity held a rollout slot, in
// Unix ms: its last attempt's ActivityTaskStarted event to the event that
// closed it. A slot is busy for all of it (the host's set-up, the episode
// program, the uploads), idle between two of them (Temporal's dispatch,
// waiting for work).
type slotSpan struct {
	scheduled, start, end int64
	attempt               int32
	workflow              string // the Episodes workflow's id
}

// activitySpans reads the spans of the activities of type name from one
// workflow's history events. An activity still open at the history's end
// has no span.
func activitySpans(events []*historypb.HistoryEvent, name string) []slotSpan {
	scheduled := map[int64]int64{} // scheduled event id of type name → its time
	started := map[int64]slotSpan{}
	var out []slotSpan
	closeSpan := func(sched, start int64, at *timestamppb.Timestamp) {
		if _, ok := scheduled[sched]; !ok {
			return
		}
		if s, ok := started[start]; ok {
			s.end = at.AsTime().UnixMilli()
			out = append(out, s)
		}
	}
	for _, e := range events {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == name {
				scheduled[e.GetEventId()] = e.GetEventTime().AsTime().UnixMilli()
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			a := e.GetActivityTaskStartedEventAttributes()
			if at, ok := scheduled[a.GetScheduledEventId()]; ok {
				started[e.GetEventId()] = slotSpan{scheduled: at, start: e.GetEventTime().AsTime().UnixMilli(), attempt: a.GetAttempt()}
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			a := e.GetActivityTaskCompletedEventAttributes()
			closeSpan(a.GetScheduledEventId(), a.GetStartedEventId(), e.GetEventTime())
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
			a := e.GetActivityTaskFailedEventAttributes()
			closeSpan(a.GetScheduledEventId(), a.GetStartedEventId(), e.GetEventTime())
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
			a := e.GetActivityTaskTimedOutEventAttributes()
			closeSpan(a.GetScheduledEventId(), a.GetStartedEventId(), e.GetEventTime())
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
			a := e.GetActivityTaskCanceledEventAttributes()
			closeSpan(a.GetScheduledEventId(), a.GetStartedEventId(), e.GetEventTime())
		}
	}
	return out
}

// episodeSlotSpans lists run's Episodes child workflows through
// visibility and reads the RunEpisode spans from their histories.
func episodeSlotSpans(ctx context.Context, c client.Client, run string) ([]slotSpan, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	q := fmt.Sprintf("%s = '%s' AND %s = 'episodes'", api.RunAttr.GetName(), run, api.KindAttr.GetName())
	var spans []slotSpan
	var token []byte
	for page := 0; page < 1000; page++ {
		res, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list the Episodes workflows of run %s: %w", run, err)
		}
		for _, w := range res.GetExecutions() {
			var events []*historypb.HistoryEvent
			it := c.GetWorkflowHistory(ctx, w.GetExecution().GetWorkflowId(), w.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				e, err := it.Next()
				if err != nil {
					return nil, fmt.Errorf("history of %s: %w", w.GetExecution().GetWorkflowId(), err)
				}
				events = append(events, e)
			}
			for _, s := range activitySpans(events, "RunEpisode") {
				s.workflow = w.GetExecution().GetWorkflowId()
				spans = append(spans, s)
			}
		}
		if token = res.GetNextPageToken(); len(token) == 0 {
			return spans, nil
		}
	}
	return nil, fmt.Errorf("list the Episodes workflows of run %s: more than 1000 pages", run)
}

// idleSplit splits the idle slot time of [from, to] (slots slots, in
// ms) by whether an episode waited in a queue meanwhile: waiting is
// dispatch's and the fleet's share (work there, no slot taking it),
// none the share with nothing to run.
func idleSplit(spans []slotSpan, slots int, from, to int64) (waiting, none int64) {
	type step struct {
		at              int64
		running, queued int
	}
	var steps []step
	for _, s := range spans {
		steps = append(steps, step{s.scheduled, 0, 1}, step{s.start, 1, -1}, step{s.end, -1, 0})
	}
	slices.SortStableFunc(steps, func(x, y step) int { return cmp.Compare(x.at, y.at) })
	running, queued := 0, 0
	prev := from
	for _, st := range steps {
		if at := min(max(st.at, from), to); at > prev {
			idle := int64(max(0, slots-running)) * (at - prev)
			if queued > 0 {
				waiting += idle
			} else {
				none += idle
			}
			prev = at
		}
		running += st.running
		queued += st.queued
	}
	if to > prev {
		none += int64(max(0, slots-running)) * (to - prev)
	}
	return waiting, none
}

func TestIdleSplit(t *testing.T) {
	// Two slots over [0, 100]: one episode queued at 0 starts at 10 and
	// ends at 60; another queued at 20 starts at 30 and ends at 50.
	spans := []slotSpan{{0, 10, 60, 1, ""}, {20, 30, 50, 1, ""}}
	waiting, none := idleSplit(spans, 2, 0, 100)
	// [0,10): 2 idle, one queued → 20 waiting; [10,20): 1 idle, none
	// queued → 10; [20,30): 1 idle, one queued → 10 waiting; [30,50): 0;
	// [50,60): 1 idle → 10; [60,100]: 2 idle → 80.
	if waiting != 30 || none != 100 {
		t.Errorf("idle split = %d waiting, %d none; want 30, 100", waiting, none)
	}
}

func TestActivitySpans(t *testing.T) {
	at := func(ms int64) *timestamppb.Timestamp { return timestamppb.New(time.UnixMilli(ms)) }
	ev := func(id int64, ms int64, typ enumspb.EventType) *historypb.HistoryEvent {
		return &historypb.HistoryEvent{EventId: id, EventTime: at(ms), EventType: typ}
	}
	sched := func(id, ms int64, name string) *historypb.HistoryEvent {
		e := ev(id, ms, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
		e.Attributes = &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{
			ActivityType: &commonpb.ActivityType{Name: name}}}
		return e
	}
	start := func(id, ms, s int64, attempt int32) *historypb.HistoryEvent {
		e := ev(id, ms, enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED)
		e.Attributes = &historypb.HistoryEvent_ActivityTaskStartedEventAttributes{ActivityTaskStartedEventAttributes: &historypb.ActivityTaskStartedEventAttributes{
			ScheduledEventId: s, Attempt: attempt}}
		return e
	}
	done := func(id, ms, s, st int64) *historypb.HistoryEvent {
		e := ev(id, ms, enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
		e.Attributes = &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{
			ScheduledEventId: s, StartedEventId: st}}
		return e
	}
	failed := func(id, ms, s, st int64) *historypb.HistoryEvent {
		e := ev(id, ms, enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED)
		e.Attributes = &historypb.HistoryEvent_ActivityTaskFailedEventAttributes{ActivityTaskFailedEventAttributes: &historypb.ActivityTaskFailedEventAttributes{
			ScheduledEventId: s, StartedEventId: st}}
		return e
	}
	events := []*historypb.HistoryEvent{
		sched(5, 1000, "RunEpisode"),
		sched(6, 1000, "RunEpisode"),
		sched(7, 1000, "PublishTries"), // another type: no span
		sched(8, 1000, "RunEpisode"),   // never started
		start(9, 1100, 5, 1),
		start(10, 1200, 7, 1),
		start(11, 3500, 6, 3), // retried: the last attempt's start
		done(12, 2300, 5, 9),
		done(13, 2400, 7, 10),
		failed(14, 4000, 6, 11),
	}
	got := activitySpans(events, "RunEpisode")
	want := []slotSpan{{1000, 1100, 2300, 1, ""}, {1000, 3500, 4000, 3, ""}}
	if len(got) != len(want) {
		t.Fatalf("spans %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("span %d = %v, want %v", i, got[i], want[i])
		}
	}
}
