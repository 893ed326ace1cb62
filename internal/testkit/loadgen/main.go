// Command loadgen prints the recording proxy's benchmark table (issue 3):
// direct to a vLLM-shaped stub, through a bare httputil.ReverseProxy and
// through the recording proxy, at several concurrencies. The same
// measurements are available as Go benchmarks: go test -run '^$' -bench Proxy
// ./internal/proxy/
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/testkit/proxybench"
)

func main() {
	var cfg proxybench.Config
	clients := flag.String("clients", "1,16,64", "concurrent clients, comma-separated")
	flag.DurationVar(&cfg.Saturate, "saturate", 2*time.Second, "closed-loop (saturation) run per path and concurrency")
	flag.DurationVar(&cfg.Paced, "paced", 3*time.Second, "fixed-load time per path and concurrency: the paths run at once, for this times their number, sharing the rate")
	flag.Float64Var(&cfg.Rate, "rate", 200, "fixed offered load, calls/s")
	// Five: with one, a cell moved by ±0.05× between runs on a 2-core VM.
	flag.IntVar(&cfg.Rounds, "rounds", 5, "interleaved repetitions; the table shows their median throughput and ratio, and latency over all their calls (5 take about 17 min on 2 cores)")
	flag.StringVar(&cfg.ProfileDir, "profile", "", "folder for the first round's CPU and allocation profiles of each saturated run (go tool pprof -focus internal/proxy …)")
	modes := flag.String("modes", "plain,streamed", "plain, streamed or both, comma-separated")
	flag.BoolVar(&cfg.NoMemory, "no-memory", false, "leave out the memory figures")
	verbose := flag.Bool("v", false, "show progress on stderr")
	flag.Parse()
	if *verbose {
		cfg.Progress = os.Stderr
	}
	for _, s := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "loadgen: bad -clients %q\n", *clients)
			os.Exit(2)
		}
		cfg.Clients = append(cfg.Clients, n)
	}
	for _, s := range strings.Split(*modes, ",") {
		m := proxybench.Mode(strings.TrimSpace(s))
		if !slices.Contains(proxybench.Modes, m) {
			fmt.Fprintf(os.Stderr, "loadgen: bad -modes %q: use plain, streamed or both\n", *modes)
			os.Exit(2)
		}
		cfg.Modes = append(cfg.Modes, m)
	}
	if err := proxybench.Report(os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}
