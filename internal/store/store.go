// Package store is Roundhouse's S3 access: objects, files and Parquet tables.
// Every call has a timeout; errors name the bucket and key.
package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
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
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/roundhouse-rl/roundhouse/internal/telemetry/instr"
)

// Config locates the bucket. Without static keys the AWS default credential
// chain applies (AWS_PROFILE, web identity/IRSA, ECS and EC2 instance roles).
type Config struct {
	Endpoint string `json:"endpoint"` // e.g. http://127.0.0.1:9100; empty for AWS
	Region   string `json:"region"`   // empty: AWS_REGION or the profile's, else us-east-1
	Bucket   string `json:"bucket"`
	// PathStyle addresses buckets as endpoint/bucket instead of
	// bucket.endpoint; nil means path-style exactly when Endpoint is set
	// (self-hosted servers such as versitygw or MinIO rarely have the
	// wildcard DNS that virtual-hosted addressing needs).
	PathStyle    *bool  `json:"path_style,omitempty"`
	AccessKey    string `json:"-"`
	SecretKey    string `json:"-"`
	SessionToken string `json:"-"`
	// devKeys marks AccessKey/SecretKey as the dev stack's defaults: they
	// are used only while Endpoint stays a local one, so a flag that points
	// the config elsewhere (--s3-endpoint "" for AWS) falls back to the
	// default chain instead of sending the dev secret.
	devKeys bool
}

// The dev stack's S3 (versitygw) credentials. They are public, and apply
// only to a plain-http endpoint on this machine when no keys are set.
const (
	DevAccessKey = "roundhouse"
	DevSecretKey = "roundhouse-dev-secret"
	DevEndpoint  = "http://127.0.0.1:9100"
)

// FromEnv reads ROUNDHOUSE_S3_ENDPOINT (unset: the dev stack's; set and
// empty: AWS), ROUNDHOUSE_BUCKET, ROUNDHOUSE_S3_PATH_STYLE, AWS_REGION and
// the static keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN. Without keys, a local endpoint gets the dev stack's
// credentials and any other the AWS default chain.
func FromEnv() Config {
	c := Config{
		Endpoint:     DevEndpoint,
		Region:       os.Getenv("AWS_REGION"),
		Bucket:       "roundhouse",
		AccessKey:    os.Getenv("AWS_ACCESS_KEY_ID"),
		SecretKey:    os.Getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken: os.Getenv("AWS_SESSION_TOKEN"),
	}
	if v, ok := os.LookupEnv("ROUNDHOUSE_S3_ENDPOINT"); ok {
		c.Endpoint = v
	}
	if v := os.Getenv("ROUNDHOUSE_BUCKET"); v != "" {
		c.Bucket = v
	}
	if v, err := strconv.ParseBool(os.Getenv("ROUNDHOUSE_S3_PATH_STYLE")); err == nil {
		c.PathStyle = &v
	}
	if c.AccessKey == "" && IsLocalEndpoint(c.Endpoint) {
		c.AccessKey, c.SecretKey, c.SessionToken, c.devKeys = DevAccessKey, DevSecretKey, "", true
	}
	return c
}

// IsLocalEndpoint reports whether endpoint is plain http on this machine,
// where the dev stack's public credentials may apply.
func IsLocalEndpoint(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" {
		return false
	}
	switch u.Hostname() {
	case "127.0.0.1", "localhost", "::1":
		return true
	}
	return false
}

// StaticKeys returns the keys New signs with; all empty means the AWS
// default credential chain.
func (c Config) StaticKeys() (accessKey, secretKey, sessionToken string) {
	if c.AccessKey == "" || (c.devKeys && !IsLocalEndpoint(c.Endpoint)) {
		return "", "", ""
	}
	return c.AccessKey, c.SecretKey, c.SessionToken
}

// UsesPathStyle resolves PathStyle.
func (c Config) UsesPathStyle() bool {
	if c.PathStyle != nil {
		return *c.PathStyle
	}
	return c.Endpoint != ""
}

// String shows where the bucket is and how it is reached, never a secret:
// fmt's %v and %+v use it, so a Config in an error or log line is safe.
func (c Config) String() string {
	creds := "default chain"
	if ak, _, _ := c.StaticKeys(); ak != "" {
		creds = "static keys " + redact(ak)
		if c.devKeys {
			creds = "dev stack keys"
		}
	}
	ep := c.Endpoint
	if ep == "" {
		ep = "AWS"
	}
	return fmt.Sprintf("s3://%s at %s (region %q, path-style %t, %s)", c.Bucket, ep, c.Region, c.UsesPathStyle(), creds)
}

