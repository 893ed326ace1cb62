package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// WeightsIDPattern is what a weights id found by a sweep may look like: it
// becomes part of report tags, workflow ids and S3 keys.
var WeightsIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// SweepSource says where a sweep looks for weights and which run
// evaluates them.
type SweepSource struct {
	Source string // a run name, or s3://bucket/prefix/
	Run    string // the evaluation run
	// HarnessDigest, when set, must be the digest of the evaluation run's
	// harness.json: the sweep's Eval workflows carry the harness of
	// `sweep create`, while episodes read the run's file.
	HarnessDigest string
}

// SweepWeights is a complete weights id under a sweep's source.
type SweepWeights struct {
	ID          string
	Prefix      string // its key prefix in the bucket, ending in "/"
	Digest      string // schemas.WeightsDigest of its manifest's files
	CreatedAtMS int64
}

// weightsPrefix is the key prefix whose sub-directories are the source's
// weights ids.
func (c *Records) weightsPrefix(src string) (string, error) {
	if !strings.HasPrefix(src, "s3://") {
		return schemas.Layout{Run: src}.Prefix() + "weights/", nil
	}
	bucket, prefix, err := store.ParseURL(src)
	if err != nil {
		return "", temporal.NewNonRetryableApplicationError(err.Error(), "BadSource", err)
	}
	if bucket != c.Store.Bucket {
		err := fmt.Errorf("weights prefix %s is in bucket %s, workers read bucket %s: copy the weights into it", src, bucket, c.Store.Bucket)
		return "", temporal.NewNonRetryableApplicationError(err.Error(), "BadSource", err)
	}
	return prefix, nil
}

