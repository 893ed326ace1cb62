// Package store is Roundhouse's S3 access: objects, files and Parquet tables.
// Every call has a timeout; errors name the bucket and key.
package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/parquet-go/parquet-go"
)

// Config locates the bucket. Empty keys fall back to the AWS default chain.
type Config struct {
	Endpoint  string `json:"endpoint"` // e.g. http://127.0.0.1:9100; empty for AWS
	Region    string `json:"region"`
	Bucket    string `json:"bucket"`
	AccessKey string `json:"-"`
	SecretKey string `json:"-"`
}

// FromEnv reads ROUNDHOUSE_S3_ENDPOINT, ROUNDHOUSE_BUCKET, AWS_REGION,
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, with the dev stack's defaults.
func FromEnv() Config {
	get := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	return Config{
		Endpoint:  get("ROUNDHOUSE_S3_ENDPOINT", "http://127.0.0.1:9100"),
		Region:    get("AWS_REGION", "us-east-1"),
		Bucket:    get("ROUNDHOUSE_BUCKET", "roundhouse"),
		AccessKey: get("AWS_ACCESS_KEY_ID", "roundhouse"),
		SecretKey: get("AWS_SECRET_ACCESS_KEY", "roundhouse-dev-secret"),
	}
}

// OpTimeout bounds each S3 request; large transfers get a longer budget.
const (
	OpTimeout       = 30 * time.Second
	TransferTimeout = 10 * time.Minute
	// minTransferRate sizes a file transfer's timeout: a multi-GB
	// checkpoint shard may take long, but never slower than this.
	minTransferRate = 8 << 20 // bytes per second
)

// transferTimeout is the budget of moving size bytes.
func transferTimeout(size int64) time.Duration {
	return TransferTimeout + time.Duration(size/minTransferRate)*time.Second
}

// Store reads and writes one bucket.
type Store struct {
	c      *s3.Client
	tm     *transfermanager.Client // multipart, parallel parts for large files
	Bucket string
	cfg    Config
}

// New builds a client; it does not contact the server (see Check).
func New(ctx context.Context, cfg Config) (*Store, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(cfg.Region)}
	if cfg.AccessKey != "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	ac, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 config: %w", err)
	}
	c := s3.NewFromConfig(ac, func(o *s3.Options) {
		// Ranged reads carry no whole-object checksum; the SDK would log
		// that at every read.
		o.DisableLogOutputChecksumValidationSkipped = true
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
			o.UsePathStyle = true // self-hosted servers such as versitygw
		}
	})
	return &Store{c: c, tm: transfermanager.New(c), Bucket: cfg.Bucket, cfg: cfg}, nil
}

// Check verifies the server answers and the bucket exists, with a short
// timeout, and says how to fix it when not.
func (s *Store) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := s.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.Bucket})
	if err != nil {
		return fmt.Errorf("S3 bucket %q at %s is not reachable (start the dev stack with `go tool task up`, or set ROUNDHOUSE_S3_ENDPOINT/ROUNDHOUSE_BUCKET): %w", s.Bucket, s.cfg.Endpoint, err)
	}
	return nil
}

// EnsureBucket creates the bucket when it does not exist.
func (s *Store) EnsureBucket(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	if _, err := s.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.Bucket}); err == nil {
		return nil
	}
	_, err := s.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &s.Bucket})
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("create bucket %q: %w", s.Bucket, err)
	}
	return nil
}

// Put writes an object.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, TransferTimeout)
	defer cancel()
	_, err := s.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.Bucket, Key: &key, Body: bytes.NewReader(data)})
	if err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", s.Bucket, key, err)
	}
	return nil
}

// Get reads an object.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, TransferTimeout)
	defer cancel()
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.Bucket, Key: &key})
	if err != nil {
		return nil, fmt.Errorf("get s3://%s/%s: %w", s.Bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	received.Add(int64(len(b)))
	if err != nil {
		return nil, fmt.Errorf("read s3://%s/%s: %w", s.Bucket, key, err)
	}
	return b, nil
}

// received counts the bytes this process downloaded, for benchmarks and
// diagnostics that check a reader fetched only what it needed.
var received atomic.Int64

// Received is the number of object bytes downloaded so far by any Store.
func Received() int64 { return received.Load() }

// Exists reports whether an object exists.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	_, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.Bucket, Key: &key})
	if err == nil {
		return true, nil
	}
	var nf *types.NotFound
	if errors.As(err, &nf) {
		return false, nil
	}
	return false, fmt.Errorf("head s3://%s/%s: %w", s.Bucket, key, err)
}