// GoString keeps secrets out of %#v.
func (c Config) GoString() string { return "store.Config{" + c.String() + "}" }

// LogValue keeps secrets out of slog output.
func (c Config) LogValue() slog.Value {
	ak, _, _ := c.StaticKeys()
	return slog.GroupValue(slog.String("endpoint", c.Endpoint), slog.String("region", c.Region),
		slog.String("bucket", c.Bucket), slog.Bool("path_style", c.UsesPathStyle()),
		slog.String("access_key", redact(ak)))
}

// redact keeps a key recognisable in logs (its first 4 characters, as AWS
// key ids start with their type) without revealing it.
func redact(s string) string {
	if s == "" {
		return ""
	}
	if len(s) <= 8 {
		return "***"
	}
	return s[:4] + "***"
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
	var opts []func(*awsconfig.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	if ak, sk, tok := cfg.StaticKeys(); ak != "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(ak, sk, tok)))
	}
	// Otherwise the default chain: env keys, AWS_PROFILE and SSO, web
	// identity (IRSA), container and instance roles. It resolves lazily, at
	// the first request, so a missing credential surfaces in Check.
	ac, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 config: %w", err)
	}
	if ac.Region == "" {
		ac.Region = "us-east-1" // S3 needs one; self-hosted servers ignore it
	}
	c := s3.NewFromConfig(ac, func(o *s3.Options) {
		// Ranged reads carry no whole-object checksum; the SDK would log
		// that at every read.
		o.DisableLogOutputChecksumValidationSkipped = true
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.UsesPathStyle()
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

// CheckWritable proves the bucket takes writes and deletes with these
// credentials: it puts and deletes a small probe object under
// .roundhouse-probe/, so a read-only or missing bucket fails at start-up
// instead of after the first episode ran.
func (s *Store) CheckWritable(ctx context.Context) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	host, _ := os.Hostname()
	key := fmt.Sprintf(".roundhouse-probe/%s-%d-%s", host, os.Getpid(), hex.EncodeToString(rnd[:]))
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Up to three tries, 300 ms apart, on ExistingObjectIsDirectory only:
	// versitygw's posix backend gave it to one of several rig hosts
	// probing at once (CI), likely as another's delete removed the
	// emptied folder.
	var err error
	for try := range 3 {
		if try > 0 {
			time.Sleep(300 * time.Millisecond)
		}
		_, err = s.c.PutObject(pctx, &s3.PutObjectInput{Bucket: &s.Bucket, Key: &key, Body: strings.NewReader("roundhouse write probe\n")})
		var api smithy.APIError
		if err == nil || pctx.Err() != nil || !errors.As(err, &api) || api.ErrorCode() != "ExistingObjectIsDirectory" {
			break // done, or a refusal that a retry will not change
		}
	}
	if err != nil {
		return fmt.Errorf("S3 bucket %q at %s is not writable (put %s): %s: %w", s.Bucket, s.cfg.endpointName(), key, bucketHint(err), err)
	}
	if _, err := s.c.DeleteObject(pctx, &s3.DeleteObjectInput{Bucket: &s.Bucket, Key: &key}); err != nil {
		return fmt.Errorf("S3 bucket %q at %s takes writes but not deletes (delete %s): Roundhouse replaces and compacts objects, grant s3:DeleteObject: %w", s.Bucket, s.cfg.endpointName(), key, err)
	}
	return nil
}

func (c Config) endpointName() string {
	if c.Endpoint == "" {
		return "AWS"
	}
	return c.Endpoint
}

// bucketHint turns the S3 error codes a start-up check meets into the fix.
func bucketHint(err error) string {
	var api smithy.APIError
	code := ""
	if errors.As(err, &api) {
		code = api.ErrorCode()
	}
	switch code {
	case "NoSuchBucket", "NotFound":
		return "the bucket does not exist: create it, or pass --bucket / ROUNDHOUSE_BUCKET"
	case "AccessDenied", "Forbidden", "AllAccessDisabled":
		return "access denied: give these credentials s3:PutObject and s3:DeleteObject on the bucket, or use others (AWS_PROFILE, AWS_ACCESS_KEY_ID)"
	case "InvalidAccessKeyId", "SignatureDoesNotMatch":
		return "the credentials are wrong: check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE"
	}
	return "check the endpoint, bucket and credentials"
}

// span starts the span of one S3 operation on key (a prefix for List).
// op is a constant such as "s3.Put": span names stay few.
func (s *Store) span(ctx context.Context, op, key string) (context.Context, trace.Span) {
	return instr.Tracer.Start(ctx, op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("aws.s3.bucket", s.Bucket), attribute.String("aws.s3.key", key)))
}

