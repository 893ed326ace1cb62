package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/parquet-go/parquet-go"
	"golang.org/x/sync/errgroup"
)

// A table partition (e.g. calls/round=1/phase=train/) holds one small file
// per episode while a round runs, and one compacted part file after it.
// Readers and compaction treat per-episode files as newer than the part:
// a crash between writing the part and deleting the small files never
// double-counts.

// PartFile is the compacted file of a partition.
const PartFile = "part-00000.parquet"

// RowsPerGroup bounds a compacted row group: about 32–128 MB of calls with
// realistic prompts, the range readers such as DuckDB and Spark like.
const RowsPerGroup = 4096

func isPart(key string) bool { return strings.HasPrefix(path.Base(key), "part-") }

// ReadTable reads every row of a partition once: per-episode files first,
// then part-file rows of episodes no per-episode file holds.
func ReadTable[T any](ctx context.Context, s *Store, dir string, episodeOf func(T) string) ([]T, error) {
	var out []T
	err := scanTable(ctx, s, dir, episodeOf, nil, func(rows []T) error { out = append(out, rows...); return nil })
	return out, err
}

// ScanTable streams a partition's rows to emit in batches, with ReadTable's
// precedence, without holding the table. T may be a subset of the stored
// columns (a narrower struct with the same parquet names): only those
// columns are decoded. skip, when set, leaves out per-episode files by key;
// part-file rows are always emitted, so emit must filter what it does not want.
func ScanTable[T any](ctx context.Context, s *Store, dir string, episodeOf func(T) string, skip func(key string) bool, emit func([]T) error) error {
	return scanTable(ctx, s, dir, episodeOf, skip, emit)
}

func scanTable[T any](ctx context.Context, s *Store, dir string, episodeOf func(T) string, skip func(string) bool, emit func([]T) error) error {
	objs, err := s.List(ctx, dir)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var parts, small []string
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, ".parquet") {
			continue
		}
		if isPart(o.Key) {
			parts = append(parts, o.Key)
			continue
		}
		if skip != nil && skip(o.Key) {
			continue
		}
		small = append(small, o.Key)
	}
	// Per-episode files are many and small (thousands in a large round):
	// fetched smallWindow at a time in parallel, emitted in key order so
	// readers see the same sequence on every run.
	for start := 0; start < len(small); start += smallWindow {
		keys := small[start:min(start+smallWindow, len(small))]
		rows := make([][]T, len(keys))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(smallParallel)
		for i, key := range keys {
			g.Go(func() error {
				var err error
				rows[i], err = ReadParquet[T](gctx, s, key)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		for _, rs := range rows {
			for _, r := range rs {
				seen[episodeOf(r)] = true
			}
			if err := emit(rs); err != nil {
				return err
			}
		}
	}
	for _, key := range parts {
		if err := streamPart(ctx, s, key, func(rows []T) error {
			keep := rows[:0]
			for _, r := range rows {
				if !seen[episodeOf(r)] {
					keep = append(keep, r)
				}
			}
			return emit(keep)
		}); err != nil {
			return err
		}
	}
	return nil
}

// smallParallel and smallWindow bound the per-episode files read at once
// and held before emitting.
const (
	smallParallel = 48
	smallWindow   = 256
)

// partReadBuffer is the size of each ranged read into a part file: large
// enough that a column chunk takes few requests.
const partReadBuffer = 4 << 20

// streamPart reads a large Parquet object in batches with ranged reads:
// memory holds one batch, and only the footer and the column chunks of T's
// columns cross the network.
func streamPart[T any](ctx context.Context, s *Store, key string, emit func([]T) error) error {
	obj, err := s.Open(ctx, key)
	if err != nil {
		return err
	}
	f, err := parquet.OpenFile(obj, obj.Size(), parquet.ReadBufferSize(partReadBuffer),
		parquet.SkipBloomFilters(true), parquet.SkipPageIndex(true))
	if err != nil {
		return fmt.Errorf("open parquet s3://%s/%s: %w", s.Bucket, key, err)
	}
	r := parquet.NewGenericReader[T](f)
	defer r.Close()
	buf := make([]T, 256)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if err := emit(buf[:n]); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("decode s3://%s/%s: %w", s.Bucket, key, err)
		}
	}
}

// CompactStats says what a compaction did.
type CompactStats struct {
	Merged int   `json:"merged"` // per-episode files folded in
	Rows   int64 `json:"rows"`
	Bytes  int64 `json:"bytes"` // size of the part file
}

// Compact folds a partition's per-episode files into its part file (row
// groups of RowsPerGroup rows), then deletes them. Retry-safe: the part is
// complete before any small file goes, and readers prefer small files.
func Compact[T any](ctx context.Context, s *Store, dir string, episodeOf func(T) string) (CompactStats, error) {
	var st CompactStats
	objs, err := s.List(ctx, dir)
	if err != nil {
		return st, err
	}
	var singles []string
	for _, o := range objs {
		if strings.HasSuffix(o.Key, ".parquet") && !isPart(o.Key) {
			singles = append(singles, o.Key)
		}
	}
	if len(singles) == 0 {
		return st, nil
	}
	tmp, err := os.CreateTemp("", "compact-*.parquet")
	if err != nil {
		return st, fmt.Errorf("compact %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	w := parquet.NewGenericWriter[T](tmp, parquet.Compression(&parquet.Zstd), parquet.MaxRowsPerRowGroup(RowsPerGroup))
	err = scanTable(ctx, s, dir, episodeOf, nil, func(rows []T) error {
		st.Rows += int64(len(rows))
		_, err := w.Write(rows)
		return err
	})
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		return st, fmt.Errorf("compact %s: %w", dir, err)
	}
	if err := tmp.Sync(); err != nil {
		return st, fmt.Errorf("compact %s: %w", dir, err)
	}
	if fi, err := tmp.Stat(); err == nil {
		st.Bytes = fi.Size()
	}
	if err := s.PutFile(ctx, dir+PartFile, tmp.Name()); err != nil {
		return st, err
	}
	for _, key := range singles {
		ctx, cancel := context.WithTimeout(ctx, OpTimeout)
		err := s.delete(ctx, key)
		cancel()
		if err != nil {
			return st, err
		}
		st.Merged++
	}
	return st, nil
}
