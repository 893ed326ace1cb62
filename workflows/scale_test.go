package workflows_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"google.golang.org/protobuf/proto"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// Scale: whole rounds of stand-in episodes that finish at once
// (harnesses/minimal/instant.yaml) against the real Temporal dev server and
// S3 server, one worker process serving every queue. What is left of the
// wall time is orchestration: Temporal, the episode activity around the
// subprocess, and S3.
//
//	go test ./workflows/ -run XXX -bench Scale -benchtime 1x -timeout 60m
//
// TestScaleChunks is the quick form that runs in CI.

// histStats is what a workflow's history says about it.
type histStats struct {
	ID          string
	Events      int64 // DescribeWorkflowExecution: HistoryLength
	Bytes       int64 // and HistorySizeBytes
	Start       time.Time
	Close       time.Time
	Activities  int                      // activities that completed
	Tries       int                      // started tries, retries included
	Busy        time.Duration            // Σ started → closed of each activity's last try (a retried one's earlier tries leave no events)
	PeakPending int                      // most activities scheduled and not yet closed
	PeakKids    int                      // most child workflows initiated and not yet closed
	ByType      map[string]time.Duration // scheduled → closed, per activity type
	Retried     []string                 // why a try was retried: the next try's last failure
	// Biggest is the largest event (its encoded size: the payloads it
	// carries and little else), against the server's 2 MB payload limit.
	Biggest     int
	BiggestType string
}

// scaleResult is one measured round.
type scaleResult struct {
	Groups, Attempts, Slots int
	Episodes                int
	Parent                  histStats
	Children                []histStats
	Client                  time.Duration // starter started → result received
	Summary                 schemas.RoundSummary
	// Rows are every episode row of the round, read raw from each object of
	// the partition (ReadTable would hide a duplicate); Objects counts those.
	Rows    []schemas.Episode
	Objects []string
	// PGBytes is what the round added to PostgreSQL's two databases, on
	// the production-shaped Temporal (0 on the dev server).
	PGBytes int64
}

// Collect is the collection phase: first chunk started → last chunk closed.
func (r scaleResult) Collect() time.Duration {
	first, last := r.Children[0].Start, r.Children[0].Close
	for _, c := range r.Children[1:] {
		if c.Start.Before(first) {
			first = c.Start
		}
		if c.Close.After(last) {
			last = c.Close
		}
	}
	return last.Sub(first)
}

// Busy is the episodes' own time: Σ over episode activities of started →
// completed, as the Temporal server recorded it.
func (r scaleResult) Busy() time.Duration {
	var d time.Duration
	for _, c := range r.Children {
		d += c.Busy
	}
	return d
}

// Overhead is orchestration wall time per episode: what collection took
// beyond the episodes' own time spread over the slots, per episode,
// (Collect − Busy/Slots) / Episodes. Zero would mean every slot ran an
// episode every instant of the phase.
func (r scaleResult) Overhead() time.Duration {
	return (r.Collect() - r.Busy()/time.Duration(r.Slots)) / time.Duration(r.Episodes)
}

// Largest is the child with the largest history.
func (r scaleResult) Largest() histStats {
	best := r.Children[0]
	for _, c := range r.Children[1:] {
		if c.Bytes > best.Bytes {
			best = c
		}
	}
	return best
}

// runScaleRound starts a fresh stack and one worker with the given slots,
// runs a 1-round run of groups × attempts instant episodes with a pool
// report (so no validation runs: the round is its collection) and reads
// back the histories of the Train workflow and of every Episodes chunk.
func runScaleRound(tb testing.TB, run string, groups, attempts, slots int) scaleResult {
	tb.Helper()
	stack := itest.Start(tb)
	bins := itest.Binaries(tb)
	stack.StartWorker(tb, bins, "main", "--slots", strconv.Itoa(slots))
	return runScaleRoundOn(tb, stack, bins, run, groups, attempts, slots)
}

// runScaleRoundOnCluster is runScaleRound on the production-shaped
// Temporal (PostgreSQL, four services, mTLS), with the growth of
// PostgreSQL's databases over the round.
func runScaleRoundOnCluster(tb testing.TB, run string, groups, attempts, slots int) scaleResult {
	tb.Helper()
	stack, c := itest.StartCluster(tb, "scale")
	bins := itest.Binaries(tb)
	stack.StartWorker(tb, bins, "main", "--slots", strconv.Itoa(slots))
	before := pgBytes(tb, c)
	r := runScaleRoundOn(tb, stack, bins, run, groups, attempts, slots)
	r.PGBytes = pgBytes(tb, c) - before
	return r
}