// endSpan ends an operation's span with the bytes it moved (n < 0: none).
func endSpan(span trace.Span, err error, n int64) {
	if n >= 0 {
		span.SetAttributes(attribute.Int64("s3.bytes", n))
	}
	instr.End(span, err)
}

// Put writes an object.
func (s *Store) Put(ctx context.Context, key string, data []byte) (err error) {
	ctx, span := s.span(ctx, "s3.Put", key)
	defer func() { endSpan(span, err, int64(len(data))) }()
	ctx, cancel := context.WithTimeout(ctx, TransferTimeout)
	defer cancel()
	if _, err := s.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.Bucket, Key: &key, Body: bytes.NewReader(data)}); err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", s.Bucket, key, err)
	}
	instr.S3Written(ctx, int64(len(data)))
	return nil
}

// Copy copies an object within the bucket, server-side: publishing a
// staged record moves no bytes through the worker.
func (s *Store) Copy(ctx context.Context, src, dst string) (err error) {
	ctx, span := s.span(ctx, "s3.Copy", dst)
	defer func() { instr.End(span, err) }()
	ctx, cancel := context.WithTimeout(ctx, TransferTimeout)
	defer cancel()
	source := url.PathEscape(s.Bucket + "/" + src)
	source = strings.ReplaceAll(source, "%2F", "/")
	if _, err := s.c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &s.Bucket, Key: &dst, CopySource: &source}); err != nil {
		return fmt.Errorf("copy s3://%s/%s to %s: %w", s.Bucket, src, dst, err)
	}
	return nil
}

// PutIfAbsent writes an object only if no object has its key (S3's
// conditional write, If-None-Match: *), and says whether it did: false,
// with a nil error, when another writer got there first. S3 answers a
// write racing with another on the same key 409; that too means the key
// is taken, by a writer this one does not know, so the caller reads it.
func (s *Store) PutIfAbsent(ctx context.Context, key string, data []byte) (created bool, err error) {
	ctx, span := s.span(ctx, "s3.PutIfAbsent", key)
	defer func() { endSpan(span, err, int64(len(data))) }()
	ctx, cancel := context.WithTimeout(ctx, TransferTimeout)
	defer cancel()
	star := "*"
	_, err = s.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.Bucket, Key: &key, Body: bytes.NewReader(data), IfNoneMatch: &star})
	var api smithy.APIError
	switch {
	case err == nil:
		instr.S3Written(ctx, int64(len(data)))
		return true, nil
	case errors.As(err, &api) && (api.ErrorCode() == "PreconditionFailed" || api.ErrorCode() == "ConditionalRequestConflict"):
		return false, nil
	}
	return false, fmt.Errorf("put s3://%s/%s if absent: %w", s.Bucket, key, err)
}

// Get reads an object.
func (s *Store) Get(ctx context.Context, key string) (b []byte, err error) {
	ctx, span := s.span(ctx, "s3.Get", key)
	defer func() { endSpan(span, err, int64(len(b))) }()
	ctx, cancel := context.WithTimeout(ctx, TransferTimeout)
	defer cancel()
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.Bucket, Key: &key})
	if err != nil {
		return nil, fmt.Errorf("get s3://%s/%s: %w", s.Bucket, key, err)
	}
	defer out.Body.Close()
	b, err = io.ReadAll(out.Body)
	received.Add(int64(len(b)))
	instr.S3Read(ctx, int64(len(b)))
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
func (s *Store) Exists(ctx context.Context, key string) (ok bool, err error) {
	ctx, span := s.span(ctx, "s3.Exists", key)
	defer func() {
		span.SetAttributes(attribute.Bool("s3.exists", ok))
		instr.End(span, err)
	}()
	ctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	_, err = s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.Bucket, Key: &key})
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
func (s *Store) PutFile(ctx context.Context, key, path string) (err error) {
	ctx, span := s.span(ctx, "s3.PutFile", key)
	size := int64(-1)
	defer func() { endSpan(span, err, size) }()
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	size = st.Size()
	ctx, cancel := context.WithTimeout(ctx, transferTimeout(size))
	defer cancel()
	// The transfer manager switches to a parallel multipart upload above its
	// threshold: single PUTs stop at 5 GB, checkpoint shards may not.
	if _, err := s.tm.UploadObject(ctx, &transfermanager.UploadObjectInput{Bucket: &s.Bucket, Key: &key, Body: f}); err != nil {
		return fmt.Errorf("put %s to s3://%s/%s: %w", path, s.Bucket, key, err)
	}
	instr.S3Written(ctx, size)
	return nil
}

