package store

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// RangeReader reads parts of one S3 object by byte range (io.ReaderAt), so a
// Parquet reader fetches the footer and the column chunks it decodes and
// nothing else: a column projection over a multi-GB part file downloads
// only the columns it names.
type RangeReader struct {
	s    *Store
	ctx  context.Context
	key  string
	size int64
	read atomic.Int64
}

// Open returns the object at key for ranged reads.
func (s *Store) Open(ctx context.Context, key string) (*RangeReader, error) {
	hctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	head, err := s.c.HeadObject(hctx, &s3.HeadObjectInput{Bucket: &s.Bucket, Key: &key})
	if err != nil {
		return nil, fmt.Errorf("open s3://%s/%s: %w", s.Bucket, key, err)
	}
	return &RangeReader{s: s, ctx: ctx, key: key, size: aws.ToInt64(head.ContentLength)}, nil
}

// Size is the object's length in bytes.
func (o *RangeReader) Size() int64 { return o.size }

// Fetched is how many bytes the reads so far transferred.
func (o *RangeReader) Fetched() int64 { return o.read.Load() }

// ReadAt fetches len(p) bytes at off with one ranged GET.
func (o *RangeReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= o.size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), o.size)
	ctx, cancel := context.WithTimeout(o.ctx, transferTimeout(end-off))
	defer cancel()
	rng := fmt.Sprintf("bytes=%d-%d", off, end-1)
	out, err := o.s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &o.s.Bucket, Key: &o.key, Range: &rng})
	if err != nil {
		return 0, fmt.Errorf("read s3://%s/%s %s: %w", o.s.Bucket, o.key, rng, err)
	}
	defer out.Body.Close()
	n, err := io.ReadFull(out.Body, p[:end-off])
	o.read.Add(int64(n))
	received.Add(int64(n))
	if err != nil {
		return n, fmt.Errorf("read s3://%s/%s %s: %w", o.s.Bucket, o.key, rng, err)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
