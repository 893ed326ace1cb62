package api

import (
	"bytes"
	"fmt"
	"testing"
)

// Off a terminal, following 10,030 episodes polled after each one logs
// the first line, one per tenth and one per new stage: 12, not 10,030.
func TestProgressLog(t *testing.T) {
	var p progressLog
	var logged []string
	for done := 0; done <= 10030; done++ {
		if l := (Line{Text: fmt.Sprint(done), Stage: "episodes", Done: done, Total: 10030}); p.due(l) {
			logged = append(logged, l.Text)
		}
	}
	for range 3 {
		if p.due(Line{Text: "report", Stage: "report"}) {
			logged = append(logged, "report")
		}
	}
	want := "[0 1003 2006 3009 4012 5015 6018 7021 8024 9027 10030 report]"
	if got := fmt.Sprint(logged); got != want {
		t.Errorf("logged %s, want %s", got, want)
	}
}

// On a terminal the progress line is redrawn in place, and anything else
// written (a failing activity) ends it first.
func TestLiveLine(t *testing.T) {
	var out bytes.Buffer
	l := &liveLine{out: &out}
	l.redraw("1/9")
	l.redraw("1/9")
	l.redraw("2/9")
	fmt.Fprintln(l, "! attempt 1 failed")
	l.redraw("3/9")
	l.end()
	l.end()
	if want := "\r\x1b[K1/9\r\x1b[K2/9\n! attempt 1 failed\n\r\x1b[K3/9\n"; out.String() != want {
		t.Errorf("wrote %q, want %q", out.String(), want)
	}
}
