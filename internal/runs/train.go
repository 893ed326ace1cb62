package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/report"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/weights"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Train is what `starter train` asks of a run, its flags read: Check
// checks what needs no server, CheckPool what needs the bucket, and
// PrepareTrain writes the run.
type Train struct {
	Run            string
	Config         string          // the harness file
	Vars           []string        // --var name=value
	Harness        schemas.Harness // Check loads it
	Weights        string          // --weights: a local path, an s3:// URL, or "" to resume
	PoolReport     string          // --pool-report: a local file, an s3:// URL, or ""
	PoolAnyWeights bool
	Rounds         int32
	Groups         int // 0: the harness's collect.groups
	Attempts       int // 0: the harness's collect.attempts
	Heartbeat      time.Duration
	Priority       int
	Replace        bool
	// MaxStaleness is --max-staleness (used when Given), else the
	// harness's collect.max_staleness; Check settles it.
	MaxStaleness int32
	// Given names the flags the user gave: a resumed run keeps its own
	// rounds, groups, attempts and heartbeat timeout unless told otherwise.
	Given map[string]bool

	src  Weights
	pool []byte
}

// Check checks every input before any server is contacted, so a bad one
// starts nothing: it loads the harness, fills groups and attempts from its
// collect section when unset, and checks them, the weights and a local
// pool report; a pool report in S3, or one to compare with weights in S3,
// waits for CheckPool.
func (t *Train) Check() error {
	if t.Config == "" {
		return errors.New("--config is required: pass the harness file, e.g. --config harnesses/minimal/harness.yaml")
	}
	if !NamePattern.MatchString(t.Run) {
		return fmt.Errorf("--run %q: give a run name of letters, digits, '.', '_' or '-'", t.Run)
	}
	if t.Rounds < 1 {
		return fmt.Errorf("--rounds %d: need at least 1", t.Rounds)
	}
	if err := CheckPriority(t.Priority); err != nil {
		return err
	}
	vars, err := harness.ParseVars(t.Vars)
	if err != nil {
		return err
	}
	if t.Harness, err = harness.Load(t.Config, vars); err != nil {
		return err
	}
	if t.Groups == 0 {
		t.Groups = t.Harness.Collect.Groups
	}
	if t.Attempts == 0 {
		t.Attempts = t.Harness.Collect.Attempts
	}
	if !t.Given["max-staleness"] {
		t.MaxStaleness = t.Harness.Collect.MaxStaleness
	}
	if err := harness.CheckOverlap(t.Harness, t.MaxStaleness, "--max-staleness"); err != nil {
		return err
	}
	if t.MaxStaleness > t.Rounds {
		return fmt.Errorf("--max-staleness %d with --rounds %d: a sample can lag at most rounds-1 weights versions in a run of %d rounds; give --max-staleness at most %d (1 overlaps each round's collection with the round before's training)",
			t.MaxStaleness, t.Rounds, t.Rounds, max(t.Rounds-1, 1))
	}
	if t.Groups < 1 || t.Attempts < 2 {
		return fmt.Errorf("--groups %d --attempts %d: need at least 1 group of at least 2 attempts", t.Groups, t.Attempts)
	}
	t.src, err = ParseWeights(t.Weights, t.Harness.Model.WeightsFile)
	if err != nil && (t.Weights != "" || t.Replace) {
		return err
	}
	if err == nil && t.Harness.Model.Vision {
		// Before anything is uploaded: the rollout host would refuse to
		// serve these weights later anyway.
		if err := weights.CheckVision(t.src.Names(), t.Weights); err != nil {
			return fmt.Errorf("--weights: %w", err)
		}
	}
	if t.PoolReport == "" || strings.HasPrefix(t.PoolReport, "s3://") {
		return nil
	}
	if t.pool, err = os.ReadFile(t.PoolReport); err != nil {
		return fmt.Errorf("--pool-report %s: %w", t.PoolReport, err)
	}
	if t.src.InS3() {
		return nil
	}
	return t.checkPool(context.Background(), nil)
}

// CheckPool reads a pool report in S3 and checks it, or checks a local
// one against weights in S3, writing nothing.
func (t *Train) CheckPool(ctx context.Context, s *store.Store) error {
	inS3 := strings.HasPrefix(t.PoolReport, "s3://")
	if inS3 {
		var err error
		if t.pool, err = GetURL(ctx, s, t.PoolReport, "--pool-report"); err != nil {
			return err
		}
	}
	if t.pool != nil && (inS3 || t.src.InS3()) {
		return t.checkPool(ctx, s)
	}
	return nil
}

// checkPool parses the pool report and checks it against the harness and
// the starting weights (report.CheckPool); s is nil for local weights.
func (t *Train) checkPool(ctx context.Context, s *store.Store) error {
	var rep schemas.Report
	if err := json.Unmarshal(t.pool, &rep); err != nil || len(rep.Tasks) == 0 {
		return fmt.Errorf("--pool-report %s is not a report.json with tasks (%v): pass eval/<tag>/report.json of a validation", t.PoolReport, err)
	}
	var desc []schemas.WeightsFile
	if !t.src.Empty() {
		var err error
		if desc, err = t.src.Describe(ctx, s); err != nil {
			return err
		}
	}
	if err := report.CheckPool(rep, desc, t.Harness, t.PoolAnyWeights); err != nil {
		return fmt.Errorf("--pool-report %s %w", t.PoolReport, err)
	}
	return nil
}