// sqlRunner is what pgBytes needs of the production-shaped cluster.
type sqlRunner interface {
	SQL(ctx context.Context, db, query string) (string, error)
}

// pgBytes is the size of the production-shaped Temporal's two databases.
func pgBytes(tb testing.TB, c sqlRunner) int64 {
	tb.Helper()
	out, err := c.SQL(context.Background(), "temporal", "SELECT pg_database_size('temporal') + pg_database_size('temporal_visibility')")
	if err != nil {
		tb.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		tb.Fatalf("database size %q: %v", out, err)
	}
	return n
}

// chunkHistories reads the histories of parent's Episodes chunks of a
// phase. Chunks are numbered from 0; the first id that does not exist
// ends them.
func chunkHistories(ctx context.Context, tb testing.TB, c client.Client, parent string, round int32, phase string) []histStats {
	tb.Helper()
	var out []histStats
	for k := 0; ; k++ {
		cid := api.ChildID(parent, round, phase, k)
		if _, err := c.DescribeWorkflowExecution(ctx, cid, ""); err != nil {
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				return out
			}
			tb.Fatal(err)
		}
		h, err := scaleHistory(ctx, c, cid)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, h)
	}
}

// runScaleRoundOn is runScaleRound on servers and workers that already
// run (slots: all rollout workers' slots together).
func runScaleRoundOn(tb testing.TB, stack itest.Stack, bins, run string, groups, attempts, slots int) scaleResult {
	tb.Helper()
	root := itest.Root(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()

	// Every task at 2/5, inside the pool band: the round collects on all.
	// Hand-written, so it has no digests: --pool-report-any-weights.
	rep := schemas.Report{Tag: "scale-pool"}
	for id := range int32(6) {
		rep.Tasks = append(rep.Tasks, schemas.TaskResult{Task: id, Episodes: 5, Valid: 5, Successes: 2, SuccessRate: 0.4})
	}
	pool := filepath.Join(stack.Dir, "pool-report.json")
	b, _ := json.Marshal(rep)
	if err := os.WriteFile(pool, b, 0o644); err != nil {
		tb.Fatal(err)
	}

	c, err := connect.Temporal(ctx, stack.Endpoints, tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	started := time.Now()
	starter := stack.Starter(ctx, tb, bins, "train",
		"--config", filepath.Join(root, "harnesses/minimal/instant.yaml"), "--run", run,
		"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"), "--rounds", "1",
		"--groups", strconv.Itoa(groups), "--attempts", strconv.Itoa(attempts),
		"--pool-report", pool, "--pool-report-any-weights", "--var", "bin="+bins, "--detach")
	if out, err := starter.CombinedOutput(); err != nil {
		tb.Fatalf("starter: %v\n%s", err, out)
	}
	id := api.WorkflowID(run)
	var res api.TrainResult
	if err := c.GetWorkflow(ctx, id, "").Get(ctx, &res); err != nil {
		tb.Fatalf("workflow: %v", err)
	}
	r := scaleResult{Groups: groups, Attempts: attempts, Slots: slots, Episodes: groups * attempts, Client: time.Since(started)}
	if len(res.Summaries) != 1 || res.Summaries[0].Episodes != r.Episodes {
		tb.Fatalf("want one round of %d episodes, got %+v", r.Episodes, res.Summaries)
	}
	r.Summary = res.Summaries[0]
	if r.Parent, err = scaleHistory(ctx, c, id); err != nil {
		tb.Fatal(err)
	}
	r.Children = chunkHistories(ctx, tb, c, id, 1, schemas.PhaseTrain)
	if len(r.Children) == 0 {
		tb.Fatalf("no Episodes child workflow %s found", api.ChildID(id, 1, schemas.PhaseTrain, 0))
	}
	objs, err := stack.Store.List(ctx, schemas.Layout{Run: run}.EpisodesDir(1, schemas.PhaseTrain))
	if err != nil {
		tb.Fatal(err)
	}
	for _, o := range objs {
		rows, err := store.ReadParquet[schemas.Episode](ctx, stack.Store, o.Key)
		if err != nil {
			tb.Fatal(err)
		}
		r.Rows = append(r.Rows, rows...)
		r.Objects = append(r.Objects, o.Key)
	}
	return r
}

// scaleHistory describes a closed workflow and walks its history.
func scaleHistory(ctx context.Context, c client.Client, id string) (histStats, error) {
	h := histStats{ID: id, ByType: map[string]time.Duration{}}
	d, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return h, fmt.Errorf("describe %s: %w", id, err)
	}
	info := d.GetWorkflowExecutionInfo()
	h.Events, h.Bytes = info.GetHistoryLength(), info.GetHistorySizeBytes()
	h.Start, h.Close = info.GetStartTime().AsTime(), info.GetCloseTime().AsTime()
	if info.GetCloseTime() == nil {
		return h, fmt.Errorf("%s has not closed", id)
	}
	type act struct {
		name      string
		scheduled time.Time
	}
	acts := map[int64]act{}            // scheduled event id →
	startedAt := map[int64]time.Time{} // started event id → time
	pending, kids := 0, 0
	it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return h, fmt.Errorf("history of %s: %w", id, err)
		}
		at := e.GetEventTime().AsTime()
		if n := proto.Size(e); n > h.Biggest {
			h.Biggest, h.BiggestType = n, e.GetEventType().String()
		}
		closed := func(scheduled, started int64) {
			pending--
			a := acts[scheduled]
			h.ByType[a.name] += at.Sub(a.scheduled)
			if s, ok := startedAt[started]; ok {
				h.Busy += at.Sub(s)
			}
		}
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			acts[e.GetEventId()] = act{e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName(), at}
			pending++
			h.PeakPending = max(h.PeakPending, pending)
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			startedAt[e.GetEventId()] = at
			a := e.GetActivityTaskStartedEventAttributes()
			if acts[a.GetScheduledEventId()].name != episodeActivity {
				break // the chunk's Publish, after its episodes
			}
			h.Tries += int(a.GetAttempt())
			if a.GetAttempt() > 1 {
				h.Retried = append(h.Retried, fmt.Sprintf("%s try %d: %s", id, a.GetAttempt(), a.GetLastFailure().GetMessage()))
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			a := e.GetActivityTaskCompletedEventAttributes()
			closed(a.GetScheduledEventId(), a.GetStartedEventId())
			if acts[a.GetScheduledEventId()].name == episodeActivity {
				h.Activities++
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
			a := e.GetActivityTaskFailedEventAttributes()
			closed(a.GetScheduledEventId(), a.GetStartedEventId())
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
			a := e.GetActivityTaskTimedOutEventAttributes()
			closed(a.GetScheduledEventId(), a.GetStartedEventId())
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
			a := e.GetActivityTaskCanceledEventAttributes()
			closed(a.GetScheduledEventId(), a.GetStartedEventId())
		case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
			kids++
			h.PeakKids = max(h.PeakKids, kids)
		case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED,
			enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED,
			enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED,
			enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED,
			enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
			enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED:
			kids--
		}
	}
	return h, nil
}

