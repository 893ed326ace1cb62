package api

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/failnote"
	"github.com/roundhouse-rl/roundhouse/internal/term"
)

// Line is a progress line and where its work stands: Stage names the
// part under way (a round's phase, …), Done of Total its items.
type Line struct {
	Text        string
	Stage       string
	Done, Total int
}

// Follow prints progress lines until wait returns, and returns its error.
// line() is asked every 2 s. On a terminal its text is redrawn in place
// when it changes; elsewhere (a log, a pipe) a line is printed only when
// it starts a stage or passes a new tenth of Total, so ten thousand
// episodes leave a dozen lines, not one per tick. An empty text is
// skipped. Its error's text names each cause once (failnote.Once: the
// SDK repeats a wrapped activity error for every layer). Each failed attempt of an activity of workflow id (or of its
// running children) that Temporal is still retrying is printed once, as
// soon as the server has it, with its cause and when it is retried.
func Follow(ctx context.Context, out io.Writer, c client.Client, id string, wait func(context.Context) error, line func() Line) error {
	done := make(chan error, 1)
	go func() { done <- wait(ctx) }()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	live := &liveLine{out: out}
	defer live.end()
	tty := term.IsTerminal(out)
	var logged progressLog
	var fails failnote.Printer
	for {
		select {
		case err := <-done:
			return failnote.Once(err)
		case <-tick.C:
			if l := line(); l.Text != "" {
				switch {
				case tty:
					live.redraw(l.Text)
				case logged.due(l):
					fmt.Fprintln(out, l.Text)
				}
			}
			// Describe may miss between runs of a continue-as-new chain;
			// the next tick asks again.
			if fs, err := failnote.Pending(ctx, c, id); err == nil {
				fails.Print(live, fs, time.Now())
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// progressLog decides which progress lines go to a log: the first, the
// first of each stage, and the first to pass each tenth of its total.
type progressLog struct {
	started bool
	stage   string
	tenth   int
}

func (p *progressLog) due(l Line) bool {
	tenth := 0
	if l.Total > 0 {
		tenth = 10 * l.Done / l.Total
	}
	if p.started && l.Stage == p.stage && tenth <= p.tenth {
		return false
	}
	p.started, p.stage, p.tenth = true, l.Stage, tenth
	return true
}

// liveLine is a terminal whose last line is redrawn in place; anything
// else written ends that line first, so it stays on screen above.
type liveLine struct {
	out  io.Writer
	open bool   // a progress line is on screen, without its newline
	text string // its text
}

func (l *liveLine) redraw(text string) {
	if l.open && text == l.text {
		return
	}
	fmt.Fprintf(l.out, "\r\x1b[K%s", text)
	l.open, l.text = true, text
}

func (l *liveLine) Write(p []byte) (int, error) {
	l.end()
	return l.out.Write(p)
}

// end ends the progress line, if one is open.
func (l *liveLine) end() {
	if l.open {
		fmt.Fprintln(l.out)
		l.open = false
	}
}

// FollowTrain follows a run's train workflow (Follow) with a line of its
// progress, and returns the run's result. before runs ahead of each
// progress query: the starter looks for its STOP file there.
func FollowTrain(ctx context.Context, out io.Writer, c client.Client, run string, before func()) (TrainResult, error) {
	id := WorkflowID(run)
	var res TrainResult
	err := Follow(ctx, out, c, id, func(ctx context.Context) error { return c.GetWorkflow(ctx, id, "").Get(ctx, &res) }, func() Line {
		before()
		p, err := QueryProgress(ctx, c, run)
		if err != nil {
			return Line{} // between runs of a continue-as-new chain the query may miss
		}
		e := p.Episodes
		l := Line{Text: fmt.Sprintf("round %d/%d  %-10s %d/%d episodes, %d successes", p.Round, p.Rounds, p.Phase, e.Done, e.Total, e.Successes),
			Stage: fmt.Sprintf("%d %s %v", p.Round, p.Phase, p.Stopping), Done: e.Done, Total: e.Total}
		if p.Overlapped {
			// The phase names the rounds itself.
			l.Text = fmt.Sprintf("%d rounds  %s  %d/%d episodes, %d successes", p.Rounds, p.Phase, e.Done, e.Total, e.Successes)
		}
		if p.Stopping {
			l.Text += " (stopping)"
		}
		return l
	})
	return res, err
}

// FollowSweep waits for a sweep the schedule started, printing its failing
// activities (Follow), and returns its result.
func FollowSweep(ctx context.Context, out io.Writer, c client.Client, started *client.ScheduleWorkflowExecution) (SweepResult, error) {
	var res SweepResult
	err := Follow(ctx, out, c, started.WorkflowID, func(ctx context.Context) error {
		return c.GetWorkflow(ctx, started.WorkflowID, started.FirstExecutionRunID).Get(ctx, &res)
	}, func() Line { return Line{} })
	return res, err
}
