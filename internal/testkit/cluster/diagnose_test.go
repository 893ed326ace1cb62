package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerFault: from a log of several starts, only the lines from the
// last one count, and the line a hint knows wins over the generic ones
// the server wraps it in. The lines are the server v1.32.2's own.
func TestServerFault(t *testing.T) {
	earlier := `{"level":"error","msg":"sql handle: unable to refresh database connection pool","error":"pq: database \"temporal_nosuch\" does not exist (3D000)"}` + "\n"
	last := `{"level":"info","msg":"Starting server for services","value":["history"]}
[Fx] Error returned: received non-nil error from function "go.temporal.io/server/temporal".ServerOptionsProvider
sql schema version compatibility check failed: version mismatch for keyspace/database: "temporal". Expected version: 1.19 cannot be greater than Actual version: 1.0
Unable to create server. Error: could not build arguments for function
`
	p := filepath.Join(t.TempDir(), "history.log")
	if err := os.WriteFile(p, []byte(earlier+last), 0o644); err != nil {
		t.Fatal(err)
	}
	got := serverFault(p, int64(len(earlier)))
	if !strings.HasPrefix(got, "sql schema version compatibility check failed") || !strings.Contains(got, "update-schema --schema-name") {
		t.Errorf("fault of the last start: %q; want the schema check's line and update-schema", got)
	}
	if got := serverFault(p, 0); !strings.Contains(got, "temporal_nosuch") || !strings.Contains(got, "create") {
		t.Errorf("fault of the whole log: %q; want the missing database (the first the hints know) and create", got)
	}
	if got := serverFault(filepath.Join(t.TempDir(), "none.log"), 0); got != "" {
		t.Errorf("fault of a missing log: %q, want none", got)
	}
}
