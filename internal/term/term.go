// Package term is what the command line needs of a terminal: a frame
// redrawn until it is done (`starter status --watch`), and messages folded
// onto one line of a table.
package term

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Watch redraws until ctx ends or draw says it is done. On a terminal
// (tty) it clears the screen first; elsewhere (a log, a pipe) frames
// follow each other. Only the first draw's error ends it: later ones are
// shown and retried, since a watch outlives a Temporal restart.
func Watch(ctx context.Context, out io.Writer, tty bool, every time.Duration, draw func(context.Context) (string, bool, error)) error {
	for frame := 0; ; frame++ {
		text, done, err := draw(ctx)
		if err != nil {
			if frame == 0 || ctx.Err() != nil {
				return ignoreCanceled(ctx, err)
			}
			text = fmt.Sprintf("error: %s (retrying)\n", OneLine(err.Error(), 300))
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

// ignoreCanceled drops the error of a draw that Ctrl-C cut short.
func ignoreCanceled(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// IsTerminal says whether w is a terminal, which Watch may clear.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// OneLine folds a message onto one line of at most n runes.
func OneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
