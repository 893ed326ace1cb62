package term

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

func TestWatch(t *testing.T) {
	ctx := context.Background()
	frames := 0
	draw := func(context.Context) (string, bool, error) {
		frames++
		if frames == 2 {
			return "", false, errors.New("temporal unavailable")
		}
		return fmt.Sprintf("frame %d\n", frames), frames == 3, nil
	}
	var out bytes.Buffer
	if err := Watch(ctx, &out, false, time.Millisecond, draw); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if frames != 3 || !strings.Contains(got, "frame 1") || !strings.Contains(got, "error: temporal unavailable (retrying)") || !strings.Contains(got, "frame 3") {
		t.Errorf("watch drew %d frames, want 3 ending when done:\n%s", frames, got)
	}
	if strings.Contains(got, "\x1b") {
		t.Errorf("clear-screen codes written to a non-terminal: %q", got)
	}
	// On a terminal every frame clears the screen first.
	frames = 0
	out.Reset()
	_ = Watch(ctx, &out, true, time.Millisecond, draw)
	if n := strings.Count(out.String(), "\x1b[H\x1b[2J"); n != 3 {
		t.Errorf("%d screen clears on a terminal, want 3", n)
	}
	// The first draw's error is the command's error: nothing to show yet.
	err := Watch(ctx, &out, false, time.Millisecond, func(context.Context) (string, bool, error) {
		return "", false, errors.New("run x not found")
	})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("first error = %v", err)
	}
	// A cancelled context (Ctrl-C) ends the watch without an error.
	cctx, cancel := context.WithCancel(ctx)
	n := 0
	err = Watch(cctx, io.Discard, false, time.Millisecond, func(context.Context) (string, bool, error) {
		if n++; n == 2 {
			cancel()
		}
		return "x\n", false, nil
	})
	if err != nil || n != 2 {
		t.Errorf("after Ctrl-C: err %v after %d frames, want nil after 2", err, n)
	}
}

func TestOneLine(t *testing.T) {
	if got := OneLine("a\n  b\tc", 10); got != "a b c" {
		t.Errorf("OneLine folds to %q, want %q", got, "a b c")
	}
	if got := OneLine("αβγδε", 4); got != "αβγ…" {
		t.Errorf("OneLine cuts to %q, want %q", got, "αβγ…")
	}
}
