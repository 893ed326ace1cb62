package runs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Weights are a run's starting weights (`--weights`): local files, or
// published weights in the bucket (s3://bucket/prefix/ holding a
// manifest.json, e.g. another run's weights/r3/).
type Weights struct {
	files  []weights.File
	prefix string
	url    string
}

// ParseWeights checks --weights: a local checkpoint (see FindWeights) or
// an s3:// URL, whose bucket is checked once connected. file is the
// harness's model.weights_file ("" when its weights are a directory).
func ParseWeights(path, file string) (Weights, error) {
	if strings.HasPrefix(path, "s3://") {
		_, prefix, err := store.ParseURL(path)
		if err != nil {
			return Weights{}, fmt.Errorf("--weights: %w", err)
		}
		return Weights{prefix: prefix, url: path}, nil
	}
	files, err := FindWeights(path, file)
	return Weights{files: files}, err
}

// Names lists the local files' names (none for weights in S3).
func (w Weights) Names() []string { return weights.Names(w.files) }

// Empty says no weights were found.
func (w Weights) Empty() bool { return w.files == nil && w.prefix == "" }

// InS3 says the weights are published weights in the bucket.
func (w Weights) InS3() bool { return w.prefix != "" }

// Describe lists the files as a manifest does; s may be nil for local files.
func (w Weights) Describe(ctx context.Context, s *store.Store) ([]schemas.WeightsFile, error) {
	if !w.InS3() {
		return weights.Describe(w.files)
	}
	if err := SameBucket(s, w.url, "--weights"); err != nil {
		return nil, err
	}
	man, err := weights.Read(ctx, s, w.prefix)
	if err != nil {
		return nil, fmt.Errorf("--weights %s: %w", w.url, err)
	}
	return man.Files, nil
}

// Publish stores the weights as weights id id under the prefix to.
func (w Weights) Publish(ctx context.Context, s *store.Store, to, id string) error {
	if !w.InS3() {
		desc, err := weights.Describe(w.files)
		if err != nil {
			return err
		}
		man, _, err := weights.Publish(ctx, s, to, w.files, schemas.WeightsManifest{WeightsID: id})
		if err == nil && !weights.Same(man.Files, desc) {
			err = fmt.Errorf("weights %s at s3://%s/%s hold other files than %s: start a new run, or pass the weights it was started with", id, s.Bucket, to, w.url)
		}
		return err
	}
	if err := SameBucket(s, w.url, "--weights"); err != nil {
		return err
	}
	_, err := weights.Copy(ctx, s, w.prefix, to, id)
	return err
}

// SameWeights compares the weights with a published weights id by name,
// size and SHA-256.
func SameWeights(ctx context.Context, s *store.Store, prefix string, w Weights) (bool, error) {
	man, err := weights.Read(ctx, s, prefix)
	if err != nil {
		return false, err
	}
	files, err := w.Describe(ctx, s)
	if err != nil {
		return false, err
	}
	return weights.Same(man.Files, files), nil
}

// FindWeights lists local weights: a directory (a checkpoint, every file
// under it) or, for a harness naming a weights_file, that one file.
func FindWeights(path, file string) ([]weights.File, error) {
	if path == "" {
		return nil, errors.New("--weights is required: pass the initial weights, e.g. --weights harnesses/minimal/weights/w0")
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--weights %s does not exist: pass a weights directory", path)
	}
	if !st.IsDir() {
		if file == "" {
			return nil, fmt.Errorf("--weights %s is a file; this harness's weights are a directory (no model.weights_file): pass the checkpoint directory", path)
		}
		return []weights.File{{Name: file, Path: path}}, nil
	}
	if file != "" {
		if _, err := os.Stat(filepath.Join(path, file)); err != nil {
			return nil, fmt.Errorf("--weights %s has no %s (the harness's model.weights_file): pass the directory that holds it", path, file)
		}
	}
	files, err := weights.Dir(path)
	if err != nil {
		return nil, fmt.Errorf("--weights: %w", err)
	}
	return files, nil
}

// ExternalID is the weights id local weights get in a run they are
// evaluated in: named by content, so the same files always get the same
// id, a rerun publishes nothing new and other files never overwrite them.
func ExternalID(digest string) string { return "ext-" + digest[:min(12, len(digest))] }

// PublishLocal publishes local files as weights id of run unless that id
// already holds the same files (desc, as weights.Describe gives them); it
// says whether it published.
func PublishLocal(ctx context.Context, s *store.Store, run, id string, files []weights.File, desc []schemas.WeightsFile) (bool, error) {
	prefix := schemas.Layout{Run: run}.Weights(id)
	if man, err := weights.Read(ctx, s, prefix); err == nil && weights.Same(man.Files, desc) {
		return false, nil
	}
	man, created, err := weights.Publish(ctx, s, prefix, files, schemas.WeightsManifest{WeightsID: id})
	if err != nil {
		return false, err
	}
	if !weights.Same(man.Files, desc) {
		return false, fmt.Errorf("weights %s of run %s hold other files: another writer published them first", id, run)
	}
	return created, nil
}

// SameBucket refuses an s3:// URL outside the bucket the workers use.
func SameBucket(s *store.Store, url, flag string) error {
	bucket, _, _ := strings.Cut(strings.TrimPrefix(url, "s3://"), "/")
	if bucket != s.Bucket {
		return fmt.Errorf("%s %s is in bucket %s, the workers use %s: copy it into s3://%s/ first", flag, url, bucket, s.Bucket, s.Bucket)
	}
	return nil
}

// GetURL reads an object given as s3://bucket/key in the workers' bucket.
func GetURL(ctx context.Context, s *store.Store, url, flag string) ([]byte, error) {
	if err := SameBucket(s, url, flag); err != nil {
		return nil, err
	}
	_, key, _ := strings.Cut(strings.TrimPrefix(url, "s3://"), "/")
	b, err := s.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, url, err)
	}
	return b, nil
}

// PublishedDigest is the content digest (schemas.WeightsDigest) of weights
// id of run, which must be published.
func PublishedDigest(ctx context.Context, s *store.Store, run, id string) (string, error) {
	man, err := weights.Read(ctx, s, schemas.Layout{Run: run}.Weights(id))
	if store.IsNotFound(err) {
		return "", fmt.Errorf("weights %s not found in run %s (it has %s): pass one of those or a local weights directory", id, run, strings.Join(WeightIDs(ctx, s, run), ", "))
	}
	if err != nil {
		return "", err
	}
	return schemas.WeightsDigest(man.Files), nil
}
