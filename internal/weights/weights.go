// Package weights moves a weights id — a directory of files, such as a
// Hugging Face checkpoint or the toy's policy.json — between local disk and
// S3. A weights id is complete exactly when its manifest.json exists and the
// stored files match it: publishing writes the manifest last, fetching
// checks every file's size and SHA-256 before the directory appears.
package weights

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// parallel bounds concurrent file transfers; each large file is itself
// moved in parallel parts by the store.
const parallel = 4

// File is one local file of a weights id and its name (slash-separated,
// relative to the weights directory).
type File struct {
	Name string
	Path string
}

// Dir lists the files under dir, every level deep. A directory with no
// files, or one that has its own manifest.json at the top, is refused: the
// manifest name is Roundhouse's.
func Dir(dir string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() && d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files = append(files, File{Name: filepath.ToSlash(rel), Path: path})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("weights directory %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("weights directory %s holds no files", dir)
	}
	for _, f := range files {
		if f.Name == schemas.WeightsManifestFile {
			return nil, fmt.Errorf("weights directory %s has its own %s, a name Roundhouse keeps for its manifest: rename it", dir, schemas.WeightsManifestFile)
		}
	}
	return files, nil
}

// Publish uploads files under prefix (weights/<id>/, in man.Dir when set),
// then writes the manifest if the id has none yet, then checks what is
// stored against the manifest that is. man carries the id, metrics and
// folder; its file list is filled here. A crash part-way leaves no
// manifest, so the id reads as absent and the publish is simply redone.
// The manifest is written once (a conditional write): when another writer
// published the id first — a trainer try Temporal had given up on, or the
// one it retried — Publish returns that manifest and false, and this
// writer's files, in their own folder, stay unused.
func Publish(ctx context.Context, s *store.Store, prefix string, files []File, man schemas.WeightsManifest) (schemas.WeightsManifest, bool, error) {
	// Published already: upload nothing, so files outside a try's own
	// folder never land on the published ones.
	if have, err := Read(ctx, s, prefix); err == nil {
		if err := Verify(ctx, s, prefix, have); err != nil {
			return have, false, fmt.Errorf("weights %s: %w", have.WeightsID, err)
		}
		return have, false, nil
	}
	man.Files = make([]schemas.WeightsFile, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i, f := range files {
		g.Go(func() error {
			wf, err := describe(f.Name, f.Path)
			if err != nil {
				return err
			}
			man.Files[i] = wf
			return s.PutFile(gctx, man.Key(prefix, f.Name), f.Path)
		})
	}
	if err := g.Wait(); err != nil {
		return man, false, fmt.Errorf("publish weights %s: %w", man.WeightsID, err)
	}
	if man.CreatedAt == 0 {
		man.CreatedAt = time.Now().UnixMilli()
	}
	b, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return man, false, fmt.Errorf("encode manifest of %s: %w", man.WeightsID, err)
	}
	created, err := s.PutIfAbsent(ctx, prefix+schemas.WeightsManifestFile, b)
	if err != nil {
		return man, false, err
	}
	if !created {
		if man, err = Read(ctx, s, prefix); err != nil {
			return man, false, err
		}
	}
	if err := Verify(ctx, s, prefix, man); err != nil {
		return man, created, fmt.Errorf("weights %s after publishing: %w", man.WeightsID, err)
	}
	return man, created, nil
}

// Describe sizes and hashes local files as a manifest lists them.
func Describe(files []File) ([]schemas.WeightsFile, error) {
	out := make([]schemas.WeightsFile, len(files))
	for i, f := range files {
		wf, err := describe(f.Name, f.Path)
		if err != nil {
			return nil, err
		}
		out[i] = wf
	}
	return out, nil
}

// Same reports whether two file lists hold the same names, sizes and
// hashes, in any order.
func Same(a, b []schemas.WeightsFile) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[schemas.WeightsFile]bool{}
	for _, f := range a {
		seen[f] = true
	}
	for _, f := range b {
		if !seen[f] {
			return false
		}
	}
	return true
}