// PutFile uploads a local file.
func (s *Store) PutFile(ctx context.Context, key, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, transferTimeout(st.Size()))
	defer cancel()
	// The transfer manager switches to a parallel multipart upload above its
	// threshold: single PUTs stop at 5 GB, checkpoint shards may not.
	if _, err := s.tm.UploadObject(ctx, &transfermanager.UploadObjectInput{Bucket: &s.Bucket, Key: &key, Body: f}); err != nil {
		return fmt.Errorf("put %s to s3://%s/%s: %w", path, s.Bucket, key, err)
	}
	return nil
}

// GetFile downloads an object to path atomically (temp file + rename), so a
// crash never leaves a half-written file that looks complete.
func (s *Store) GetFile(ctx context.Context, key, path string) error {
	hctx, hcancel := context.WithTimeout(ctx, OpTimeout)
	head, err := s.c.HeadObject(hctx, &s3.HeadObjectInput{Bucket: &s.Bucket, Key: &key})
	hcancel()
	if err != nil {
		return fmt.Errorf("get s3://%s/%s: %w", s.Bucket, key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, transferTimeout(aws.ToInt64(head.ContentLength)))
	defer cancel()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("download s3://%s/%s: %w", s.Bucket, key, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".download-*")
	if err != nil {
		return fmt.Errorf("download s3://%s/%s: %w", s.Bucket, key, err)
	}
	defer os.Remove(tmp.Name())
	// Ranged parts in parallel, written in place.
	_, err = s.tm.DownloadObject(ctx, &transfermanager.DownloadObjectInput{Bucket: &s.Bucket, Key: &key, WriterAt: tmp})
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		received.Add(aws.ToInt64(head.ContentLength))
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("download s3://%s/%s: %w", s.Bucket, key, err)
	}
	return nil
}

// Object is a listed key and its size.
type Object struct {
	Key  string
	Size int64
}

// List returns every object under prefix, in key order.
func (s *Store) List(ctx context.Context, prefix string) ([]Object, error) {
	ctx, cancel := context.WithTimeout(ctx, TransferTimeout)
	defer cancel()
	var out []Object
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: &s.Bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list s3://%s/%s: %w", s.Bucket, prefix, err)
		}
		for _, o := range page.Contents {
			out = append(out, Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size)})
		}
	}
	return out, nil
}

// EncodeParquet encodes rows as one Parquet file (zstd-compressed columns).
func EncodeParquet[T any](rows []T) ([]byte, error) {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[T](&buf, parquet.Compression(&parquet.Zstd))
	if _, err := w.Write(rows); err != nil {
		return nil, fmt.Errorf("encode parquet: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode parquet: %w", err)
	}
	return buf.Bytes(), nil
}

// WriteParquet stores rows as one Parquet object and returns its size.
func WriteParquet[T any](ctx context.Context, s *Store, key string, rows []T) (int, error) {
	b, err := EncodeParquet(rows)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	return len(b), s.Put(ctx, key, b)
}

// ReadParquet reads every row of a Parquet object.
func ReadParquet[T any](ctx context.Context, s *Store, key string) ([]T, error) {
	b, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	rows, err := parquet.Read[T](bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, fmt.Errorf("decode parquet s3://%s/%s: %w", s.Bucket, key, err)
	}
	return rows, nil
}

// DeletePrefix removes every object under prefix.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	objs, err := s.List(ctx, prefix)
	if err != nil {
		return 0, err
	}
	for i, o := range objs {
		ctx, cancel := context.WithTimeout(ctx, OpTimeout)
		err := s.delete(ctx, o.Key)
		cancel()
		if err != nil {
			return i, err
		}
	}
	return len(objs), nil
}

// Delete removes one object; a missing object is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	return s.delete(ctx, key)
}

// IsNotFound reports whether err says an object does not exist.
func IsNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	var api smithy.APIError
	return errors.As(err, &nsk) || errors.As(err, &nf) || (errors.As(err, &api) && (api.ErrorCode() == "NoSuchKey" || api.ErrorCode() == "NotFound"))
}

func (s *Store) delete(ctx context.Context, key string) error {
	if _, err := s.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.Bucket, Key: &key}); err != nil {
		return fmt.Errorf("delete s3://%s/%s: %w", s.Bucket, key, err)
	}
	return nil
}

// ETag returns the object's entity tag, which changes when its content does.
func (s *Store) ETag(ctx context.Context, key string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	out, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.Bucket, Key: &key})
	if err != nil {
		return "", fmt.Errorf("head s3://%s/%s: %w", s.Bucket, key, err)
	}
	return strings.Trim(aws.ToString(out.ETag), `"`), nil
}