// GetFile downloads an object to path atomically (temp file + rename), so a
// crash never leaves a half-written file that looks complete.
func (s *Store) GetFile(ctx context.Context, key, path string) (err error) {
	ctx, span := s.span(ctx, "s3.GetFile", key)
	size := int64(-1)
	defer func() { endSpan(span, err, size) }()
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
		size = aws.ToInt64(head.ContentLength)
		received.Add(size)
		instr.S3Read(ctx, size)
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
func (s *Store) List(ctx context.Context, prefix string) (out []Object, err error) {
	ctx, span := s.span(ctx, "s3.List", prefix)
	defer func() {
		span.SetAttributes(attribute.Int("s3.objects", len(out)))
		instr.End(span, err)
	}()
	ctx, cancel := context.WithTimeout(ctx, TransferTimeout)
	defer cancel()
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

// DeletePrefix removes every object under prefix and returns how many it
// deleted.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	objs, err := s.List(ctx, prefix)
	if err != nil {
		return 0, err
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return s.DeleteKeys(ctx, keys)
}

// deleteBatch is S3's limit of keys per DeleteObjects request.
const deleteBatch = 1000

// DeleteKeys removes keys, up to 1000 per request (DeleteObjects), and
// returns how many it deleted. A missing key counts as deleted: S3 answers
// it as deleted, so running it again after a partial failure is safe.
func (s *Store) DeleteKeys(ctx context.Context, keys []string) (int, error) {
	n := 0
	for len(keys) > 0 {
		batch := keys[:min(len(keys), deleteBatch)]
		keys = keys[len(batch):]
		if err := s.deleteObjects(ctx, batch); err != nil {
			return n, err
		}
		n += len(batch)
	}
	return n, nil
}

// deleteObjects deletes one batch; any key S3 reports as not deleted fails
// it, naming the first such key and how many there were.
func (s *Store) deleteObjects(ctx context.Context, keys []string) (err error) {
	ctx, span := s.span(ctx, "s3.DeleteObjects", keys[0])
	defer func() {
		span.SetAttributes(attribute.Int("s3.objects", len(keys)))
		instr.End(span, err)
	}()
	ctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	ids := make([]types.ObjectIdentifier, len(keys))
	for i, k := range keys {
		ids[i] = types.ObjectIdentifier{Key: aws.String(k)}
	}
	out, err := s.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.Bucket,
		Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
	if err != nil {
		return fmt.Errorf("delete %d objects from s3://%s/%s: %w", len(keys), s.Bucket, keys[0], err)
	}
	var failed []types.Error
	for _, e := range out.Errors {
		// A key already gone is what the caller wants.
		if code := aws.ToString(e.Code); code != "NoSuchKey" && code != "NotFound" {
			failed = append(failed, e)
		}
	}
	if len(failed) > 0 {
		e := failed[0]
		return fmt.Errorf("delete s3://%s/%s: %s: %s (%d of %d keys not deleted)", s.Bucket, aws.ToString(e.Key),
			aws.ToString(e.Code), aws.ToString(e.Message), len(failed), len(keys))
	}
	return nil
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

func (s *Store) delete(ctx context.Context, key string) (err error) {
	ctx, span := s.span(ctx, "s3.Delete", key)
	defer func() { instr.End(span, err) }()
	if _, err := s.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.Bucket, Key: &key}); err != nil {
		return fmt.Errorf("delete s3://%s/%s: %w", s.Bucket, key, err)
	}
	return nil
}

// ETag returns the object's entity tag, which changes when its content does.
func (s *Store) ETag(ctx context.Context, key string) (_ string, err error) {
	ctx, span := s.span(ctx, "s3.ETag", key)
	defer func() { instr.End(span, err) }()
	ctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	out, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.Bucket, Key: &key})
	if err != nil {
		return "", fmt.Errorf("head s3://%s/%s: %w", s.Bucket, key, err)
	}
	return strings.Trim(aws.ToString(out.ETag), `"`), nil
}
