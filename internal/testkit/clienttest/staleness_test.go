package clienttest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// auditQuery is the staleness audit of docs/operating.md, as printed
// there, for run fast.
func auditQuery(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- staleness-audit -->\n```\nduckdb -c \"(.*?)\"\n```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/operating.md has no staleness-audit query (duckdb -c \"…\" after <!-- staleness-audit -->)")
	}
	return string(m[1])
}

// TestStalenessAudit runs the operating guide's staleness query on the
// records of a 3-round overlapped run, written in the run's layout with
// the project's own schemas: round 1 trained from w0 on w0, round 2 from
// r1 on w0 (1 behind), round 3 from r2 on r1 — and one round-3 episode
// on w0 (2 behind, past η = 1). The query must count that sample's calls
// beyond the bound, and nothing else.
func TestStalenessAudit(t *testing.T) {
	ensureNode(t)
	dir := t.TempDir()
	l := schemas.Layout{Run: "fast"}
	write := func(key string, b []byte) {
		t.Helper()
		path := filepath.Join(dir, key)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	parquet := func(key string, rows any) {
		t.Helper()
		var b []byte
		var err error
		switch r := rows.(type) {
		case []schemas.Episode:
			b, err = store.EncodeParquet(r)
		case []schemas.Sample:
			b, err = store.EncodeParquet(r)
		}
		if err != nil {
			t.Fatal(err)
		}
		write(key, b)
	}
	type round struct {
		k       int32
		from    string   // the trainer's weights
		ranOn   []string // each episode's weights
		samples int      // per episode
	}
	rounds := []round{
		{1, "w0", []string{"w0", "w0"}, 3},
		{2, "r1", []string{"w0", "w0"}, 2},
		{3, "r2", []string{"r1", "w0"}, 2}, // the second is past the bound
	}
	for _, r := range rounds {
		var eps []schemas.Episode
		var samples []schemas.Sample
		for i, w := range r.ranOn {
			id := fmt.Sprintf("r%d-train-g%03d-a00", r.k, i)
			eps = append(eps, schemas.Episode{Run: "fast", Round: r.k, Phase: schemas.PhaseTrain, EpisodeID: id, Group: int32(i), WeightsID: w, Valid: true})
			for c := range r.samples {
				// The staleness column is left 0: the audit must not trust it.
				samples = append(samples, schemas.Sample{Run: "fast", Round: r.k, EpisodeID: id, Group: int32(i), CallIndex: int32(c)})
			}
		}
		// A validation episode on other weights sharing the round's ids
		// must not join.
		val := []schemas.Episode{{Run: "fast", Round: r.k, Phase: schemas.PhaseVal, EpisodeID: eps[0].EpisodeID, WeightsID: "r9"}}
		parquet(l.EpisodesDir(r.k, schemas.PhaseTrain)+"part-0.parquet", eps)
		parquet(l.EpisodesDir(r.k, schemas.PhaseVal)+"part-0.parquet", val)
		parquet(l.Samples(r.k), samples)
		sum, err := json.Marshal(schemas.RoundSummary{Round: r.k, WeightsID: r.from, MaxStaleness: 1})
		if err != nil {
			t.Fatal(err)
		}
		write(l.Summary(r.k), sum)
	}
	q := strings.ReplaceAll(auditQuery(t), "'runs/fast/", "'"+dir+"/runs/fast/")
	res := duckQuery(t, q)
	type row struct {
		Round       int64 `json:"round"`
		Bound       int64 `json:"bound"`
		Samples     int64 `json:"samples"`
		MostStale   int64 `json:"most_stale"`
		BeyondBound int64 `json:"beyond_bound"`
	}
	want := []row{{1, 1, 6, 0, 0}, {2, 1, 4, 1, 0}, {3, 1, 4, 2, 2}}
	if len(res.Rows) != len(want) {
		t.Fatalf("audit: %d rows, want %d", len(res.Rows), len(want))
	}
	for i, raw := range res.Rows {
		var got row
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if got != want[i] {
			t.Errorf("audit row %d: %+v, want %+v", i, got, want[i])
		}
	}
}

// TestStalenessAuditOfRecords runs the same query on kept records: every
// run folder runs/<run>/ under each folder of ROUNDHOUSE_AUDIT_RECORDS
// (comma-separated; BenchmarkOverlappedRounds keeps its runs' records
// beside its results file, under records/), printing each run's rounds
// and failing on any sample beyond its round's bound.
func TestStalenessAuditOfRecords(t *testing.T) {
	roots := os.Getenv("ROUNDHOUSE_AUDIT_RECORDS")
	if roots == "" {
		t.Skip("set ROUNDHOUSE_AUDIT_RECORDS to folders holding runs/<run>/ to audit")
	}
	ensureNode(t)
	query := auditQuery(t)
	for _, root := range strings.Split(roots, ",") {
		runs, err := filepath.Glob(filepath.Join(root, "*", "runs", "*"))
		if err != nil {
			t.Fatal(err)
		}
		more, _ := filepath.Glob(filepath.Join(root, "runs", "*"))
		for _, dir := range append(runs, more...) {
			if _, err := os.Stat(filepath.Join(dir, "samples")); err != nil {
				continue // trained nothing
			}
			q := strings.ReplaceAll(query, "'runs/fast/", "'"+dir+"/")
			res := duckQuery(t, q)
			var b strings.Builder
			beyond := 0
			for _, raw := range res.Rows {
				var r struct {
					Round, Bound, Samples, MostStale, BeyondBound int64
				}
				var m map[string]int64
				if err := json.Unmarshal(raw, &m); err != nil {
					t.Fatal(err)
				}
				r.Round, r.Bound, r.Samples, r.MostStale, r.BeyondBound = m["round"], m["bound"], m["samples"], m["most_stale"], m["beyond_bound"]
				beyond += int(r.BeyondBound)
				fmt.Fprintf(&b, "  round %d: bound %d, %d samples, most stale %d, beyond %d\n", r.Round, r.Bound, r.Samples, r.MostStale, r.BeyondBound)
			}
			t.Logf("%s: %d rounds, %d beyond the bound\n%s", dir, len(res.Rows), beyond, b.String())
			if beyond > 0 || len(res.Rows) == 0 {
				t.Errorf("%s: %d samples beyond the bound over %d rounds", dir, beyond, len(res.Rows))
			}
		}
	}
}
