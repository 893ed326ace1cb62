package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	"golang.org/x/sync/errgroup"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/failnote"
	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

type statusFlags struct {
	run      string
	limit    int
	watch    bool
	interval time.Duration
}

func statusCmd(e *connect.Endpoints) *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List runs, or show one run's round, phase, episode progress and per-round table",
		Long: `List the train runs, newest first: status, round, phase, the current
phase's episodes, success so far, latest validation success and last error.
With --run, the detail of one run: the same, its running episode chunks and
its per-round table. Everything comes from Temporal (the progress query of
running runs, search attributes and results of finished ones), nothing from S3.
--watch redraws until Ctrl-C, or with --run until the run ends.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return status(cmd.Context(), cmd.OutOrStdout(), e, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.run, "run", "", "show this run in detail")
	fl.IntVar(&f.limit, "limit", 20, "list at most this many runs")
	fl.BoolVar(&f.watch, "watch", false, "redraw until Ctrl-C (with --run: until the run ends)")
	fl.DurationVar(&f.interval, "interval", 2*time.Second, "how often --watch redraws")
	return cmd
}

func status(ctx context.Context, out io.Writer, e *connect.Endpoints, f statusFlags) error {
	if f.run != "" && !runName.MatchString(f.run) {
		return fmt.Errorf("--run %q: give the name of a run (see `starter status`)", f.run)
	}
	if f.limit < 1 || f.limit > 1000 {
		return fmt.Errorf("--limit %d: give a number from 1 to 1000", f.limit)
	}
	if f.watch && f.interval < 100*time.Millisecond {
		return fmt.Errorf("--interval %s: give at least 100ms, e.g. --interval 2s", f.interval)
	}
	c, err := connect.Temporal(ctx, *e, quietLogger())
	if err != nil {
		return err
	}
	defer c.Close()
	draw := func(ctx context.Context) (string, bool, error) {
		var b bytes.Buffer
		if f.run != "" {
			v, err := getRun(ctx, c, e.Namespace, f.run)
			if err != nil {
				return "", false, err
			}
			renderDetail(&b, v)
			if err := fleetPart(ctx, &b, c, f.run); err != nil {
				return "", false, err
			}
			return b.String(), !v.running(), nil
		}
		views, err := listRuns(ctx, c, e.Namespace, f.limit)
		if err != nil {
			return "", false, err
		}
		renderList(&b, views)
		if err := fleetPart(ctx, &b, c, ""); err != nil {
			return "", false, err
		}
		return b.String(), false, nil
	}
	if !f.watch {
		text, _, err := draw(ctx)
		if err != nil {
			return err
		}
		_, err = io.WriteString(out, text)
		return err
	}
	// Ctrl-C ends the watch as a normal exit, not an error.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	return watch(ctx, out, isTerminal(out), f.interval, draw)
}

// watch redraws until ctx ends or draw says it is done. On a terminal it
// clears the screen first; elsewhere (a log, a pipe) frames follow each
// other. Only the first draw's error ends it: later ones are shown and
// retried, since a watch outlives a Temporal restart.
func watch(ctx context.Context, out io.Writer, tty bool, every time.Duration, draw func(context.Context) (string, bool, error)) error {
	for frame := 0; ; frame++ {
		text, done, err := draw(ctx)
		if err != nil {
			if frame == 0 || ctx.Err() != nil {
				return ignoreCanceled(ctx, err)
			}
			text = fmt.Sprintf("error: %s (retrying)\n", oneLine(err.Error(), 300))
		}
		head := fmt.Sprintf("%s, every %s (Ctrl-C ends)\n", time.Now().Format("15:04:05"), every)
		if tty {
			head = "\x1b[H\x1b[2J" + head
		} else if frame > 0 {
			head = "\n" + head
		}
		if _, err := io.WriteString(out, head+text); err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

func ignoreCanceled(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// runView is one run as status shows it.
type runView struct {
	Run    string
	Status string // running, stopping, completed, stopped, failed, canceled, terminated, timed out
	Round  int32
	Rounds int32 // 0 when unknown
	Phase  string
	// Episodes are the current phase's live counts; Live says they are known.
	Episodes api.Tally
	Live     bool
	Val      float64 // latest validation success, -1 when none
	// ValCounts are Val's counts when known, for its interval.
	ValCounts *schemas.TaskResult
	FinalVal  bool // Val is the final validation's
	Weights   string
	Err       string // the run's failure, or the last failure of an activity being retried
	Started   time.Time
	Children  []string
	// Summaries are the finished rounds.
	Summaries []schemas.RoundSummary
}

func (v runView) running() bool { return v.Status == "running" || v.Status == "stopping" }

// listQuery finds each run's current workflow execution: the rounds a
// run has left behind through continue-as-new are not runs of their own.
var listQuery = fmt.Sprintf(`%s = "train" AND ExecutionStatus != "ContinuedAsNew"`, api.KindAttr.GetName())

// listRuns lists the newest runs from the visibility store and adds what
// each one's status needs, a few runs at a time.
func listRuns(ctx context.Context, c client.Client, ns string, limit int) ([]runView, error) {
	lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := c.ListWorkflow(lctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: ns, PageSize: int32(limit), Query: listQuery})
	var bad *serviceerror.InvalidArgument
	if errors.As(err, &bad) && strings.Contains(err.Error(), api.KindAttr.GetName()) {
		// The search attributes are registered with the first run or control worker.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list runs on Temporal (namespace %s): %w", ns, err)
	}
	byID := map[string]*workflowpb.WorkflowExecutionInfo{}
	for _, x := range resp.Executions {
		id := x.GetExecution().GetWorkflowId()
		if old := byID[id]; old == nil || x.GetStartTime().AsTime().After(old.GetStartTime().AsTime()) {
			byID[id] = x
		}
	}
	infos := make([]*workflowpb.WorkflowExecutionInfo, 0, len(byID))
	for _, x := range byID {
		infos = append(infos, x)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].GetStartTime().AsTime().After(infos[j].GetStartTime().AsTime()) })
	if len(infos) > limit {
		infos = infos[:limit]
	}
	views := make([]runView, len(infos))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, x := range infos {
		g.Go(func() error {
			views[i] = describeRun(gctx, c, ns, x)
			return nil
		})
	}
	_ = g.Wait() // describeRun records its errors in the view
	return views, nil
}

// getRun is one run's current execution, described.
func getRun(ctx context.Context, c client.Client, ns, run string) (runView, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := c.DescribeWorkflowExecution(dctx, api.WorkflowID(run), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return runView{}, fmt.Errorf("run %s not found: see `starter status` for the runs", run)
	}
	if err != nil {
		return runView{}, fmt.Errorf("describe run %s (workflow %s): %w", run, api.WorkflowID(run), err)
	}
	return describeRun(ctx, c, ns, d.GetWorkflowExecutionInfo()), nil
}

// describeRun completes a view from Temporal: a running run answers the
// progress query; a closed one has its input and its close event.
func describeRun(ctx context.Context, c client.Client, ns string, info *workflowpb.WorkflowExecutionInfo) runView {
	v := viewFromInfo(info)
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		p, err := api.QueryProgress(ctx, c, v.Run)
		if err != nil {
			v.Err = fmt.Sprintf("no progress (is a control worker running?): %v", err)
		} else {
			applyProgress(&v, p)
		}
		// A round waiting on a failing trainer or model server says why.
		if fs, err := failnote.Pending(ctx, c, info.GetExecution().GetWorkflowId()); err == nil && len(fs) > 0 && v.Err == "" {
			v.Err = strings.TrimPrefix(failnote.Line(fs[len(fs)-1], time.Now()), "! ")
		}
		return v
	}
	exec := info.GetExecution()
	var in *api.TrainInput
	if first, err := historyEvent(ctx, c, ns, exec, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT); err == nil {
		var x api.TrainInput
		if a := first.GetWorkflowExecutionStartedEventAttributes(); a != nil && decode(a.GetInput(), &x) == nil {
			in = &x
		}
	}
	last, err := historyEvent(ctx, c, ns, exec, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	if err != nil {
		v.Err = err.Error()
	}
	applyClose(&v, in, last)
	return v
}

// viewFromInfo is what the visibility store knows: status and search attributes.
func viewFromInfo(info *workflowpb.WorkflowExecutionInfo) runView {
	v := runView{Run: strings.TrimPrefix(info.GetExecution().GetWorkflowId(), "train-"), Val: -1,
		Started: info.GetStartTime().AsTime(), Status: statusName(info.GetStatus())}
	f := info.GetSearchAttributes().GetIndexedFields()
	attr := func(name string, to any) bool {
		p, ok := f[name]
		return ok && converter.GetDefaultDataConverter().FromPayload(p, to) == nil
	}
	var run string
	if attr(api.RunAttr.GetName(), &run) && run != "" {
		v.Run = run
	}
	var round int64
	if attr(api.RoundAttr.GetName(), &round) {
		v.Round = int32(round)
	}
	attr(api.PhaseAttr.GetName(), &v.Phase)
	attr(api.WeightsAttr.GetName(), &v.Weights)
	var rate float64
	if attr(api.SuccessRateAttr.GetName(), &rate) {
		v.Val = rate
	}
	return v
}

func statusName(s enumspb.WorkflowExecutionStatus) string {
	switch s {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return "running"
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return "completed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		return "failed"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "canceled"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return "terminated"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return "timed out"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return "continued"
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_"))
}

// applyProgress takes a running run's live state from its progress query.
func applyProgress(v *runView, p api.Progress) {
	v.Round, v.Rounds, v.Phase, v.Weights = p.Round, p.Rounds, p.Phase, p.Weights
	v.Episodes, v.Live, v.Children, v.Summaries = p.Episodes, true, p.Children, p.Summaries
	if p.Stopping {
		v.Status = "stopping"
	}
	v.takeVal(p.Summaries)
}

// applyClose completes a closed run's view from its input (the round it
// ran, of how many, after which summaries) and its close event.
func applyClose(v *runView, in *api.TrainInput, last *historypb.HistoryEvent) {
	if in != nil {
		v.Round, v.Rounds, v.Summaries = in.Round, in.Rounds, in.Summaries
		if v.Weights == "" {
			v.Weights = in.Weights
		}
	}
	switch {
	case last.GetWorkflowExecutionCompletedEventAttributes() != nil:
		var res api.TrainResult
		if err := decode(last.GetWorkflowExecutionCompletedEventAttributes().GetResult(), &res); err != nil {
			v.Err = fmt.Sprintf("result unreadable: %v", err)
			break
		}
		v.Summaries = res.Summaries
		if res.Stopped {
			v.Status, v.Round = "stopped", res.StoppedRound
		} else if n := len(res.Summaries); n > 0 {
			v.Round = res.Summaries[n-1].Round
			v.Weights = res.FinalWeights
		}
		if res.FinalValSuccess >= 0 {
			v.Val, v.FinalVal, v.ValCounts = res.FinalValSuccess, true, res.FinalVal
		}
	case last.GetWorkflowExecutionFailedEventAttributes() != nil:
		v.Err = failureMessage(last.GetWorkflowExecutionFailedEventAttributes().GetFailure())
	case last.GetWorkflowExecutionTerminatedEventAttributes() != nil:
		if r := last.GetWorkflowExecutionTerminatedEventAttributes().GetReason(); r != "" {
			v.Err = "terminated: " + r
		}
	case last.GetWorkflowExecutionTimedOutEventAttributes() != nil:
		v.Err = "the workflow timed out"
	}
	v.takeVal(v.Summaries)
}

// takeVal fills Val from the summaries when no search attribute gave it,
// and its counts when they belong to the same validation (the attribute
// may already carry a newer one, whose round has no summary yet).
func (v *runView) takeVal(ss []schemas.RoundSummary) {
	rate, counts := latestVal(ss)
	if v.Val < 0 {
		v.Val = rate
	}
	if v.ValCounts == nil && counts != nil && math.Abs(counts.SuccessRate-v.Val) < 1e-9 {
		v.ValCounts = counts
	}
}

// latestVal is the last validation success among finished rounds, -1 when
// none, with its counts when the summary has them.
func latestVal(ss []schemas.RoundSummary) (float64, *schemas.TaskResult) {
	for i := len(ss) - 1; i >= 0; i-- {
		if ss[i].ValSuccess >= 0 {
			return ss[i].ValSuccess, ss[i].Val
		}
	}
	return -1, nil
}

// failureMessage is a failure's message; the SDK puts the whole wrapped
// chain into the top message, so causes are added only when it lacks them.
func failureMessage(f *failurepb.Failure) string {
	msg := f.GetMessage()
	for c := f.GetCause(); c != nil; c = c.GetCause() {
		if m := c.GetMessage(); m != "" && !strings.Contains(msg, m) {
			msg += ": " + m
		}
	}
	return msg
}

// historyEvent reads one event of an execution: the first (its start, with
// the input) or the close event. Pages of one event keep this cheap.
func historyEvent(ctx context.Context, c client.Client, ns string, exec *commonpb.WorkflowExecution, filter enumspb.HistoryEventFilterType) (*historypb.HistoryEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.WorkflowService().GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
		Namespace: ns, Execution: exec, MaximumPageSize: 1, HistoryEventFilterType: filter})
	if err != nil {
		return nil, fmt.Errorf("history of workflow %s: %w", exec.GetWorkflowId(), err)
	}
	ev := resp.GetHistory().GetEvents()
	if len(ev) == 0 {
		return nil, fmt.Errorf("history of workflow %s is empty", exec.GetWorkflowId())
	}
	return ev[0], nil
}

// historyConverter decodes what the CLI reads from history itself; the root
// command swaps in the payload codec when one is configured (encrypted
// inputs and results would not decode otherwise).
var historyConverter = converter.GetDefaultDataConverter()

func decode(p *commonpb.Payloads, to any) error {
	if len(p.GetPayloads()) == 0 {
		return errors.New("no payload")
	}
	return historyConverter.FromPayload(p.GetPayloads()[0], to)
}

// renderList is the table of runs, one row each.
func renderList(out io.Writer, views []runView) {
	if len(views) == 0 {
		fmt.Fprintln(out, "no runs yet: start one with `starter train --config <harness.yaml> --run <name> --weights <dir>`")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tROUND\tPHASE\tEPISODES\tSUCCESS\tVALIDATION\tLAST ERROR")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Run, v.Status, roundOf(v), dash(v.Phase),
			episodesOf(v), successOf(v), valOf(v), dash(oneLine(v.Err, 60)))
	}
	tw.Flush()
}

// renderDetail is one run: its state, the current phase, the running
// chunks, and the per-round table.
func renderDetail(out io.Writer, v runView) {
	fmt.Fprintf(out, "run %s: %s, round %s, phase %s, weights %s\n", v.Run, v.Status, roundOf(v), dash(v.Phase), dash(v.Weights))
	if v.Live {
		e := v.Episodes
		fmt.Fprintf(out, "episodes:   %s  valid %d, successes %s, lost %d, skipped %d\n", bar(e.Done, e.Total), e.Valid, successOf(v), e.Lost, e.Skipped)
	}
	fmt.Fprintf(out, "validation: %s\n", valOf(v))
	if v.Err != "" {
		fmt.Fprintf(out, "last error: %s\n", oneLine(v.Err, 400))
	}
	if len(v.Children) > 0 {
		fmt.Fprintf(out, "running episode chunks: %s\n", strings.Join(v.Children, ", "))
	}
	if len(v.Summaries) > 0 {
		fmt.Fprintln(out)
		printSummaries(out, v.Summaries)
	}
}

func roundOf(v runView) string {
	switch {
	case v.Round == 0:
		return "-"
	case v.Rounds == 0:
		return fmt.Sprintf("%d/?", v.Round)
	}
	return fmt.Sprintf("%d/%d", v.Round, v.Rounds)
}

func episodesOf(v runView) string {
	if !v.Live {
		return "-"
	}
	return bar(v.Episodes.Done, v.Episodes.Total)
}

// successOf is the current phase's success so far: over valid episodes
// with its 95 % interval, then over the episodes done (invalid and lost
// included), so invalid episodes cannot hide behind the rate.
func successOf(v runView) string {
	e := v.Episodes
	if !v.Live || e.Done == 0 {
		return "-"
	}
	if e.Valid == 0 {
		return fmt.Sprintf("0/0 · 0/%d done", e.Done)
	}
	return fmt.Sprintf("%d/%d (%s) · %d/%d done", e.Successes, e.Valid, stats.Rate(e.Successes, e.Valid), e.Successes, e.Done)
}

// valOf is the latest validation's success with its 95 % interval when
// its counts are known (a search attribute carries the bare rate only).
func valOf(v runView) string {
	if v.Val < 0 {
		return "-"
	}
	s := fmt.Sprintf("%.1f%%", 100*v.Val)
	if c := v.ValCounts; c != nil && c.Valid > 0 {
		s = fmt.Sprintf("%d/%d %s", c.Successes, c.Valid, stats.Rate(c.Successes, c.Valid))
	}
	if v.FinalVal {
		s += " (final)"
	}
	return s
}

// bar draws done/total as " 30% [=====>              ] (3/10)" with
// schollz/progressbar, which renders to a string as well as to a terminal,
// so one bar per row fits the redrawn table; ASCII keeps tabwriter's
// column widths right.
func bar(done, total int) string {
	if total <= 0 {
		return "-"
	}
	b := progressbar.NewOptions(total, progressbar.OptionSetWriter(io.Discard), progressbar.OptionSetWidth(20),
		progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(false), progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionSetTheme(progressbar.Theme{Saucer: "=", SaucerHead: ">", SaucerPadding: " ", BarStart: "[", BarEnd: "]"}))
	_ = b.Set(min(max(done, 0), total))
	return strings.TrimRight(strings.TrimLeft(b.String(), "\r"), " ")
}

// oneLine folds a message onto one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// quietLogger keeps the SDK's own logs out of the CLI's output unless they are warnings.
func quietLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// fleetPart adds the rollout fleet, if one runs, to a status frame.
func fleetPart(ctx context.Context, w io.Writer, c client.Client, run string) error {
	st, ok, err := api.QueryFleet(ctx, c)
	if err != nil || !ok {
		return err
	}
	renderFleet(w, st, run, time.Now())
	return nil
}