// ListSweepWeights lists the complete weights ids under the source — those
// whose manifest.json exists and whose listed files are all stored with
// their sizes — oldest first (by the manifest's creation time, then id).
func (c *Records) ListSweepWeights(ctx context.Context, in SweepSource) ([]SweepWeights, error) {
	log := activity.GetLogger(ctx)
	if in.HarnessDigest != "" {
		var h schemas.Harness
		key := schemas.Layout{Run: in.Run}.Harness()
		b, err := c.Store.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("harness of evaluation run %s: %w", in.Run, err)
		}
		if err := json.Unmarshal(b, &h); err != nil {
			return nil, fmt.Errorf("harness of evaluation run %s (%s): %w", in.Run, key, err)
		}
		if h.Digest != in.HarnessDigest {
			err := fmt.Errorf("run %s's harness.json has digest %s, the sweep was created with %s: recreate the sweep (starter sweep delete, then create) with the run's harness file and vars", in.Run, h.Digest, in.HarnessDigest)
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), "HarnessChanged", err)
		}
	}
	prefix, err := c.weightsPrefix(in.Source)
	if err != nil {
		return nil, err
	}
	objs, err := c.Store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	size := make(map[string]int64, len(objs))
	var ids []string
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, prefix)
		size[rel] = o.Size
		if id, ok := strings.CutSuffix(rel, "/"+schemas.WeightsManifestFile); ok && !strings.Contains(id, "/") {
			ids = append(ids, id)
		}
	}
	var out []SweepWeights
	for _, id := range ids {
		if !WeightsIDPattern.MatchString(id) {
			log.Warn("weights id skipped: use letters, digits, '.', '_' or '-'", "id", id, "prefix", prefix)
			continue
		}
		man, err := weights.Read(ctx, c.Store, prefix+id+"/")
		if err != nil {
			log.Warn("weights skipped: unreadable manifest", "id", id, "error", err)
			continue
		}
		complete := true
		for _, f := range man.Files {
			if got, ok := size[id+"/"+man.Dir+f.Name]; !ok || got != f.Size {
				complete = false
				log.Warn("weights skipped: a file is missing or has another size than the manifest says", "id", id, "file", f.Name)
				break
			}
		}
		if complete {
			out = append(out, SweepWeights{ID: id, Prefix: prefix + id + "/", Digest: schemas.WeightsDigest(man.Files), CreatedAtMS: man.CreatedAt})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAtMS != out[j].CreatedAtMS {
			return out[i].CreatedAtMS < out[j].CreatedAtMS
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// ImportInput copies one weights id into the evaluation run.
type ImportInput struct {
	From   string // key prefix of the source weights, ending in "/"
	Run    string
	Target string // the weights id in the run (schemas.ImportedID)
	Digest string // schemas.WeightsDigest of the source when it was listed
}

// ImportWeights copies the weights under From to the run's weights/<Target>/
// by download and upload: every file is checked against the source
// manifest's SHA-256 on the way, and the copy's manifest is written last.
// A complete copy with the same files is kept as it is; one with other
// files is never overwritten.
func (c *Records) ImportWeights(ctx context.Context, in ImportInput) (schemas.WeightsManifest, error) {
	to := schemas.Layout{Run: in.Run}.Weights(in.Target)
	src, err := weights.Read(ctx, c.Store, in.From)
	if err != nil {
		return src, err
	}
	if in.Digest != "" && schemas.WeightsDigest(src.Files) != in.Digest {
		err := fmt.Errorf("weights s3://%s/%s changed since the sweep listed them: the next sweep evaluates them as they are then", c.Store.Bucket, in.From)
		return src, temporal.NewNonRetryableApplicationError(err.Error(), "WeightsChanged", err)
	}
	// The worker repeats this while the copy runs (internal/heartbeat).
	heartbeat(ctx, "import "+in.Target)
	man, err := weights.Copy(ctx, c.Store, in.From, to, in.Target)
	if errors.Is(err, weights.ErrConflict) {
		return man, temporal.NewNonRetryableApplicationError(err.Error(), "WeightsConflict", err)
	}
	return man, err
}

// ReadLeaderboard returns a sweep's leaderboard; a sweep that never wrote
// one has an empty one.
func (c *Records) ReadLeaderboard(ctx context.Context, name string) (schemas.Leaderboard, error) {
	lb := schemas.Leaderboard{Sweep: name}
	key := schemas.SweepLeaderboard(name)
	b, err := c.Store.Get(ctx, key)
	if store.IsNotFound(err) {
		return lb, nil
	}
	if err != nil {
		return lb, err
	}
	if err := json.Unmarshal(b, &lb); err != nil {
		return lb, fmt.Errorf("leaderboard s3://%s/%s: %w", c.Store.Bucket, key, err)
	}
	return lb, nil
}

// FoundReport is a report looked up by key; Found is false when absent.
type FoundReport struct {
	Found  bool
	Report schemas.Report
}

// FindReport reads a report if it exists, so a sweep that stopped between
// an evaluation and its leaderboard update does not evaluate again. It
// returns the report's history copy (schemas.Report.ForHistory).
func (c *Records) FindReport(ctx context.Context, key string) (FoundReport, error) {
	b, err := c.Store.Get(ctx, key)
	if store.IsNotFound(err) {
		return FoundReport{}, nil
	}
	if err != nil {
		return FoundReport{}, err
	}
	var rep schemas.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return FoundReport{}, fmt.Errorf("report s3://%s/%s: %w", c.Store.Bucket, key, err)
	}
	return FoundReport{Found: true, Report: rep.ForHistory()}, nil
}

// WriteLeaderboard sorts the entries (report.SortLeaderboard) and writes
// leaderboard.json, then leaderboard.md.
func (c *Records) WriteLeaderboard(ctx context.Context, lb schemas.Leaderboard) error {
	lb.UpdatedAtMS = time.Now().UnixMilli()
	report.SortLeaderboard(lb.Entries)
	if err := store.PutJSON(ctx, c.Store, schemas.SweepLeaderboard(lb.Sweep), lb); err != nil {
		return err
	}
	return c.Store.Put(ctx, schemas.SweepLeaderboardMarkdown(lb.Sweep), []byte(report.LeaderboardMarkdown(lb)))
}
