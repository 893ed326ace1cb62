package activities

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Shape of BenchmarkImageRound's round: a default-sized round (64 groups ×
// 6 attempts) of a vision planner making 16 calls an episode, each sending
// two 50 KB images.
const (
	imgGroups   = 64
	imgAttempts = 6
	imgCalls    = 16
	imgSize     = 50_000 // bytes; random, so no codec or zstd shrinks them
	imgPads     = 256    // <|image_pad|> per image: a 448×448 picture in 28-pixel merged patches
)

// Qwen2-VL's placeholder ids, so the prompt arrays look like the server's
// own expansion (docs/design.md §4).
const (
	visionStart = 151652
	visionEnd   = 151653
	imagePad    = 151655
)

// BenchmarkImageRound measures how a vision round's images reach the
// trainer (docs/design.md §4), on the real S3 server.
//
// "Half of the images repeated across turns" is read as: each call sends
// the episode's camera image, the same in all 16 calls, and one image of
// its own, fresh in every call. So an episode's requests carry 32 image
// references to 17 distinct blobs, and the round 12,288 references to
// 6,528 blobs. The round is stored as the rollout leaves it before
// Compact: per episode its distinct blobs (put once), its call rows and its
// episode row.
//
// Timed: BuildBatch, then fetchImages into a fresh folder and again into
// the same folder (a retried Train attempt). Packing the images into
// batch.npz is not implemented; what it would move is computed.
func BenchmarkImageRound(b *testing.B) {
	stack := itest.Start(b)
	s := stack.Store
	ctx := context.Background()
	const run, round = "bench-images", 1
	l := schemas.Layout{Run: run}
	h := schemas.Harness{Name: "bench-vlm"}
	h.Model.Vision = true
	if err := store.PutJSON(ctx, s, l.Harness(), h); err != nil {
		b.Fatal(err)
	}
	setup := time.Now()
	refs := writeImageRound(b, s, run, round)
	objs, err := s.List(ctx, l.Prefix()+"blobs/")
	if err != nil {
		b.Fatal(err)
	}
	var stored int64
	for _, o := range objs {
		stored += o.Size
	}
	carried := int64(refs) * imgSize
	storedIn := time.Since(setup)

	c := &Records{Store: s}
	tr := &Trainer{Store: s}
	in := BatchInput{Run: run, Round: round, MaxCallsPerEpisode: imgCalls, Selection: "first", Seed: 1}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		sum, err := c.BuildBatch(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		build := time.Since(start)

		// Getting batch.npz is the trainer's cost with or without images.
		b.StopTimer()
		tmp := b.TempDir()
		batch := filepath.Join(tmp, schemas.BatchFile)
		if err := s.GetFile(ctx, sum.BatchKey, batch); err != nil {
			b.Fatal(err)
		}
		st, err := os.Stat(batch)
		if err != nil {
			b.Fatal(err)
		}
		dir := filepath.Join(tmp, "images")
		b.StartTimer()

		start = time.Now()
		first, err := tr.fetchImages(ctx, run, round, batch, dir)
		if err != nil {
			b.Fatal(err)
		}
		ship := time.Since(start)
		start = time.Now()
		retry, err := tr.fetchImages(ctx, run, round, batch, dir)
		if err != nil {
			b.Fatal(err)
		}
		again := time.Since(start)

		b.StopTimer()
		if sum.Images != len(objs) || sum.ImageRefs != refs || first.Downloaded != sum.Images || retry.Downloaded != 0 {
			b.Fatalf("batch %d images / %d refs (stored %d / %d); fetched %d then %d",
				sum.Images, sum.ImageRefs, len(objs), refs, first.Downloaded, retry.Downloaded)
		}
		distinct := int64(sum.Images) * imgSize
		packed, byContent := 3*distinct, first.Bytes
		b.ReportMetric(float64(carried)/1e6, "carried-MB")
		b.ReportMetric(float64(stored)/1e6, "stored-MB")
		b.ReportMetric(float64(carried)/float64(stored), "dedupe-x")
		b.ReportMetric(float64(build.Milliseconds()), "build-ms")
		b.ReportMetric(float64(st.Size())/1e6, "batch-MB")
		b.ReportMetric(float64(sum.Images), "images")
		b.ReportMetric(float64(sum.ImageRefs), "image-refs")
		b.ReportMetric(float64(ship.Milliseconds()), "fetch-ms")
		b.ReportMetric(float64(first.Bytes)/1e6, "fetched-MB")
		b.ReportMetric(float64(again.Milliseconds()), "refetch-ms")
		b.ReportMetric(float64(retry.Bytes)/1e6, "refetched-MB")
		b.ReportMetric(float64(packed)/1e6, "packed-moved-MB")
		b.ReportMetric(float64(byContent)/1e6, "by-content-MB")
		var t strings.Builder
		row := func(what, v string) { fmt.Fprintf(&t, "| %s | %s |\n", what, v) }
		row("requests carried (image refs × 50 KB)", fmt.Sprintf("%d refs, %.1f MB", refs, float64(carried)/1e6))
		row("stored under blobs/ (distinct)", fmt.Sprintf("%d blobs, %.1f MB: %.2f× dedupe", len(objs), float64(stored)/1e6, float64(carried)/float64(stored)))
		row("BuildBatch", fmt.Sprintf("%d ms, batch.npz %.1f MB, %d samples, %d images, %d image refs",
			build.Milliseconds(), float64(st.Size())/1e6, sum.Samples, sum.Images, sum.ImageRefs))
		row("fetchImages, fresh folder", fmt.Sprintf("%d ms, %d images, %.1f MB downloaded (%.0f MB/s)",
			ship.Milliseconds(), first.Downloaded, float64(first.Bytes)/1e6, float64(first.Bytes)/1e6/ship.Seconds()))
		row("fetchImages again, same folder (retry)", fmt.Sprintf("%d ms, %d images, %.1f MB downloaded",
			again.Milliseconds(), retry.Downloaded, float64(retry.Bytes)/1e6))
		row("images moved: packed into batch.npz (3 × distinct, computed) vs by content (1 ×)",
			fmt.Sprintf("%.1f MB (batch.npz would be %.1f MB) vs %.1f MB", float64(packed)/1e6, float64(st.Size()+distinct)/1e6, float64(byContent)/1e6))
		// One Logf of at most 10 lines, the last iteration's: go test trims
		// longer benchmark output.
		if i == b.N-1 {
			b.Logf("setup (not timed): %d episodes, %d calls stored with their blobs in %s\n| what | measured |\n|---|---|\n%s",
				imgGroups*imgAttempts, imgGroups*imgAttempts*imgCalls, storedIn.Round(time.Millisecond), t.String())
		}
		b.StartTimer()
	}
}

