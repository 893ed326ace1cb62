package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"

	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"

	"github.com/roundhouse-rl/roundhouse/internal/npz"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Images reach the trainer by content, not packed into batch.npz
// (docs/design.md §4): the trainer host downloads each distinct blob of
// the batch once from the run's blobs/ into a folder of files named by
// their hash. Packing would move every image three times (S3 → batch
// builder → S3 → trainer) and make the batch grow with the pictures; by
// content each moves once, a retried attempt finds the verified files in
// place, and the trainer can check every file against its name.

// blobName is a blob's name: <sha256 hex>.<ext> (internal/proxy).
var blobName = regexp.MustCompile(`^([0-9a-f]{64})\.[A-Za-z0-9]+$`)

// imageFetch is what fetchImages did, for logs and the benchmark.
type imageFetch struct {
	Images     int   // distinct images of the batch
	Downloaded int   // of them fetched now (the rest were in the folder)
	Bytes      int64 // bytes downloaded
}

// fetchImages puts every image batch.npz names into dir as dir/<name>,
// each verified against its hash before it gets that name, and returns
// dir. A blob missing from S3 or whose content does not hash to its name
// stops the round (non-retryable), naming the key and the first sample
// (episode and call) that sent it.
func (t *Trainer) fetchImages(ctx context.Context, run string, round int32, batchPath, dir string) (imageFetch, error) {
	var res imageFetch
	// The image lists only: a batch's token arrays can be gigabytes.
	arrs, err := npz.ReadFile(batchPath, schemas.BatchImages, schemas.BatchImageIndex, schemas.BatchImageOffsets)
	if err != nil {
		return res, fmt.Errorf("round %d batch: %w", round, err)
	}
	names, _ := arrs[schemas.BatchImages].([]string)
	index, _ := arrs[schemas.BatchImageIndex].([]int32)
	offsets, _ := arrs[schemas.BatchImageOffsets].([]int64)
	res.Images = len(names)
	if len(names) == 0 {
		return res, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, fmt.Errorf("images dir: %w", err)
	}
	l := schemas.Layout{Run: run}
	// firstSample names the sample that sent image j, for errors.
	firstSample := func(j int) string {
		for k, x := range index {
			if int(x) != j {
				continue
			}
			i := 0
			for i+1 < len(offsets) && offsets[i+1] <= int64(k) {
				i++
			}
			// An unreadable samples table leaves the sample named by index.
			samples, _ := store.ReadParquet[schemas.Sample](ctx, t.Store, l.Samples(round))
			return sampleName(samples, i)
		}
		return "no sample"
	}
	var downloaded atomic.Int64
	var bytes atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for j, name := range names {
		m := blobName.FindStringSubmatch(name)
		if m == nil {
			return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"round %d batch names image %q (%s), which is not <sha256>.<ext>", round, name, firstSample(j)), "BadBlob", nil)
		}
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			continue // verified before it got its name
		}
		g.Go(func() error {
			key := l.Blob(name)
			data, err := t.Store.Get(gctx, key)
			if store.IsNotFound(err) {
				return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
					"round %d: image s3://%s/%s is missing (%s sent it): the rollout host never stored it or it was deleted; "+
						"the round cannot train on what the model saw", round, t.Store.Bucket, key, firstSample(j)), "MissingBlob", err)
			}
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			if got := hex.EncodeToString(sum[:]); got != m[1] {
				return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
					"round %d: image s3://%s/%s hashes to %s, not its name: refused (%s sent it)",
					round, t.Store.Bucket, key, got, firstSample(j)), "BadBlob", nil)
			}
			tmp, err := os.CreateTemp(dir, ".blob-*")
			if err != nil {
				return fmt.Errorf("image %s: %w", name, err)
			}
			_, werr := tmp.Write(data)
			if cerr := tmp.Close(); werr == nil {
				werr = cerr
			}
			if werr == nil {
				werr = os.Rename(tmp.Name(), path)
			}
			if werr != nil {
				os.Remove(tmp.Name())
				return fmt.Errorf("image %s: %w", name, werr)
			}
			// A large round's images take a while: keep the heartbeat
			// (2 min timeout) alive while they arrive.
			if n := downloaded.Add(1); n%64 == 0 {
				heartbeat(ctx, fmt.Sprintf("images %d/%d", n, len(names)))
			}
			bytes.Add(int64(len(data)))
			return nil
		})
	}
	err = g.Wait()
	res.Downloaded, res.Bytes = int(downloaded.Load()), bytes.Load()
	return res, err
}

// dropOlderImages removes the image folders of earlier rounds of a run
// (train/<run>/round-<r>-images with r < round): the trainer host keeps
// only what the current round can still need.
func dropOlderImages(runDir string, round int32) {
	entries, err := os.ReadDir(runDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		r, ok := strings.CutPrefix(e.Name(), "round-")
		if !ok {
			continue
		}
		r, ok = strings.CutSuffix(r, "-images")
		if n, err := strconv.Atoi(r); ok && err == nil && int32(n) < round {
			os.RemoveAll(filepath.Join(runDir, e.Name()))
		}
	}
}
