package proxybench

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The benchmark is only meaningful if every path really answers like the
// stub and the recording path really records; this checks that (behaviour
// only, no timing).
func TestPathsAnswerLikeTheStub(t *testing.T) {
	for _, m := range Modes {
		for _, p := range Paths {
			t.Run(string(m)+"/"+string(p), func(t *testing.T) { testPath(t, m, p) })
		}
	}
}

func testPath(t *testing.T, m Mode, p Path) {
	{
		{
			env, err := Start(p, m)
			if err != nil {
				t.Fatal(err)
			}
			defer env.Close()
			// 120 calls over 2 clients: episodes rotate at EpisodeLen.
			for _, r := range []Result{env.Saturate(2, 120, 0), env.Paced(3, 500, 30, 0)} {
				if r.Errors > 0 || r.Calls == 0 {
					t.Fatalf("%d calls, %d errors, first: %v", r.Calls, r.Errors, r.FirstErr)
				}
			}
			if p == Spooled && env.spooled.Load() < 150 {
				t.Errorf("%d calls spooled, want all 150", env.spooled.Load())
			}
			if p != Recording {
				return
			}
			s, err := env.StoredBytesPerCall(2)
			if err != nil || s.PerEpisodeFile <= 0 || s.CompactedFile <= 0 {
				t.Fatalf("stored %+v, %v", s, err)
			}
			if _, err := env.RetainedPerCall(10); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// With a profile folder, every saturated cell of the first round leaves a
// CPU profile and an allocation profile with its base, each in pprof's
// form (gzipped protocol buffers).
func TestReportProfiles(t *testing.T) {
	dir := t.TempDir()
	var out strings.Builder
	cfg := Config{Clients: []int{2}, Saturate: 100 * time.Millisecond, Paced: 100 * time.Millisecond, Rate: 50, Rounds: 2, ProfileDir: dir}
	if err := Report(&out, cfg); err != nil {
		t.Fatal(err)
	}
	for _, m := range Modes {
		for _, p := range Paths {
			for _, kind := range []string{"cpu-%s-%s-2.pprof", "allocs-%s-%s-2.pprof", "allocs-%s-%s-2.base.pprof"} {
				file := filepath.Join(dir, fmt.Sprintf(kind, m, p))
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) || len(b) < 100 {
					t.Errorf("%s: %d bytes, not a gzipped profile", file, len(b))
				}
			}
		}
	}
	if n, _ := filepath.Glob(filepath.Join(dir, "*")); len(n) != 3*len(Paths)*len(Modes) {
		t.Errorf("%d profiles, want %d (the first round's only): %v", len(n), 3*len(Paths)*len(Modes), n)
	}
	// Every mode, path and concurrency has its row, the recording path
	// its verdict, and the memory table its rows.
	for _, want := range []string{"plain  recording", "streamed  recording", "plain    spooled", "plain, 1 MiB image",
		"plain    recording  2 clients: throughput", "streamed spooled    2 clients: throughput"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// Calls held at the stub are really in flight at once (InFlight fails
// unless all reach the stub together), each allocates at least the image it
// carries (the stub reads it whole) on either proxy, and the recording
// proxy still records every one of them.
func TestInFlight(t *testing.T) {
	for _, p := range []Path{Reverse, Recording} {
		env, err := Start(p, Plain)
		if err != nil {
			t.Fatal(err)
		}
		live, allocated, err := env.InFlight(4, 256<<10)
		env.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if allocated < 256<<10 || live > allocated {
			t.Errorf("%s: %.0f B live, %.0f B allocated per call in flight; want at least the image's %d B", p, live, allocated, 256<<10)
		}
		env.mu.Lock()
		errs := env.recErrs
		env.mu.Unlock()
		if len(errs) > 0 {
			t.Errorf("%s: %v", p, errs)
		}
	}
}

// Over the eight slices of a 2 s cell every path runs twice at each
// position, and follows each of its neighbours in the list as often.
func TestSliceOrder(t *testing.T) {
	const turns = 8
	at := map[Path][]int{}
	after := map[[2]Path]int{}
	for k := range turns {
		order := sliceOrder(k)
		if len(order) != len(Paths) {
			t.Fatalf("turn %d: order %v has %d paths, want %d", k, order, len(order), len(Paths))
		}
		for i, p := range order {
			at[p] = append(at[p], i)
			if i > 0 {
				after[[2]Path{order[i-1], p}]++
			}
		}
	}
	for _, p := range Paths {
		count := make([]int, len(Paths))
		for _, i := range at[p] {
			count[i]++
		}
		for i, n := range count {
			if n != turns/len(Paths) {
				t.Errorf("%s ran %d times at position %d over %d turns, want %d", p, n, i, turns, turns/len(Paths))
			}
		}
	}
	for i, p := range Paths {
		prev, next := Paths[(i+len(Paths)-1)%len(Paths)], Paths[(i+1)%len(Paths)]
		if a, b := after[[2]Path{prev, p}], after[[2]Path{next, p}]; a != b {
			t.Errorf("%s followed %s %d times and %s %d times; want as often", p, prev, a, next, b)
		}
	}
}

// A round's ratio pairs runs of the same seconds: a slow round slows both
// paths, and must not pair one path's slow round with the other's fast one.
func TestPairedRatio(t *testing.T) {
	rounds := func(rates ...int) []Result {
		rs := make([]Result, len(rates))
		for i, n := range rates {
			rs[i] = Result{Calls: n, Elapsed: time.Second}
		}
		return rs
	}
	ref := rounds(1000, 2000, 1500)
	x := rounds(950, 1800, 1200) // 0.95, 0.90, 0.80 of the same rounds
	med, lo, hi := pairedRatio(x, ref)
	want := [3]float64{0.90, 0.80, 0.95}
	for i, got := range [3]float64{med, lo, hi} {
		if math.Abs(got-want[i]) > 1e-9 {
			t.Errorf("pairedRatio = %.3f, %.3f, %.3f; want %.2f, %.2f, %.2f", med, lo, hi, want[0], want[1], want[2])
			break
		}
	}
	// The ratio of the two medians is 1200/1500 = 0.80: not what is reported.
	if m := median(x, Result.CallsPerSec) / median(ref, Result.CallsPerSec); math.Abs(m-med) < 0.05 {
		t.Errorf("test rounds do not tell the paired median (%.2f) from the ratio of medians (%.2f)", med, m)
	}
}
