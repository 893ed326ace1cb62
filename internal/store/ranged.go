package store

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.opentelemetry.io/otel/attribute"

	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
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
func (s *Store) Open(ctx context.Context, key string) (_ *RangeReader, err error) {
	sctx, span := s.span(ctx, "s3.Open", key)
	defer func() { instr.End(span, err) }()
	hctx, cancel := context.WithTimeout(sctx, OpTimeout)
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
func (o *RangeReader) ReadAt(p []byte, off int64) (n int, err error) {
	if off >= o.size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), o.size)
	ctx, span := o.s.span(o.ctx, "s3.ReadAt", o.key)
	defer func() {
		span.SetAttributes(attribute.Int64("s3.offset", off))
		serr := err
		if serr == io.EOF { // a short read at the end is no failure
			serr = nil
		}
		endSpan(span, serr, int64(n))
	}()
	ctx, cancel := context.WithTimeout(ctx, transferTimeout(end-off))
	defer cancel()
	rng := fmt.Sprintf("bytes=%d-%d", off, end-1)
	out, err := o.s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &o.s.Bucket, Key: &o.key, Range: &rng})
	if err != nil {
		return 0, fmt.Errorf("read s3://%s/%s %s: %w", o.s.Bucket, o.key, rng, err)
	}
	defer out.Body.Close()
	n, err = io.ReadFull(out.Body, p[:end-off])
	o.read.Add(int64(n))
	received.Add(int64(n))
	instr.S3Read(ctx, int64(n))
	if err != nil {
		return n, fmt.Errorf("read s3://%s/%s %s: %w", o.s.Bucket, o.key, rng, err)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