// Read returns the manifest under prefix; a missing one means the weights
// were never published completely.
func Read(ctx context.Context, s *store.Store, prefix string) (schemas.WeightsManifest, error) {
	var man schemas.WeightsManifest
	b, err := s.Get(ctx, prefix+schemas.WeightsManifestFile)
	if err != nil {
		return man, fmt.Errorf("weights at s3://%s/%s are incomplete or absent (no readable %s): %w", s.Bucket, prefix, schemas.WeightsManifestFile, err)
	}
	if err := json.Unmarshal(b, &man); err != nil {
		return man, fmt.Errorf("s3://%s/%s%s: %w", s.Bucket, prefix, schemas.WeightsManifestFile, err)
	}
	if len(man.Files) == 0 {
		return man, fmt.Errorf("s3://%s/%s%s lists no files", s.Bucket, prefix, schemas.WeightsManifestFile)
	}
	return man, nil
}

// Verify checks that every file the manifest lists is stored with its size.
func Verify(ctx context.Context, s *store.Store, prefix string, man schemas.WeightsManifest) error {
	if len(man.Files) == 0 {
		return errors.New("manifest lists no files")
	}
	objs, err := s.List(ctx, prefix)
	if err != nil {
		return err
	}
	size := map[string]int64{}
	for _, o := range objs {
		size[strings.TrimPrefix(o.Key, prefix)] = o.Size
	}
	for _, f := range man.Files {
		got, ok := size[man.Dir+f.Name]
		if !ok {
			return fmt.Errorf("%s is missing", man.Key(prefix, f.Name))
		}
		if got != f.Size {
			return fmt.Errorf("%s has %d bytes, the manifest says %d", man.Key(prefix, f.Name), got, f.Size)
		}
	}
	return nil
}

