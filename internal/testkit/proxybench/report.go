package proxybench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"text/tabwriter"
	"time"
)

// Config of a Report.
type Config struct {
	Clients  []int         // concurrent clients, e.g. 1, 16, 64
	Saturate time.Duration // closed-loop run per cell
	Paced    time.Duration // fixed-load run per cell
	Rate     float64       // fixed offered load, calls/s
	Rounds   int           // repetitions, interleaved; cells report the median
	Progress io.Writer     // where to show which cell is running (nil: nowhere)
	// ProfileDir, when set, gets the first round's CPU and allocation
	// profiles of every saturated cell: cpu-<path>-<clients>.pprof, and
	// allocs-<path>-<clients>.pprof with its .base.pprof, the process's
	// allocations before the cell (go tool pprof -base).
	ProfileDir string
}

// profile starts the cell's profiles; the func it returns stops them.
// Generator, stub and proxy share the process: focus on the proxy's
// package (go tool pprof -focus internal/proxy).
func profile(dir string, p Path, clients int) (func() error, error) {
	name := func(kind, ext string) string {
		return filepath.Join(dir, fmt.Sprintf("%s-%s-%d%s", kind, p, clients, ext))
	}
	writeAllocs := func(file string) error {
		f, err := os.Create(file)
		if err != nil {
			return fmt.Errorf("allocation profile: %w", err)
		}
		defer f.Close()
		runtime.GC() // the profile is as of the last GC
		return pprof.Lookup("allocs").WriteTo(f, 0)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	if err := writeAllocs(name("allocs", ".base.pprof")); err != nil {
		return nil, err
	}
	cpu, err := os.Create(name("cpu", ".pprof"))
	if err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := cpu.Close(); err != nil {
			return fmt.Errorf("CPU profile: %w", err)
		}
		return writeAllocs(name("allocs", ".pprof"))
	}, nil
}

// cell is one path at one concurrency, over all rounds.
type cell struct {
	sat, fixed []Result
}

func median(rs []Result, f func(Result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// Report measures every path at every concurrency and writes one table.
// Paths are measured back to back per concurrency and rounds are interleaved,
// so that drift on shared cores hits all three alike.
func Report(w io.Writer, cfg Config) error {
	cells := map[Path]map[int]*cell{}
	for _, p := range Paths {
		cells[p] = map[int]*cell{}
		for _, c := range cfg.Clients {
			cells[p][c] = &cell{}
		}
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	for round := range max(cfg.Rounds, 1) {
		for _, c := range cfg.Clients {
			for _, p := range Paths {
				fmt.Fprintf(progress, "round %d: %s, %d clients\n", round+1, p, c)
				env, err := Start(p)
				if err != nil {
					return err
				}
				env.Saturate(c, 0, 300*time.Millisecond) // warm-up: connections, buffers
				stop := func() error { return nil }
				if cfg.ProfileDir != "" && round == 0 {
					if stop, err = profile(cfg.ProfileDir, p, c); err != nil {
						env.Close()
						return err
					}
				}
				sat := env.Saturate(c, 0, cfg.Saturate)
				if err := stop(); err != nil {
					env.Close()
					return err
				}
				fixed := env.Paced(c, cfg.Rate, 0, cfg.Paced)
				env.Close()
				for _, r := range []Result{sat, fixed} {
					if r.Errors > 0 {
						return fmt.Errorf("%s, %d clients: %d errors, first: %v", p, c, r.Errors, r.FirstErr)
					}
				}
				cells[p][c].sat = append(cells[p][c].sat, sat)
				cells[p][c].fixed = append(cells[p][c].fixed, fixed)
			}
		}
	}

	env, err := Start(Recording)
	if err != nil {
		return err
	}
	defer env.Close()
	stored, err := env.StoredBytesPerCall(20)
	if err != nil {
		return err
	}
	retained, err := env.RetainedPerCall(500)
	if err != nil {
		return err
	}

	fmt.Fprintf(w, "Recording proxy benchmark: non-streamed chat completions with one tool call, %d B request,\n", env.RequestBytes())
	fmt.Fprintf(w, "%d B answer (%d B from the stub when the recording proxy asks for %d prompt + %d completion token ids and logprobs).\n",
		env.AnswerBytes(), env.UpstreamAnswerBytes(), PromptTokens, CompletionTokens)
	fmt.Fprintf(w, "GOMAXPROCS=%d: load generator, stub and proxy share these CPUs. Saturation: closed loop, %s per cell.\n",
		runtime.GOMAXPROCS(0), cfg.Saturate)
	fmt.Fprintf(w, "Fixed load: %.0f calls/s open loop (a call held up by the client's previous one counts from its scheduled time),\n%s per cell. Median of %d round(s).\n",
		cfg.Rate, cfg.Paced, max(cfg.Rounds, 1))
	fmt.Fprintf(w, "Peak heap: largest HeapInuse of the whole process (load generator + stub + proxy) sampled every 2 ms.\n\n")

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tclients\tsat calls/s\t× reverse\tp50 ms\tp99 ms\t+p50 ms\t+p99 ms\tpeak heap MiB\t")
	type verdict struct {
		c                     int
		ratio, dp50, dp99     float64
		okRatio, okP50, okP99 bool
	}
	var verdicts []verdict
	for _, c := range cfg.Clients {
		ref := cells[Reverse][c]
		refRate := median(ref.sat, Result.CallsPerSec)
		refP50 := median(ref.fixed, func(r Result) float64 { return r.Quantile(0.5) })
		refP99 := median(ref.fixed, func(r Result) float64 { return r.Quantile(0.99) })
		for _, p := range Paths {
			x := cells[p][c]
			rate := median(x.sat, Result.CallsPerSec)
			p50 := median(x.fixed, func(r Result) float64 { return r.Quantile(0.5) })
			p99 := median(x.fixed, func(r Result) float64 { return r.Quantile(0.99) })
			var peak uint64
			for _, r := range slices.Concat(x.sat, x.fixed) {
				peak = max(peak, r.PeakHeap)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%+.2f\t%+.2f\t%.1f\t\n",
				p, c, rate, rate/refRate, p50, p99, p50-refP50, p99-refP99, float64(peak)/(1<<20))
			if p == Recording {
				verdicts = append(verdicts, verdict{c, rate / refRate, p50 - refP50, p99 - refP99,
					rate/refRate >= 0.6, p50-refP50 < 1, p99-refP99 < 5})
			}
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "(+p50/+p99: added over the bare reverse proxy at the fixed load; × reverse: saturated throughput ratio)\n\n")
	fmt.Fprintf(w, "Stored: %.0f B/call as per-episode Parquet files of %d calls, %.0f B/call compacted into one file.\n",
		stored.PerEpisodeFile, EpisodeLen, stored.CompactedFile)
	fmt.Fprintf(w, "Memory: an episode holds %.1f KiB of live heap per recorded call until End (here %d calls per episode).\n\n",
		retained/1024, EpisodeLen)
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	for _, v := range verdicts {
		fmt.Fprintf(w, "%2d clients: throughput %.2f× reverse (target ≥ 0.6: %s); added p50 %+.2f ms (< 1: %s); added p99 %+.2f ms (< 5: %s)\n",
			v.c, v.ratio, mark(v.okRatio), v.dp50, mark(v.okP50), v.dp99, mark(v.okP99))
	}
	return nil
}
