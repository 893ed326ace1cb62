package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/roundhouse-rl/roundhouse/internal/itest"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// peakHeap samples the heap while f runs and returns the largest value seen.
func peakHeap(f func()) uint64 {
	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	return peak.Load()
}

// writePart stores rows as a compacted part file, as Compact leaves it.
func writePart[T any](tb testing.TB, s *store.Store, key string, gen func(emit func(T))) {
	tb.Helper()
	tmp := filepath.Join(tb.TempDir(), "part.parquet")
	f, err := os.Create(tmp)
	if err != nil {
		tb.Fatal(err)
	}
	w := parquet.NewGenericWriter[T](f, parquet.Compression(&parquet.Zstd), parquet.MaxRowsPerRowGroup(store.RowsPerGroup))
	buf := make([]T, 0, 4096)
	flush := func() {
		if _, err := w.Write(buf); err != nil {
			tb.Fatal(err)
		}
		buf = buf[:0]
	}
	gen(func(r T) {
		if buf = append(buf, r); len(buf) == cap(buf) {
			flush()
		}
	})
	flush()
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	f.Close()
	if err := s.PutFile(context.Background(), key, tmp); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkPlanBatch is benchmark (a): advantages and selection over the
// records of one million calls (groups of 6 episodes, 50 calls each, one
// compacted calls partition in the real S3 server). Only the CallCounts
// columns are decoded; the token arrays and requests stay unread.
func BenchmarkPlanBatch(b *testing.B) {
	stack := itest.Start(b)
	ctx := context.Background()
	s := stack.Store
	const (
		run      = "bench"
		round    = 1
		groups   = 3334 // × 6 episodes × 50 calls ≈ 1,000,200 calls
		attempts = 6
		perEp    = 50
	)
	l := schemas.Layout{Run: run}
	writePart(b, s, l.EpisodesDir(round, schemas.PhaseTrain)+store.PartFile, func(emit func(schemas.Episode)) {
		for g := 0; g < groups; g++ {
			for a := 0; a < attempts; a++ {
				ok := (g+a)%3 == 0
				emit(schemas.Episode{Run: run, Round: round, Phase: schemas.PhaseTrain, Group: int32(g), Attempt: int32(a),
					EpisodeID: schemas.EpisodeID(round, schemas.PhaseTrain, int32(g), int32(a)), Valid: a != 5 || g%10 != 0,
					Success: ok, Reward: map[bool]float64{true: 1}[ok], NumCalls: perEp, SuccessCall: -1})
			}
		}
	})
	prompt := make([]int32, 64)
	compl := make([]int32, 16)
	lp := make([]float32, 16)
	for i := range prompt {
		prompt[i] = int32(i * 7919 % 32000)
	}
	writePart(b, s, l.CallsDir(round, schemas.PhaseTrain)+store.PartFile, func(emit func(schemas.Call)) {
		for g := 0; g < groups; g++ {
			for a := 0; a < attempts; a++ {
				id := schemas.EpisodeID(round, schemas.PhaseTrain, int32(g), int32(a))
				for c := 0; c < perEp; c++ {
					p := 3000 + (g*31+a*7+c*13)%2000
					emit(schemas.Call{Run: run, Round: round, Phase: schemas.PhaseTrain, EpisodeID: id, Group: int32(g),
						Attempt: int32(a), CallIndex: int32(c), Request: `{"model":"m","messages":[]}`,
						PromptTokenIDs: prompt, CompletionTokenIDs: compl, CompletionLogprobs: lp,
						PromptTokens: int32(p), CompletionTokens: int32(200 + c%300), Trainable: c%25 != 24})
				}
			}
		}
	})
	c := &Control{Store: s}
	in := BatchInput{Run: run, Round: round, MaxCallsPerEpisode: 16, Seed: 1,
		Filters: schemas.Filters{MaxTokens: 4800, PostSuccess: true}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var sum schemas.BatchSummary
		var err error
		peak := peakHeap(func() { _, sum, err = c.planBatch(ctx, in) })
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		b.ReportMetric(float64(sum.Calls), "calls")
		b.ReportMetric(float64(sum.Samples), "samples")
	}
}

// BenchmarkWriteBatch is benchmark (b): batch.npz for 20,000 selected calls
// of 4,000 tokens (3,500 prompt + 500 completion) written to a local file,
// beside a plain sequential write of the same number of bytes in the same run.
func BenchmarkWriteBatch(b *testing.B) {
	const n, np, nc = 20000, 3500, 500
	samples := make([]schemas.Sample, n)
	toks := make([]schemas.CallTokens, n)
	for i := range samples {
		samples[i] = schemas.Sample{EpisodeID: fmt.Sprint(i / 16), CallIndex: int32(i % 16), Advantage: 0.5, Weight: 1.0 / 16,
			PromptTokens: np, CompletionTokens: nc}
		t := schemas.CallTokens{PromptTokenIDs: make([]int32, np), CompletionTokenIDs: make([]int32, nc), CompletionLogprobs: make([]float32, nc)}
		for j := range t.PromptTokenIDs {
			t.PromptTokenIDs[j] = int32(i + j)
		}
		toks[i] = t
	}
	dir := b.TempDir()
	var size int64
	write := func(name string, f func(*os.File) error) float64 {
		path := filepath.Join(dir, name)
		start := time.Now()
		out, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := f(out); err != nil {
			b.Fatal(err)
		}
		if err := out.Sync(); err != nil {
			b.Fatal(err)
		}
		st, _ := out.Stat()
		out.Close()
		size = st.Size()
		el := time.Since(start)
		os.Remove(path)
		return float64(size) / 1e6 / el.Seconds()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		batch := write("batch.npz", func(f *os.File) error { return encodeBatch(f, samples, toks) })
		bytes := size
		chunk := make([]byte, 1<<20)
		plain := write("plain.bin", func(f *os.File) error {
			for left := bytes; left > 0; left -= int64(len(chunk)) {
				if _, err := f.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
					return err
				}
			}
			return nil
		})
		b.ReportMetric(batch, "batch-MB/s")
		b.ReportMetric(plain, "plain-MB/s")
		b.ReportMetric(batch/plain, "ratio")
		b.ReportMetric(float64(bytes)/1e6, "MB")
	}
}
