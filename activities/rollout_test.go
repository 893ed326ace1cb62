package activities

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/outcome"
)

func TestSuccessCall(t *testing.T) {
	cases := []struct {
		name  string
		out   outcome.Result
		calls int
		want  int32
	}{
		{"failure", outcome.Result{Valid: true, SuccessTurn: 2}, 5, -1},
		{"turn known: calls from that index follow success", outcome.Result{Valid: true, Success: true, SuccessTurn: 2}, 5, 2},
		{"turn past the recorded calls", outcome.Result{Valid: true, Success: true, SuccessTurn: 9}, 5, 5},
		{"episode ends at success", outcome.Result{Valid: true, Success: true, EndsAtSuccess: true}, 4, 4},
		{"unknown", outcome.Result{Valid: true, Success: true}, 4, -1},
	}
	for _, c := range cases {
		if got := successCall(c.out, c.calls); got != c.want {
			t.Errorf("%s: successCall = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestPruneWeights(t *testing.T) {
	root := t.TempDir()
	keep := "d1/run/r2/etag2"
	for _, p := range []string{"d1/run/r1/etag1/policy.json", "d1/run/r1/etag1.manifest.json", keep + "/policy.json", keep + ".manifest.json", "d2/other/w0/e/config.json"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte("x"), 0o644)
	}
	pruneWeights(root, keep)
	for p, want := range map[string]bool{keep + "/policy.json": true, keep + ".manifest.json": true, "d1/run/r1/etag1": false, "d1/run/r1/etag1.manifest.json": false, "d2/other/w0/e": false} {
		if _, err := os.Stat(filepath.Join(root, p)); (err == nil) != want {
			t.Errorf("%s: exists = %v, want %v", p, err == nil, want)
		}
	}
}
