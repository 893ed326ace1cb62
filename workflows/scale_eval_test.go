package workflows_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// plusCells is instant_plus.yaml's split: LIBERO-Plus's 10,030
// configurations, one init state each.
const plusCells = 10030

// BenchmarkScaleEval evaluates harnesses/minimal/instant_plus.yaml's
// 10,030 cells in one evaluation, as `starter eval` does, and reads back
// the histories of the Eval workflow and its Episodes chunks:
//
//	ROUNDHOUSE_SCALE_TEMPORAL=dev,cluster go test ./workflows/ -run XXX -bench ScaleEval -benchtime 1x -timeout 60m -v
//
// (cluster as root). It fails unless every cell has exactly one episode
// row, the stored report counts them all and the report's copy in history
// leaves its 10,030 task rows in S3.
func BenchmarkScaleEval(b *testing.B) {
	for _, server := range strings.Split(cmp.Or(os.Getenv("ROUNDHOUSE_SCALE_TEMPORAL"), "dev"), ",") {
		b.Run(fmt.Sprintf("%s/%d", server, plusCells), func(b *testing.B) {
			const slots = 16
			for i := range b.N {
				var stack itest.Stack
				size := func() int64 { return 0 }
				switch server {
				case "dev":
					stack = itest.Start(b)
				case "cluster":
					var c sqlRunner
					stack, c = itest.StartCluster(b, "scale-eval")
					size = func() int64 { return pgBytes(b, c) }
				default:
					b.Fatalf("ROUNDHOUSE_SCALE_TEMPORAL %q: use dev, cluster or both (dev,cluster)", server)
				}
				bins := itest.Binaries(b)
				stack.StartWorker(b, bins, "main", "--slots", strconv.Itoa(slots))
				before := size()
				r := runScaleEval(b, stack, bins, fmt.Sprintf("scale-eval-%d", i))
				pg := size() - before
				took := r.Parent.Close.Sub(r.Parent.Start)
				big := r.Largest()
				biggest := r.Parent
				for _, c := range r.Children {
					if c.Biggest > biggest.Biggest {
						biggest = c
					}
				}
				b.ReportMetric(took.Seconds(), "eval-s")
				b.ReportMetric(float64(plusCells)/took.Seconds(), "episodes/s")
				b.ReportMetric(float64(len(r.Children)), "children")
				b.ReportMetric(float64(r.Parent.Events), "parent-events")
				b.ReportMetric(float64(r.Parent.Bytes), "parent-B")
				b.ReportMetric(float64(big.Events), "child-events")
				b.ReportMetric(float64(big.Bytes), "child-B")
				b.ReportMetric(float64(biggest.Biggest), "biggest-event-B")
				if pg > 0 {
					b.ReportMetric(float64(pg)/1e6*1000/plusCells, "pg-MB/1000ep")
				}
				b.Logf("%d cells on %d slots, %s: evaluation %v (starter %v), %d chunks; Eval %d events %d B (biggest event %s %d B); "+
					"largest chunk %s %d events %d B; biggest event of all: %s of %s, %d B (%.1f%% of the 2 MB payload limit); PostgreSQL +%.1f MB",
					plusCells, slots, server, took.Round(time.Millisecond), r.Client.Round(time.Millisecond), len(r.Children),
					r.Parent.Events, r.Parent.Bytes, r.Parent.BiggestType, r.Parent.Biggest, big.ID, big.Events, big.Bytes,
					biggest.BiggestType, biggest.ID, biggest.Biggest, 100*float64(biggest.Biggest)/(2<<20), float64(pg)/1e6)
			}
		})
	}
}

// runScaleEval runs `starter eval` of the 10,030 cells to the end and
// checks what it stored.
func runScaleEval(tb testing.TB, stack itest.Stack, bins, run string) scaleResult {
	tb.Helper()
	root := itest.Root(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	c, err := connect.Temporal(ctx, stack.Endpoints, tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	const tag = "plus"
	started := time.Now()
	// Followed, not detached: the starter prints the report, whose task
	// rows it reads from S3.
	out, err := stack.Starter(ctx, tb, bins, "eval",
		"--config", filepath.Join(root, "harnesses/minimal/instant_plus.yaml"), "--run", run,
		"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"), "--tag", tag,
		"--init-key", "eval_init_ids", "--var", "bin="+bins).CombinedOutput()
	if err != nil {
		tb.Fatalf("starter eval: %v\n%s", err, out)
	}
	r := scaleResult{Episodes: plusCells, Slots: 16, Client: time.Since(started)}
	if !strings.Contains(string(out), "10 of 10030 tasks shown") {
		tb.Errorf("starter eval did not print the report's lowest tasks:\n%s", out)
	}
	id := api.EvalWorkflowID(run, tag, 0, 1)
	var rep schemas.Report
	if err := c.GetWorkflow(ctx, id, "").Get(ctx, &rep); err != nil {
		tb.Fatalf("workflow %s: %v", id, err)
	}
	if rep.OmittedTasks != plusCells || rep.Tasks != nil || rep.Cells != nil || rep.Overall.Episodes != plusCells {
		tb.Errorf("the report in history: %d task rows, %d omitted, %d cells, %d episodes; want none, %d, none, %d",
			len(rep.Tasks), rep.OmittedTasks, len(rep.Cells), rep.Overall.Episodes, plusCells, plusCells)
	}
	var stored schemas.Report
	if err := store.GetJSON(ctx, stack.Store, schemas.Layout{Run: run}.Report(tag), &stored); err != nil {
		tb.Fatal(err)
	}
	if len(stored.Tasks) != plusCells || len(stored.Cells) != plusCells || stored.Overall.Successes != plusCells || stored.Overall.Lost != 0 {
		tb.Errorf("stored report: %d task rows, %d cells, %d successes, %d lost; want %d, %d, %d, 0",
			len(stored.Tasks), len(stored.Cells), stored.Overall.Successes, stored.Overall.Lost, plusCells, plusCells, plusCells)
	}
	if r.Parent, err = scaleHistory(ctx, c, id); err != nil {
		tb.Fatal(err)
	}
	phase := schemas.TagPhase(tag)
	r.Children = chunkHistories(ctx, tb, c, id, 0, phase)
	if want := (plusCells + api.ChunkSize - 1) / api.ChunkSize; len(r.Children) != want {
		tb.Fatalf("%d Episodes chunks of %s, want %d", len(r.Children), id, want)
	}
	objs, err := stack.Store.List(ctx, schemas.Layout{Run: run}.EpisodesDir(0, phase))
	if err != nil {
		tb.Fatal(err)
	}
	seen := map[string]int{}
	for _, o := range objs {
		rows, err := store.ReadParquet[schemas.Episode](ctx, stack.Store, o.Key)
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range rows {
			seen[e.EpisodeID]++
		}
		r.Rows = append(r.Rows, rows...)
		r.Objects = append(r.Objects, o.Key)
	}
	dup := 0
	for _, n := range seen {
		dup += n - 1
	}
	if len(seen) != plusCells || dup != 0 {
		tb.Errorf("%d distinct episode rows (%d duplicated) in %d objects, want %d once each", len(seen), dup, len(objs), plusCells)
	}
	return r
}
