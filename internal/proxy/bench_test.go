package proxy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/testkit/proxybench"
)

// BenchmarkProxy compares chat completions sent straight to a vLLM-shaped
// stub, through a bare httputil.ReverseProxy and through the recording proxy
// (issue 3). Two modes per path and concurrency:
//
//   - saturated: closed loop, b.N calls; reports calls/s and the closed-loop
//     p50/p99 (queueing included), and for the recording path the Parquet
//     bytes stored per call;
//   - fixed200: open loop at 200 calls/s, b.N calls, latency counted from the
//     scheduled send time; the p50_ms/p99_ms to compare across paths. b.N is
//     time-bound here (b.N/200 s), so use -benchtime=3s or more for a p99.
//
// All of it shares the machine's cores, so compare paths, not absolute
// numbers; `go run ./internal/testkit/loadgen` prints the same as one table
// with the ratios.
func BenchmarkProxy(b *testing.B) {
	for _, mode := range []string{"saturated", "fixed200"} {
		for _, path := range proxybench.Paths {
			for _, clients := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("%s/%s/clients=%d", mode, path, clients), func(b *testing.B) {
					env, err := proxybench.Start(path, proxybench.Plain)
					if err != nil {
						b.Fatal(err)
					}
					defer env.Close()
					env.Saturate(clients, 0, 200*time.Millisecond) // warm-up: connections, buffers
					b.ResetTimer()
					var r proxybench.Result
					if mode == "saturated" {
						r = env.Saturate(clients, b.N, 0)
					} else {
						r = env.Paced(clients, 200, b.N, 0)
					}
					b.StopTimer()
					if r.Errors > 0 {
						b.Fatalf("%d errors, first: %v", r.Errors, r.FirstErr)
					}
					b.ReportMetric(r.CallsPerSec(), "calls/s")
					b.ReportMetric(r.Quantile(0.5), "p50_ms")
					b.ReportMetric(r.Quantile(0.99), "p99_ms")
					b.ReportMetric(float64(r.PeakHeap)/(1<<20), "peak_heap_MiB")
					if mode == "saturated" && path == proxybench.Recording {
						s, err := env.StoredBytesPerCall(4)
						if err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(s.PerEpisodeFile, "B/call")
					}
				})
			}
		}
	}
}