// Temporal's default limits, per workflow execution.
const (
	limitEvents  = 51_200
	limitBytes   = 50 << 20
	limitPending = 2_000
)

// BenchmarkScaleRound measures a default-size round and one 31 times larger.
//
// ROUNDHOUSE_SCALE_TEMPORAL=dev,cluster runs each size on the dev server
// and on the production-shaped Temporal (as root) in the same run.
func BenchmarkScaleRound(b *testing.B) {
	servers := strings.Split(cmp.Or(os.Getenv("ROUNDHOUSE_SCALE_TEMPORAL"), "dev"), ",")
	for _, server := range servers {
		for _, tc := range []struct{ groups, attempts int }{{64, 6}, {2000, 6}} {
			b.Run(fmt.Sprintf("%s/%dx%d", server, tc.groups, tc.attempts), func(b *testing.B) {
				benchScaleRound(b, server, tc.groups, tc.attempts)
			})
		}
	}
}

func benchScaleRound(b *testing.B, server string, groups, attempts int) {
	const slots = 16
	var r scaleResult
	for i := range b.N {
		switch server {
		case "dev":
			r = runScaleRound(b, fmt.Sprintf("scale-%d-%d", groups, i), groups, attempts, slots)
		case "cluster":
			r = runScaleRoundOnCluster(b, fmt.Sprintf("scale-%d-%d", groups, i), groups, attempts, slots)
		default:
			b.Fatalf("ROUNDHOUSE_SCALE_TEMPORAL %q: use dev, cluster or both (dev,cluster)", server)
		}
	}
	if r.PGBytes > 0 {
		b.ReportMetric(float64(r.PGBytes)/1e6*1000/float64(r.Episodes), "pg-MB/1000ep")
	}
	par, big := r.Parent, r.Largest()
	b.ReportMetric(float64(r.Episodes), "episodes")
	b.ReportMetric(r.Parent.Close.Sub(r.Parent.Start).Seconds(), "round-s")
	b.ReportMetric(r.Collect().Seconds(), "collect-s")
	b.ReportMetric(float64(r.Collect().Microseconds())/1000/float64(r.Episodes), "wall-ms/ep")
	b.ReportMetric(float64(r.Busy().Microseconds())/1000/float64(r.Episodes), "activity-ms/ep")
	b.ReportMetric(float64(r.Overhead().Microseconds())/1000, "overhead-ms/ep")
	b.ReportMetric(par.ByType["BuildBatch"].Seconds(), "batch-s")
	b.ReportMetric(par.ByType["Compact"].Seconds(), "compact-s")
	b.ReportMetric(float64(len(r.Children)), "children")
	b.ReportMetric(float64(par.Events), "parent-events")
	b.ReportMetric(float64(par.Bytes), "parent-B")
	b.ReportMetric(float64(big.Events), "child-events")
	b.ReportMetric(float64(big.Bytes), "child-B")
	peak := 0
	for _, c := range r.Children {
		peak = max(peak, c.PeakPending)
	}
	b.ReportMetric(float64(peak), "pending-peak")
	b.ReportMetric(float64(par.PeakKids), "children-peak")
	var rowBusy time.Duration
	for _, e := range r.Rows {
		rowBusy += time.Duration(e.DurationMS) * time.Millisecond
	}
	b.Logf("episode rows: %d in %d objects; Σ duration_ms %v (%.1f ms each: subprocess, outcome, artifact upload)",
		len(r.Rows), len(r.Objects), rowBusy.Round(time.Millisecond), float64(rowBusy.Milliseconds())/float64(max(1, len(r.Rows))))
	b.Logf("%d×%d on %d slots: round %v (client %v), collection %v, episodes' own time %v (%.1f ms each), "+
		"overhead %v/episode; parent %d events %d B; largest child %s %d events %d B; pending peak %d; tries %d",
		groups, attempts, slots, r.Parent.Close.Sub(r.Parent.Start).Round(time.Millisecond), r.Client.Round(time.Millisecond),
		r.Collect().Round(time.Millisecond), r.Busy().Round(time.Millisecond),
		float64(r.Busy().Microseconds())/1000/float64(r.Episodes), r.Overhead(), par.Events, par.Bytes,
		big.ID, big.Events, big.Bytes, peak, scaleTries(r))
	b.Logf("of Temporal's limits: parent %.2f%% of events, %.2f%% of bytes; largest child %.2f%% of events, %.2f%% of bytes, %.0f%% of pending activities",
		100*float64(par.Events)/limitEvents, 100*float64(par.Bytes)/limitBytes,
		100*float64(big.Events)/limitEvents, 100*float64(big.Bytes)/limitBytes, 100*float64(peak)/limitPending)
	for _, c := range r.Children {
		for _, why := range c.Retried {
			b.Logf("retried: %s", why)
		}
	}
	for name, d := range par.ByType {
		b.Logf("parent activity %s: %v scheduled → closed", name, d.Round(time.Millisecond))
	}
}