// Prepared is a run ready for its train workflow: the input's fields,
// and what preparing it did, for the starter to say.
type Prepared struct {
	Replaced bool // an earlier run of the name was deleted (Replace)
	Deleted  int  // its objects
	// OldDigest is the harness digest a resumed run started with, when
	// the harness has changed since.
	OldDigest  string
	Resumed    bool // an existing run resumes; false: a new one was created
	RoundsDone int32

	InitialWeightsID, WeightsID string // weights ids: round 1's input, the next round's
	Rounds                      int32
	Groups, Attempts            int
	Round                       int32 // the round the workflow runs (1-based)
	Summaries                   []schemas.RoundSummary
	PoolReport                  string // key of the report choosing round 1's pool
	Heartbeat                   time.Duration
	MaxStaleness                int32
}

// PrepareTrain writes a checked run that is not running: it deletes an
// earlier one (Replace), then resumes an existing run or creates a new
// one, and writes its harness.json. On an error, p still says what was
// done before it.
func PrepareTrain(ctx context.Context, s *store.Store, t *Train) (p Prepared, err error) {
	exists, err := Exists(ctx, s, t.Run)
	if err != nil {
		return p, err
	}
	if exists && t.Replace {
		if p.Deleted, err = Wipe(ctx, s, t.Run); err != nil {
			return p, err
		}
		p.Replaced, exists = true, false
	}
	if exists {
		err = t.resume(ctx, s, &p)
	} else {
		err = t.create(ctx, s, &p)
	}
	if err != nil {
		return p, err
	}
	return p, PutHarness(ctx, s, t.Run, t.Harness)
}

// create writes a new run: run.json, its weights as w0, its pool report.
func (t *Train) create(ctx context.Context, s *store.Store, p *Prepared) error {
	if t.src.Empty() {
		if _, err := ParseWeights(t.Weights, t.Harness.Model.WeightsFile); err != nil {
			return err
		}
	}
	*p = Prepared{Replaced: p.Replaced, Deleted: p.Deleted, InitialWeightsID: "w0", WeightsID: "w0", Rounds: t.Rounds,
		Groups: t.Groups, Attempts: t.Attempts, Round: 1, Heartbeat: t.Heartbeat, MaxStaleness: t.MaxStaleness}
	if t.pool != nil {
		p.PoolReport = schemas.Layout{Run: t.Run}.PoolReport()
	}
	spec := schemas.RunSpec{Run: t.Run, Rounds: t.Rounds, Groups: t.Groups, Attempts: t.Attempts, PoolReport: p.PoolReport,
		WeightsSource: t.Weights, HeartbeatTimeout: schemas.Duration(t.Heartbeat), StartedAtMS: time.Now().UnixMilli(), MaxStaleness: t.MaxStaleness}
	return Create(ctx, s, spec, t.src, t.pool)
}

// resume continues an existing run that is not running: from the round
// after its last completed one, with the weights that round left.
// Episodes, reports and weights already stored are found and kept.
func (t *Train) resume(ctx context.Context, s *store.Store, p *Prepared) error {
	l := schemas.Layout{Run: t.Run}
	spec, st, err := Load(ctx, s, t.Run)
	if err != nil {
		return err
	}
	if !t.src.Empty() {
		same, err := SameWeights(ctx, s, l.Weights("w0"), t.src)
		if err != nil {
			return err
		}
		if !same {
			return fmt.Errorf("run %s started from other weights than --weights %s (they differ from s3://%s/%s): resume without --weights, or pass --replace to start over from these", t.Run, t.Weights, s.Bucket, l.Weights("w0"))
		}
	}
	if t.Given["pool-report"] {
		return fmt.Errorf("--pool-report applies to a new run; run %s exists: resume without it, or pass --replace", t.Run)
	}
	// The bound is the run's: its records and rounds were made under it.
	// Unless asked for, a resume keeps the run's own; a harness whose
	// collect.max_staleness has changed since is asked for too.
	asked := t.Given["max-staleness"] || t.Harness.Collect.MaxStaleness != 0
	if !asked {
		t.MaxStaleness = spec.MaxStaleness
		if err := harness.CheckOverlap(t.Harness, t.MaxStaleness, "the run's max staleness"); err != nil {
			return err
		}
	}
	if t.MaxStaleness != spec.MaxStaleness {
		return fmt.Errorf("run %s started with max staleness %d; this resume asks for %d (--max-staleness, or the harness's collect.max_staleness): resume with --max-staleness %d, or pass --replace to start over",
			t.Run, spec.MaxStaleness, t.MaxStaleness, spec.MaxStaleness)
	}
	p.MaxStaleness = spec.MaxStaleness
	p.InitialWeightsID, p.WeightsID, p.Rounds, p.Groups, p.Attempts = "w0", st.WeightsID, spec.Rounds, spec.Groups, spec.Attempts
	p.Round, p.Summaries, p.Heartbeat, p.RoundsDone = st.RoundsDone+1, st.Summaries, spec.HeartbeatTimeout.D(), st.RoundsDone
	if p.Round == 1 {
		p.PoolReport = spec.PoolReport
	}
	if t.Given["groups"] {
		p.Groups = t.Groups
	}
	if t.Given["attempts"] {
		p.Attempts = t.Attempts
	}
	if t.Given["rounds"] {
		p.Rounds = t.Rounds
	}
	if t.Given["heartbeat-timeout"] {
		p.Heartbeat = t.Heartbeat
	}
	if st.RoundsDone >= p.Rounds && !st.Stopped {
		return fmt.Errorf("run %s finished its %d rounds: pass --rounds N (N > %d) to continue it, or --replace to start over", t.Run, st.RoundsDone, st.RoundsDone)
	}
	if old, ok, _ := ReadHarness(ctx, s, t.Run); ok && old.Digest != t.Harness.Digest {
		p.OldDigest = old.Digest
	}
	if err := ClearStop(ctx, s, t.Run); err != nil {
		return err
	}
	p.Resumed = true
	return nil
}
