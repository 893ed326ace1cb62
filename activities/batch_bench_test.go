package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"golang.org/x/sync/errgroup"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
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
// records of one million calls (3,334 groups × 6 episodes × 50 calls, each
// call with a 1,024-token prompt and 256-token completion array) in the
// real S3 server, in both layouts a round has: one compacted part file
// (after Compact) and one file per episode (while the round runs, 20,004
// objects). Only the CallCounts columns are decoded; fetched-MB says how
// much crossed the network.
func BenchmarkPlanBatch(b *testing.B) {
	stack := itest.Start(b)
	s := stack.Store
	const (
		groups   = 3334
		attempts = 6
		perEp    = 50
	)
	for _, layout := range []string{"part", "episodes"} {
		b.Run(layout, func(b *testing.B) {
			ctx := context.Background()
			run := "bench-" + layout
			stored := writeRound(b, s, run, groups, attempts, perEp, layout == "part")
			c := &Records{Store: s}
			in := BatchInput{Run: run, Round: 1, MaxCallsPerEpisode: 16, Seed: 1,
				Filters: schemas.Filters{MaxTokens: 4800, PostSuccess: true}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var sum schemas.BatchSummary
				var err error
				before := store.Received()
				peak := peakHeap(func() { _, sum, err = c.planBatch(ctx, in) })
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
				b.ReportMetric(float64(store.Received()-before)/1e6, "fetched-MB")
				b.ReportMetric(float64(stored)/1e6, "stored-MB")
				b.ReportMetric(float64(sum.Calls), "calls")
				b.ReportMetric(float64(sum.Samples), "samples")
			}
		})
	}
}

// writeRound stores a synthetic round's episodes and calls, compacted into
// part files or as one file per episode, and returns the calls' stored bytes.
func writeRound(b *testing.B, s *store.Store, run string, groups, attempts, perEp int, compacted bool) int64 {
	b.Helper()
	ctx := context.Background()
	const round = 1
	l := schemas.Layout{Run: run}
	episode := func(g, a int) schemas.Episode {
		ok := (g+a)%3 == 0
		return schemas.Episode{Run: run, Round: round, Phase: schemas.PhaseTrain, Group: int32(g), Attempt: int32(a),
			EpisodeID: schemas.EpisodeID(round, schemas.PhaseTrain, int32(g), int32(a)), Valid: a != 5 || g%10 != 0,
			Success: ok, Reward: map[bool]float64{true: 1}[ok], NumCalls: int32(perEp), SuccessCall: -1}
	}
	// Token arrays of realistic length; a prompt grows by its episode's
	// earlier turns, so consecutive calls share a prefix as real ones do.
	base := make([]int32, 4096)
	for i := range base {
		base[i] = int32(i * 7919 % 151_000)
	}
	compl := make([]int32, 256)
	lp := make([]float32, 256)
	calls := func(g, a int, emit func(schemas.Call)) {
		id := schemas.EpisodeID(round, schemas.PhaseTrain, int32(g), int32(a))
		for c := 0; c < perEp; c++ {
			p := 3000 + (g*31+a*7+c*13)%2000
			off := (g*13 + a) % 2048
			for i := range compl {
				compl[i] = int32((g*7 + a*3 + c + i*31) % 151_000)
				lp[i] = -float32(i%17) / 10
			}
			emit(schemas.Call{Run: run, Round: round, Phase: schemas.PhaseTrain, EpisodeID: id, Group: int32(g),
				Attempt: int32(a), CallIndex: int32(c), Request: `{"model":"m","messages":[]}`,
				PromptTokenIDs: base[off : off+1024], CompletionTokenIDs: compl, CompletionLogprobs: lp,
				PromptTokens: int32(p), CompletionTokens: int32(200 + c%300), Trainable: c%25 != 24})
		}
	}
	if compacted {
		writePart(b, s, l.EpisodesDir(round, schemas.PhaseTrain)+store.PartFile, func(emit func(schemas.Episode)) {
			for g := 0; g < groups; g++ {
				for a := 0; a < attempts; a++ {
					emit(episode(g, a))
				}
			}
		})
		writePart(b, s, l.CallsDir(round, schemas.PhaseTrain)+store.PartFile, func(emit func(schemas.Call)) {
			for g := 0; g < groups; g++ {
				for a := 0; a < attempts; a++ {
					calls(g, a, emit)
				}
			}
		})
	} else {
		// One file per episode, as the rollout activity writes them.
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(2 * runtime.NumCPU())
		for gi := 0; gi < groups; gi++ {
			g.Go(func() error {
				for a := 0; a < attempts; a++ {
					ep := episode(gi, a)
					var rows []schemas.Call
					calls(gi, a, func(c schemas.Call) {
						c.PromptTokenIDs = slices.Clone(c.PromptTokenIDs)
						c.CompletionTokenIDs = slices.Clone(c.CompletionTokenIDs)
						c.CompletionLogprobs = slices.Clone(c.CompletionLogprobs)
						rows = append(rows, c)
					})
					if _, err := store.WriteParquet(gctx, s, l.Calls(round, schemas.PhaseTrain, ep.EpisodeID), rows); err != nil {
						return err
					}
					if _, err := store.WriteParquet(gctx, s, l.Episodes(round, schemas.PhaseTrain, ep.EpisodeID), []schemas.Episode{ep}); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	objs, err := s.List(ctx, l.CallsDir(round, schemas.PhaseTrain))
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, o := range objs {
		n += o.Size
	}
	return n
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
		batch := write("batch.npz", func(f *os.File) error { return encodeBatch(f, samples, toks, nil, nil, make([]int64, len(samples)+1)) })
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
