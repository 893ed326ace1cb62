package runs

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Eval is an evaluation as `starter eval` and `starter compare` ask for
// it: ResolveEval loads its harness and finds its weights, CheckEval
// checks it against its run, PrepareEval writes what its workflow needs.
type Eval struct {
	Run, Tag, InitKey string
	Config            string // the harness file, for messages
	Harness           schemas.Harness
	Shard             Shard
	ReplaceTag        bool
	WeightsID         string
	// Files and Desc are local weights to publish as WeightsID (nil for a
	// weights id of the run); Digest is their weights digest, or the run's
	// weights' once CheckEval has read it.
	Files  []weights.File
	Desc   []schemas.WeightsFile
	Digest string
	Flag   string // names the weights in messages: --weights, --weights-a, …
}

// ResolveEval loads ev's harness (ev.Config with vars, as --var gives
// them) and finds the weights that w names: local files (LocalWeights),
// described and named ext-<digest> as they will be published, or else a
// weights id of the run, which CheckEval looks up.
func ResolveEval(ev Eval, vars []string, w string) (Eval, error) {
	vs, err := harness.ParseVars(vars)
	if err != nil {
		return ev, err
	}
	if ev.Harness, err = harness.Load(ev.Config, vs); err != nil {
		return ev, err
	}
	ev.WeightsID = w
	if !LocalWeights(w) {
		return ev, nil
	}
	if ev.Files, err = FindWeights(w, ev.Harness.Model.WeightsFile); err != nil {
		return ev, err
	}
	if ev.Desc, err = weights.Describe(ev.Files); err != nil {
		return ev, fmt.Errorf("--weights %s: %w", w, err)
	}
	ev.Digest = schemas.WeightsDigest(ev.Desc)
	ev.WeightsID = ExternalID(ev.Digest)
	return ev, nil
}

// LocalWeights says w names local files rather than a weights id of the
// run: it exists on disk or looks like a path.
func LocalWeights(w string) bool {
	if _, err := os.Stat(w); err == nil {
		return true
	}
	return strings.ContainsRune(w, os.PathSeparator) || strings.HasPrefix(w, ".")
}

// CheckEval checks an evaluation against its run in S3, writing nothing:
// an existing run must have the same harness digest, a new one is made
// only for local weights, and a weights id must be one of the run's. It
// says whether the run exists, and the weights' digest.
func CheckEval(ctx context.Context, s *store.Store, ev Eval) (exists bool, digest string, err error) {
	old, exists, err := ReadHarness(ctx, s, ev.Run)
	if err != nil {
		return false, "", err
	}
	h := ev.Harness
	switch {
	case exists && old.Digest != h.Digest:
		return exists, "", fmt.Errorf("run %s uses harness %s with config digest %s; --config %s gives %s (digest %s): pass the file and --var values the run used, or evaluate in a new --run", ev.Run, old.Name, old.Digest, ev.Config, h.Name, h.Digest)
	case !exists && ev.Files == nil:
		return exists, "", fmt.Errorf("unknown run %s (no s3://%s/%s): name an existing run, or pass %s DIR to evaluate local weights in a new run", ev.Run, s.Bucket, schemas.Layout{Run: ev.Run}.Harness(), ev.Flag)
	case ev.Files != nil:
		return exists, ev.Digest, nil
	}
	digest, err = PublishedDigest(ctx, s, ev.Run, ev.WeightsID)
	return exists, digest, err
}

// EvalPrepared says what PrepareEval wrote, for the starter to say.
type EvalPrepared struct {
	Wiped     bool // the whole tag was deleted (ReplaceTag)
	Deleted   int  // its objects
	Removed   []string
	Published bool // local weights were published as the weights id
	Created   bool // the run was new: its harness.json was written
}

// PrepareEval checks the tag (PlanTag), then deletes what a replace
// removes, publishes local weights and creates a new run (exists says
// whether it exists, as CheckEval found). On an error, p still says what
// was done before it.
func PrepareEval(ctx context.Context, s *store.Store, ev Eval, exists bool) (p EvalPrepared, err error) {
	st, err := ReadTag(ctx, s, ev.Run, ev.Tag)
	if err != nil {
		return p, err
	}
	plan, err := PlanTag(st, TagSpec{Shard: ev.Shard, InitKey: ev.InitKey, Weights: ev.Digest, Config: ev.Harness.Digest, Replace: ev.ReplaceTag})
	if err != nil {
		return p, err
	}
	if plan.Wipe {
		if p.Deleted, err = WipeTag(ctx, s, ev.Run, ev.Tag, schemas.TagPhase(ev.Tag)); err != nil {
			return p, err
		}
		p.Wiped = true
	}
	remove := plan.Remove
	if l := (schemas.Layout{Run: ev.Run}); slices.Contains(remove, l.Report(ev.Tag)) {
		// The files beside a full report would outlive it.
		remove = append(slices.Clone(remove), l.ReportText(ev.Tag), l.ReportTasks(ev.Tag))
	}
	if err := RemoveReports(ctx, s, remove); err != nil {
		return p, err
	}
	p.Removed = plan.Remove
	if ev.Files != nil {
		if p.Published, err = PublishLocal(ctx, s, ev.Run, ev.WeightsID, ev.Files, ev.Desc); err != nil {
			return p, err
		}
	}
	if !exists {
		if err := PutHarness(ctx, s, ev.Run, ev.Harness); err != nil {
			return p, err
		}
		p.Created = true
	}
	return p, nil
}
