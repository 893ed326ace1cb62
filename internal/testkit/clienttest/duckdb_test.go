package clienttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// duckResult is what node/duckdb-query.mjs prints.
type duckResult struct {
	Columns []duckColumn      `json:"columns"`
	Rows    []json.RawMessage `json:"rows"`
}

type duckColumn struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

func duckQuery(t *testing.T, sql string) duckResult {
	t.Helper()
	out := runNode(t, "duckdb-query.mjs", sql)
	var r duckResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("duckdb-query.mjs output: %v\n%s", err, out)
	}
	return r
}

// sqlString quotes s as an SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func writeParquet(t *testing.T, path string, rows []schemas.Call) {
	t.Helper()
	b, err := store.EncodeParquet(rows)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkDuckDB writes recs, plus a failed call that exercises empty lists,
// negative and large integers and awkward strings, as hive-partitioned
// Parquet the way the calls table is laid out (docs/design.md §3), reads them back
// with DuckDB and compares every column of every row.
func checkDuckDB(t *testing.T, recs []schemas.Call) {
	failed := schemas.Call{
		Run: "clienttest", Round: 1, Phase: schemas.PhaseTrain, EpisodeID: "r1-train-g999-a00", // sorts after the recorded episode
		Group: -1, Attempt: 0, Retry: 2, CallIndex: 0, WeightsID: "w0", Model: "toy",
		StartedAtMS: 1_790_000_000_123, LatencyMS: 30000.125, HTTPStatus: 502, Stream: true,
		Error:   "model server answered 502: {\"error\":\"ünïcødé, 'quotes', a tab\\t, \u2028 and 🚂\"}",
		Request: `{"model":"toy","messages":[{"role":"user","content":"hi"}],"stream":true}`,
	}
	dir := t.TempDir()
	part := filepath.Join(dir, "calls", "round=1", "phase=train")
	writeParquet(t, filepath.Join(part, "ep-openai-1.parquet"), recs)
	writeParquet(t, filepath.Join(part, "ep-openai-2.parquet"), []schemas.Call{failed})
	want := append(slices.Clone(recs), failed)

	res := duckQuery(t, fmt.Sprintf(
		"SELECT * FROM read_parquet(%s, hive_partitioning=true) ORDER BY episode_id, call_index",
		sqlString(filepath.Join(dir, "calls", "**", "*.parquet"))))

	if wantCols := expectedColumns(); !slices.Equal(res.Columns, wantCols) {
		t.Errorf("DuckDB columns:\n got  %v\n want %v", res.Columns, wantCols)
	}
	if len(res.Rows) != len(want) {
		t.Fatalf("DuckDB read %d rows, want %d", len(res.Rows), len(want))
	}
	for i, raw := range res.Rows {
		var got schemas.Call
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("row %d: %v\n%s", i, err, raw)
		}
		for _, d := range fieldDiffs(got, want[i]) {
			t.Errorf("row %d (%s call %d): %s", i, want[i].EpisodeID, want[i].CallIndex, d)
		}
	}
}

// expectedColumns derives DuckDB's column list from schemas.Call: the
// Parquet names in order and the DuckDB type of each Go type. The hive
// partition columns take DuckDB's inferred type (round: BIGINT), not the
// type stored in the file (INTEGER); see TestDuckDBHiveColumns.
func expectedColumns() []duckColumn {
	types := map[reflect.Type]string{
		reflect.TypeFor[string]():    "VARCHAR",
		reflect.TypeFor[bool]():      "BOOLEAN",
		reflect.TypeFor[int32]():     "INTEGER",
		reflect.TypeFor[int64]():     "BIGINT",
		reflect.TypeFor[*int64]():    "BIGINT", // optional: NULL where absent
		reflect.TypeFor[float64]():   "DOUBLE",
		reflect.TypeFor[[]int32]():   "INTEGER[]",
		reflect.TypeFor[[]float32](): "FLOAT[]",
		reflect.TypeFor[[]string]():  "VARCHAR[]",
	}
	hive := map[string]string{"round": "BIGINT", "phase": "VARCHAR"}
	var out []duckColumn
	for _, f := range reflect.VisibleFields(reflect.TypeFor[schemas.Call]()) {
		if f.Anonymous {
			continue // an embedded struct's fields are columns of their own (schemas.Sampling)
		}
		name, _, _ := strings.Cut(f.Tag.Get("parquet"), ",")
		typ, ok := hive[name]
		if !ok {
			typ, ok = types[f.Type]
		}
		if !ok {
			typ = "unmapped Go type " + f.Type.String()
		}
		out = append(out, duckColumn{name, typ})
	}
	return out
}

