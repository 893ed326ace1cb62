package cluster_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
)

// TestStartFaults: what an operator gets wrong before a first start —
// a database not created, a wrong password, a schema not migrated — ends
// the service's start with one line that says what to change, taken
// from the server's own log. Each case restarts the history service of a
// running cluster on a broken setting, then puts the setting back.
// As root (StartCluster skips otherwise); not under -short.
func TestStartFaults(t *testing.T) {
	itest.Slow(t)
	_, c := itest.StartCluster(t, "faults")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	good, err := os.ReadFile(c.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	restart := func(t *testing.T, config string) error {
		t.Helper()
		if err := c.Kill("history"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(c.ConfigFile(), []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		return c.Start(ctx, "history")
	}
	for _, tc := range []struct {
		name, from, to string
		want           []string
	}{
		{"database missing", "databaseName: temporal\n", "databaseName: temporal_nosuch\n", []string{"temporal_nosuch", "sql-tool", "create"}},
		{"wrong password", `password: "`, `password: "wrong`, []string{"password", "datastores"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(good), tc.from) {
				t.Fatalf("config has no %q to break", tc.from)
			}
			err := restart(t, strings.Replace(string(good), tc.from, tc.to, 1))
			if err == nil {
				t.Fatal("history started on a broken setting")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if err := restart(t, string(good)); err != nil {
				t.Fatalf("history on the good config again: %v", err)
			}
		})
	}
	t.Run("schema behind", func(t *testing.T) {
		if _, err := c.SQL(ctx, "temporal", "UPDATE schema_version SET curr_version = '1.0'"); err != nil {
			t.Fatal(err)
		}
		err := restart(t, string(good))
		t.Log(err)
		if err == nil || !strings.Contains(err.Error(), "update-schema --schema-name") {
			body, _ := os.ReadFile(c.Log("history"))
			t.Errorf("history on a schema behind the server's: %v; want a line naming update-schema\n%s", err, body)
		}
	})
}