// writeImageRound stores the round's blobs, call rows and episode rows as
// the rollout activity does, many episodes at a time, and returns the
// number of image references the calls made.
func writeImageRound(b *testing.B, s *store.Store, run string, round int32) int {
	b.Helper()
	l := schemas.Layout{Run: run}
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(16) // concurrent episodes, each putting its blobs in turn
	for gi := 0; gi < imgGroups; gi++ {
		for a := 0; a < imgAttempts; a++ {
			g.Go(func() error {
				id := schemas.EpisodeID(round, schemas.PhaseTrain, int32(gi), int32(a))
				// Image k of the episode: 0 the camera, 1..16 the calls' own.
				names := make([]string, imgCalls+1)
				data := make([]byte, imgSize)
				for k := range names {
					var seed [32]byte
					binary.LittleEndian.PutUint64(seed[:], uint64(gi))
					binary.LittleEndian.PutUint64(seed[8:], uint64(a))
					binary.LittleEndian.PutUint64(seed[16:], uint64(k))
					rand.NewChaCha8(seed).Read(data)
					sum := sha256.Sum256(data)
					names[k] = hex.EncodeToString(sum[:]) + ".png"
					if err := s.Put(ctx, l.Blob(names[k]), data); err != nil {
						return err
					}
				}
				calls := make([]schemas.Call, imgCalls)
				for ci := range calls {
					calls[ci] = imageCall(run, round, id, gi, a, ci, names[0], names[ci+1])
				}
				if _, err := store.WriteParquet(ctx, s, l.Calls(round, schemas.PhaseTrain, id), calls); err != nil {
					return err
				}
				// Two successes in every group of six: every group has signal.
				ok := (gi+a)%3 == 0
				ep := schemas.Episode{Run: run, Round: round, Phase: schemas.PhaseTrain, EpisodeID: id, Group: int32(gi),
					Attempt: int32(a), Valid: true, Success: ok, Reward: map[bool]float64{true: 1}[ok],
					NumCalls: imgCalls, SuccessCall: -1}
				_, err := store.WriteParquet(ctx, s, l.Episodes(round, schemas.PhaseTrain, id), []schemas.Episode{ep})
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	return imgGroups * imgAttempts * imgCalls * 2
}

// imageCall is call ci of an episode as the proxy records it: the request
// references its two images as blobs, and the prompt ids hold the system
// prompt, one line per earlier turn, then the camera and the call's own
// image as placeholder runs.
func imageCall(run string, round int32, id string, g, a, ci int, camera, own string) schemas.Call {
	tok := func(i int) int32 { return int32((g*7919 + a*104729 + i*31) % 151_000) }
	var p []int32
	for i := 0; i < 600+120*ci; i++ {
		p = append(p, tok(i))
	}
	for range 2 {
		p = append(p, visionStart)
		for range imgPads {
			p = append(p, imagePad)
		}
		p = append(p, visionEnd)
	}
	for i := 0; i < 40; i++ {
		p = append(p, tok(i+ci))
	}
	n := 120 + (g+a+ci*13)%130
	compl := make([]int32, n)
	lp := make([]float32, n)
	for i := range compl {
		compl[i] = tok(i + 100000*ci)
		lp[i] = -float32(i%17) / 10
	}
	img := func(name string) string {
		return `{"type":"image_url","image_url":{"url":"blob://sha256/` + name + `"}}`
	}
	req := `{"model":"m","messages":[{"role":"user","content":[` + img(camera) + `,` + img(own) +
		`,{"type":"text","text":"next action?"}]}]}`
	return schemas.Call{Run: run, Round: round, Phase: schemas.PhaseTrain, EpisodeID: id, Group: int32(g),
		Attempt: int32(a), CallIndex: int32(ci), Request: req, PromptTokenIDs: p, CompletionTokenIDs: compl,
		CompletionLogprobs: lp, PromptTokens: int32(len(p)), CompletionTokens: int32(n), Trainable: true,
		Images: []string{camera, own}}
}