func scaleTries(r scaleResult) int {
	n := 0
	for _, c := range r.Children {
		n += c.Tries
	}
	return n
}

// episodeActivity is the activity type of one episode.
const episodeActivity = "RunEpisode"

// TestScaleChunks runs a round just over one chunk of episodes: it must
// split into two Episodes children of ChunkSize and the rest, store every
// episode row exactly once, decide success per (init id, attempt) as the
// stand-in harness says, and keep each history within a bound proportional
// to its chunk, far below Temporal's limits.
func TestScaleChunks(t *testing.T) {
	// 2 attempts: the fewest episodes that still need two chunks.
	groups, attempts := api.ChunkSize/2+1, 2
	n := groups * attempts
	r := runScaleRound(t, "scale-chunks", groups, attempts, 16)

	wantChunks := (n + api.ChunkSize - 1) / api.ChunkSize
	if len(r.Children) != wantChunks {
		t.Fatalf("%d episodes ran in %d Episodes children, want %d of at most %d", n, len(r.Children), wantChunks, api.ChunkSize)
	}
	total := 0
	for k, c := range r.Children {
		want := min(api.ChunkSize, n-k*api.ChunkSize)
		if c.Activities != want || c.PeakPending != want {
			t.Errorf("child %s completed %d episode activities (peak %d pending), want %d", c.ID, c.Activities, c.PeakPending, want)
		}
		total += c.Activities
		// Per episode: scheduled, started, completed, and at most one
		// workflow task (3 events) per completion, plus slack for workflow
		// tasks that time out on a loaded machine; the input carries the
		// chunk's cells. Bounds grow with the chunk, not the round.
		if maxEv := int64(6*want + 100); c.Events > maxEv {
			t.Errorf("child %s history has %d events, want ≤ %d for %d episodes", c.ID, c.Events, maxEv, want)
		}
		if maxB := int64(4096*want + 64<<10); c.Bytes > maxB {
			t.Errorf("child %s history is %d B, want ≤ %d for %d episodes", c.ID, c.Bytes, maxB, want)
		}
	}
	if total != n {
		t.Errorf("children ran %d episodes, want %d", total, n)
	}
	// The parent holds a few events per chunk (and each chunk's input), not per episode.
	if maxEv := int64(10*wantChunks + 60); r.Parent.Events > maxEv {
		t.Errorf("train workflow history has %d events, want ≤ %d for %d chunks", r.Parent.Events, maxEv, wantChunks)
	}
	if maxB := int64(200<<10*wantChunks + 64<<10); r.Parent.Bytes > maxB {
		t.Errorf("train workflow history is %d B, want ≤ %d for %d chunks", r.Parent.Bytes, maxB, wantChunks)
	}
	if r.Parent.PeakKids != wantChunks {
		t.Errorf("train workflow ran at most %d chunks at once, want all %d", r.Parent.PeakKids, wantChunks)
	}

	// Every episode row exactly once, compacted into one part.
	if len(r.Objects) != 1 || !strings.HasSuffix(r.Objects[0], store.PartFile) {
		t.Errorf("episodes partition not compacted into one part: %v", r.Objects)
	}
	seen := map[string]int{}
	successes := map[int32]int{}
	for _, e := range r.Rows {
		seen[e.EpisodeID]++
		if want := (e.InitID+e.Attempt)%3 == 0; e.Success != want || !e.Valid || e.NumCalls != 0 {
			t.Errorf("episode %s (init %d attempt %d): success %v valid %v calls %d, want success %v, valid, no calls",
				e.EpisodeID, e.InitID, e.Attempt, e.Success, e.Valid, e.NumCalls, want)
		}
		if e.Success {
			successes[e.Group]++
		}
	}
	for g := range int32(groups) {
		for a := range int32(attempts) {
			if id := schemas.EpisodeID(1, schemas.PhaseTrain, g, a); seen[id] != 1 {
				t.Errorf("episode %s stored %d times, want once", id, seen[id])
			}
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct episode rows, want %d", len(seen), n)
	}
	res := r.Summary
	if res.Episodes != n || res.Valid != n || res.Samples != 0 || res.NewWeightsID != "w0" {
		t.Errorf("round summary: %d episodes, %d valid, %d samples, weights out %q; want %d, %d, 0, w0",
			res.Episodes, res.Valid, res.Samples, res.NewWeightsID, n, n)
	}
	withSignal := 0
	for _, k := range successes {
		if k > 0 && k < attempts {
			withSignal++
		}
	}
	if res.GroupsWithSignal != withSignal || withSignal == 0 || withSignal == groups {
		t.Errorf("summary counts %d groups with signal, the rows say %d of %d (want some, not all)", res.GroupsWithSignal, withSignal, groups)
	}
	t.Logf("%d episodes in %d chunks: collection %v, overhead %v/episode; parent %d events %d B, largest child %d events %d B",
		n, len(r.Children), r.Collect().Round(time.Millisecond), r.Overhead(), r.Parent.Events, r.Parent.Bytes, r.Largest().Events, r.Largest().Bytes)
}