// Fetch makes dir a verified copy of the weights under prefix. The files
// are downloaded beside dir and checked against the manifest's sizes and
// hashes before dir is renamed into place; then the manifest is copied to
// dir + ".manifest.json" (beside, not inside: a trainer copying its input
// directory must not carry Roundhouse's file along). dir with that marker is
// complete and returned at once — callers key dir by the manifest's ETag, so
// it never holds other weights; dir without it is a crash's leftover and is
// fetched again.
func Fetch(ctx context.Context, s *store.Store, prefix, dir string) (schemas.WeightsManifest, error) {
	var man schemas.WeightsManifest
	marker := filepath.Clean(dir) + ".manifest.json"
	if b, err := os.ReadFile(marker); err == nil && json.Unmarshal(b, &man) == nil {
		if _, err := os.Stat(dir); err == nil {
			return man, nil
		}
	}
	man, err := Read(ctx, s, prefix)
	if err != nil {
		return man, err
	}
	fail := func(err error) (schemas.WeightsManifest, error) {
		return man, fmt.Errorf("fetch weights %s into %s: %w", man.WeightsID, dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fail(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".fetch-*")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, f := range man.Files {
		g.Go(func() error {
			local, err := localPath(tmp, f.Name)
			if err != nil {
				return err
			}
			if err := s.GetFile(gctx, man.Key(prefix, f.Name), local); err != nil {
				return err
			}
			got, err := describe(f.Name, local)
			if err != nil {
				return err
			}
			if got.Size != f.Size || got.SHA256 != f.SHA256 {
				return fmt.Errorf("s3://%s/%s does not match its manifest (%d bytes, sha256 %.12s…; manifest %d bytes, %.12s…): the weights were changed after publishing", s.Bucket, man.Key(prefix, f.Name), got.Size, got.SHA256, f.Size, f.SHA256)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fail(err)
	}
	b, _ := json.MarshalIndent(man, "", "  ")
	if err := os.WriteFile(marker+".tmp", b, 0o644); err != nil {
		return fail(err)
	}
	if err := os.Rename(marker+".tmp", marker); err != nil {
		return fail(err)
	}
	return man, nil
}

// localPath joins a manifest name under dir, refusing names that would
// escape it (a hand-edited manifest must not write outside the cache).
func localPath(dir, name string) (string, error) {
	p := filepath.Join(dir, filepath.FromSlash(name))
	if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
		return "", fmt.Errorf("manifest file name %q leaves the weights directory", name)
	}
	return p, nil
}

// describe sizes and hashes a file for the manifest.
func describe(name, path string) (schemas.WeightsFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return schemas.WeightsFile{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return schemas.WeightsFile{}, fmt.Errorf("read %s: %w", path, err)
	}
	return schemas.WeightsFile{Name: name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// ErrConflict: the target prefix already holds other weights, which are
// never overwritten.
var ErrConflict = errors.New("not overwriting them")

// Copy makes to a verified copy of the published weights under from (same
// bucket), as weights id: downloaded, checked file by file against the
// source manifest, published with the manifest last. A complete identical
// copy is left as it is; different weights at to are never overwritten
// (ErrConflict).
func Copy(ctx context.Context, s *store.Store, from, to, id string) (schemas.WeightsManifest, error) {
	src, err := Read(ctx, s, from)
	if err != nil {
		return src, err
	}
	have, err := Read(ctx, s, to)
	switch {
	case store.IsNotFound(err): // nothing there yet
	case err != nil:
		return have, err
	default:
		if !Same(have.Files, src.Files) {
			return have, fmt.Errorf("s3://%s/%s holds other weights than s3://%s/%s: %w", s.Bucket, to, s.Bucket, from, ErrConflict)
		}
		if err := Verify(ctx, s, to, have); err == nil {
			return have, nil
		}
	}
	tmp, err := os.MkdirTemp("", "roundhouse-copy-*")
	if err != nil {
		return src, fmt.Errorf("copy weights to %s: %w", id, err)
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "w")
	if _, err := Fetch(ctx, s, from, dir); err != nil {
		return src, err
	}
	files := make([]File, len(src.Files))
	for i, f := range src.Files {
		files[i] = File{Name: f.Name, Path: filepath.Join(dir, filepath.FromSlash(f.Name))}
	}
	man, _, err := Publish(ctx, s, to, files, schemas.WeightsManifest{WeightsID: id, Metrics: src.Metrics, CreatedAt: src.CreatedAt})
	if err != nil {
		return man, err
	}
	if !Same(man.Files, src.Files) {
		return man, fmt.Errorf("copied weights %s differ from their source s3://%s/%s", id, s.Bucket, from)
	}
	return man, nil
}

// Names lists the files' names, for CheckVision.
func Names(files []File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Name
	}
	return out
}

// ProcessorFile is what a vision-language model directory must hold beside
// its weights: the image processor's settings (resize, patch size,
// normalisation). Without it the model server and the trainer would each
// fall back to their own defaults and turn the same picture into different
// inputs.
const ProcessorFile = "preprocessor_config.json"

// CheckVision refuses a Hugging Face model directory (one with config.json)
// that lacks ProcessorFile when the harness declares a vision-language
// model (model_server.vision); where names the weights in the error. Other
// weights (the toy's policy.json) carry their own image settings.
func CheckVision(names []string, where string) error {
	hasConfig, hasProcessor := false, false
	for _, n := range names {
		switch n {
		case "config.json":
			hasConfig = true
		case ProcessorFile:
			hasProcessor = true
		}
	}
	if !hasConfig || hasProcessor {
		return nil
	}
	return fmt.Errorf("weights %s: a vision-language model directory (the harness sets model_server.vision) without %s: "+
		"the model server and the trainer would build different image inputs; copy the processor files "+
		"(%s, chat_template.json or chat_template.jinja, tokenizer files) from the base model's directory", where, ProcessorFile, ProcessorFile)
}