// fieldDiffs names the fields where got (decoded from DuckDB's JSON) and
// want differ. A nil slice is written as an empty list, which DuckDB must
// return as [] rather than NULL.
func fieldDiffs(got, want schemas.Call) []string {
	var out []string
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for _, f := range reflect.VisibleFields(g.Type()) {
		if f.Anonymous {
			continue // its fields are compared one by one
		}
		gv, wv := g.FieldByIndex(f.Index), w.FieldByIndex(f.Index)
		if f.Type.Kind() == reflect.Slice && gv.Len() == 0 && wv.Len() == 0 {
			if gv.IsNil() {
				out = append(out, fmt.Sprintf("%s is NULL, wrote an empty list", f.Name))
			}
			continue
		}
		if !reflect.DeepEqual(gv.Interface(), wv.Interface()) {
			out = append(out, fmt.Sprintf("%s = %#v, wrote %#v", f.Name, gv.Interface(), wv.Interface()))
		}
	}
	return out
}

// TestDuckDBHiveColumns records how DuckDB treats the round and phase columns
// that the calls files hold besides their hive path (calls/round=R/phase=P/):
// the path value silently replaces the file's value, typed as the path infers
// it, whenever hive partitioning is on, which read_parquet turns on by itself
// for key=value folders. A row written under the wrong partition is therefore
// read with the partition's round and phase, and no error says so.
func TestDuckDBHiveColumns(t *testing.T) {
	ensureNode(t)
	dir := t.TempDir()
	misfiled := schemas.Call{Run: "clienttest", Round: 7, Phase: schemas.PhaseEval, EpisodeID: "ep-misfiled"}
	writeParquet(t, filepath.Join(dir, "calls", "round=1", "phase=train", "x.parquet"), []schemas.Call{misfiled})
	glob := sqlString(filepath.Join(dir, "calls", "**", "*.parquet"))
	var q []string
	for _, mode := range []string{", hive_partitioning=true", ", hive_partitioning=false", ""} {
		q = append(q, fmt.Sprintf("SELECT %s AS mode, round::BIGINT AS round, typeof(round) AS round_type, phase FROM read_parquet(%s%s)",
			sqlString("read_parquet(glob"+mode+")"), glob, mode))
	}
	res := duckQuery(t, strings.Join(q, " UNION ALL ")+" ORDER BY mode")

	type row struct {
		Mode      string `json:"mode"`
		Round     int64  `json:"round"`
		RoundType string `json:"round_type"`
		Phase     string `json:"phase"`
	}
	var got []row
	for _, raw := range res.Rows {
		var r row
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	want := []row{
		{"read_parquet(glob)", 1, "BIGINT", "train"}, // hive partitioning auto-detected
		{"read_parquet(glob, hive_partitioning=false)", 7, "INTEGER", "eval"},
		{"read_parquet(glob, hive_partitioning=true)", 1, "BIGINT", "train"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("DuckDB's reading of file columns round=7/phase=eval under round=1/phase=train changed:\n got  %+v\n want %+v", got, want)
	}
	for _, r := range got {
		t.Logf("%s: round=%d (%s) phase=%s", r.Mode, r.Round, r.RoundType, r.Phase)
	}
}
