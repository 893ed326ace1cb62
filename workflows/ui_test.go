package workflows_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdkpb "go.temporal.io/api/sdk/v1"
	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/schemas"
	"github.com/roundhouse-rl/roundhouse/workflows/api"
)

// TestUITellsTheStory runs two tiny real train runs against a Temporal dev
// server with its web UI, then looks at the UI in headless Chromium the way
// a person would: the workflow page (summary, child workflow summaries on
// the timeline), its User Metadata tab (summary and the current details'
// markdown tables), a child Episodes workflow's timeline (one summary per
// RunEpisode activity), the Search Attributes tab, and the workflow list
// filtered with RoundhouseRun = "<run>" in the search box.
//
// Screenshots go to $ROUNDHOUSE_UI_SHOTS when set (kept), else to the
// test's temp dir (removed when the test ends).
func TestUITellsTheStory(t *testing.T) {
	chromium := findChromium(t)
	stack := itest.StartWithUI(t)
	ui := stack.UI
	bins := itest.Binaries(t)
	root := itest.Root(t)
	shots := os.Getenv("ROUNDHOUSE_UI_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The worker registers the search attributes at start; the UI's query
	// (Current Details) is answered by it, so it runs until the test ends.
	stack.StartWorker(t, bins, "ui")
	const run, other = "ui-story", "ui-other"
	for _, r := range []string{run, other} {
		st := stack.Starter(ctx, t, bins, "train",
			"--config", filepath.Join(root, "harnesses/minimal/harness.yaml"), "--run", r,
			"--weights", filepath.Join(root, "harnesses/minimal/weights/w0"), "--rounds", "1",
			"--groups", "2", "--attempts", "2", "--var", "bin="+bins, "--detach")
		if out, err := st.CombinedOutput(); err != nil {
			t.Fatalf("starter %s: %v\n%s", r, err, out)
		}
	}
	c, err := connect.Temporal(ctx, stack.Endpoints, uiQuiet())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var res api.TrainResult
	for _, r := range []string{other, run} {
		if err := c.GetWorkflow(ctx, api.WorkflowID(r), "").Get(ctx, &res); err != nil {
			t.Fatalf("workflow of run %s: %v", r, err)
		}
	}
	if len(res.Summaries) != 1 {
		t.Fatalf("run %s: want 1 round summary, got %+v", run, res.Summaries)
	}
	sum := res.Summaries[0]
	id := api.WorkflowID(run)
	// What starter/train.go puts in StaticSummary.
	summary := fmt.Sprintf("run %s: minimal, 1 rounds × 2 groups × 2 attempts from w0", run)
	trainChild := fmt.Sprintf("run %s round 1 train: episodes 0–3 of 4, weights w0", run)
	br := &uiBrowser{t: t, bin: chromium}

	// (a) The workflow page: the UI redirects to the latest run's history.
	// The UI (2.42.1, in Temporal CLI 1.5.1) shows neither summary nor
	// details in this page's header: the start summary is on the first
	// event (Workflow Execution Started → Summary), and the Episodes
	// children's summaries label the timeline's bars.
	page := ui + "/namespaces/default/workflows/" + id
	var runID string
	runRE := regexp.MustCompile(`/workflows/` + regexp.QuoteMeta(id) + `/([0-9a-f-]{36})/history`)
	br.until(page, "workflow page", func(dom string) error {
		m := runRE.FindStringSubmatch(dom)
		if m == nil {
			return fmt.Errorf("no link to a run's history")
		}
		runID = m[1]
		return uiWantAll(html.UnescapeString(dom), summary, trainChild, "Workflow Execution Completed")
	})
	br.screenshot(page, filepath.Join(shots, "workflow.png"))

	// The User Metadata tab: Summary and Current Details. The UI renders
	// both as markdown inside iframes whose src is /render?content=<the
	// markdown>; --dump-dom does not descend into iframes, so the markdown
	// is read from the src and the /render page is loaded on its own below.
	// Current Details come from the UI querying the workflow
	// (__temporal_workflow_metadata), so a worker must be up to show them.
	meta := fmt.Sprintf("%s/namespaces/default/workflows/%s/%s/user-metadata", ui, id, runID)
	var details, detailsSrc string
	ci := `[0-9.]+% \[[0-9]+–[0-9]+\]` // a rate and its 95 % interval
	roundRow := regexp.MustCompile(`(?m)^\| 1 \| ` + ci + ` \| ` + ci + ` \| ` + ci + ` \| [0-9]+/[0-9]+ \| ` + strconv.Itoa(sum.Samples) +
		` \| -?[0-9.]+ \| [0-9.e+-]+ / [0-9.e+-]+ \| w0 → ` + regexp.QuoteMeta(sum.NewWeightsID) + ` \|$`)
	br.until(meta, "User Metadata tab", func(dom string) error {
		var gotSummary bool
		details, detailsSrc = "", ""
		for _, src := range uiRenderSrcs(dom) {
			u, err := url.Parse(src)
			if err != nil {
				return err
			}
			content := u.Query().Get("content")
			switch {
			case content == summary:
				gotSummary = true
			case strings.HasPrefix(content, "**Run "):
				details, detailsSrc = content, src
			}
		}
		if !gotSummary {
			return fmt.Errorf("no Summary iframe with %q", summary)
		}
		if details == "" {
			return fmt.Errorf("no Current Details iframe yet")
		}
		if err := uiWantAll(details, fmt.Sprintf("**Run %s** · round 1/1 · weights %s · done", run, sum.NewWeightsID),
			// The fleet line, from the last chunk's result: no signal.
			"**fleet**: weights `"+run+"/", ": served by ", " · run "+run+" on the fleet: ",
			"| batch | value |", "| round | val success [95% CI] | collection success / valid | success / attempted | invalid + lost | samples | loss | logprob Δ mean / max | weights |"); err != nil {
			return err
		}
		if !roundRow.MatchString(details) {
			return fmt.Errorf("no row for round 1 (%d samples, w0 → %s) in the details:\n%s", sum.Samples, sum.NewWeightsID, details)
		}
		return nil
	})
	br.screenshot(meta, filepath.Join(shots, "user-metadata.png"))
	t.Logf("current details of %s as the UI shows them:\n%s", id, details)
	// The UI's markdown renderer turns the details into real tables.
	br.until(ui+detailsSrc, "rendered current details", func(dom string) error {
		return uiWantAll(html.UnescapeString(dom), "<strong>Run "+run+"</strong>", "<table>",
			"<th>round</th>", "<td>w0 → "+sum.NewWeightsID+"</td>")
	})

	// The fleet's current details, as the UI renders them. The fleet
	// never closes, and headless Chromium's virtual time never settles on
	// a running workflow's page (the UI keeps a long poll open), so the
	// markdown is read with the same query the UI sends and loaded in the
	// UI's own /render page, which the User Metadata tab frames.
	mv, err := c.QueryWorkflow(ctx, api.FleetID, "", "__temporal_workflow_metadata")
	if err != nil {
		t.Fatal(err)
	}
	var md sdkpb.WorkflowMetadata
	if err := mv.Get(&md); err != nil {
		t.Fatal(err)
	}
	fleetDetails := md.GetCurrentDetails()
	if err := uiWantAll(fleetDetails, "**fleet**: 1 rollout hosts", "| host | assigned | loaded (busy) | loads | fetching | serving paused | idle | waited |"); err != nil {
		t.Fatalf("fleet details: %v\n%s", err, fleetDetails)
	}
	fleetPage := ui + "/render?content=" + url.QueryEscape(fleetDetails)
	br.until(fleetPage, "rendered fleet details", func(dom string) error {
		return uiWantAll(html.UnescapeString(dom), "<strong>fleet</strong>", "<table>", "<th>host</th>", "<th>loads</th>")
	})
	br.screenshot(fleetPage, filepath.Join(shots, "fleet-details.png"))
	t.Logf("the fleet's current details:\n%s", fleetDetails)

	// The Search Attributes tab lists Roundhouse's attributes as upserted.
	br.until(fmt.Sprintf("%s/namespaces/default/workflows/%s/%s/search-attributes", ui, id, runID), "Search Attributes tab",
		func(dom string) error {
			d := strings.Join(strings.Fields(html.UnescapeString(uiStripTags(dom))), " ")
			return uiWantAll(d, `"RoundhouseRun" : "`+run+`"`, `"RoundhouseKind" : "train"`, `"RoundhouseRound" : 1`,
				`"RoundhousePhase" : "done"`, `"RoundhouseWeights" : "`+sum.NewWeightsID+`"`, `"RoundhouseSuccessRate" :`)
		})

	// A child Episodes workflow: every RunEpisode bar on its timeline is
	// labelled "<episode id> task <id> <name> init <k>"; the expected labels
	// come from the episode rows the run stored in S3.
	eps, err := store.ReadTable(ctx, stack.Store, schemas.Layout{Run: run}.EpisodesDir(1, schemas.PhaseTrain),
		func(e schemas.Episode) string { return e.EpisodeID })
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 4 {
		t.Fatalf("%d train episodes stored, want 4", len(eps))
	}
	var labels []string
	for _, e := range eps {
		labels = append(labels, fmt.Sprintf("%s task %d %s init %d", e.EpisodeID, e.Task, e.TaskName, e.InitID))
	}
	child := ui + "/namespaces/default/workflows/" + api.ChildID(id, 1, schemas.PhaseTrain, 0)
	br.until(child, "Episodes child workflow page", func(dom string) error {
		return uiWantAll(html.UnescapeString(dom), append(labels, "RunEpisode", "Parent Workflow")...)
	})
	br.screenshot(child, filepath.Join(shots, "episodes-child.png"))

	// (b) The workflow list, filtered in the search box by run: the train
	// workflow and its three Episodes children (validation before and
	// after the round, collection), nothing of the other run.
	all := ui + "/namespaces/default/workflows"
	br.until(all, "unfiltered workflow list", func(dom string) error {
		got := uiListed(dom)
		if !got[id] || !got[api.WorkflowID(other)] {
			return fmt.Errorf("the list does not show both runs yet: %v", got)
		}
		return nil
	})
	filtered := all + "?query=" + url.QueryEscape(fmt.Sprintf("RoundhouseRun=%q", run))
	want := map[string]bool{id: true}
	for _, k := range []struct {
		round int32
		phase string
	}{{1, schemas.PhaseVal}, {1, schemas.PhaseTrain}, {2, schemas.PhaseVal}} {
		want[api.ChildID(id, k.round, k.phase, 0)] = true
	}
	br.until(filtered, "workflow list filtered by RoundhouseRun", func(dom string) error {
		text := strings.Join(strings.Fields(html.UnescapeString(uiStripTags(dom))), " ")
		if err := uiWantAll(text, fmt.Sprintf("RoundhouseRun = %q", run), fmt.Sprintf("%d Workflows", len(want))); err != nil {
			return err
		}
		if got := uiListed(dom); !maps.Equal(got, want) {
			return fmt.Errorf("the filtered list shows %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
		return nil
	})
	br.screenshot(filtered, filepath.Join(shots, "list-filtered.png"))
	keep := "kept"
	if os.Getenv("ROUNDHOUSE_UI_SHOTS") == "" {
		keep = "removed when the test ends; set ROUNDHOUSE_UI_SHOTS=<dir> to keep them"
	}
	t.Logf("screenshots in %s (workflow.png, user-metadata.png, fleet-details.png, episodes-child.png, list-filtered.png): %s", shots, keep)
}

// findChromium returns Chromium's path. Without it the test is skipped,
// except in CI (CI set), which installs it (.ci/run) and must not skip.
func findChromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs the Temporal dev server with its UI, versitygw and Chromium (run without -short)")
	}
	p, err := exec.LookPath("chromium")
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("chromium is not installed but CI is set: .ci/run installs it (apt-get install chromium): %v", err)
	}
	t.Skip("chromium is not installed (sudo apt-get install chromium); skipping the Temporal UI test")
	return ""
}

// browser runs headless Chromium, one process per page, each with its own
// profile so concurrent runs never share one.
type uiBrowser struct {
	t   *testing.T
	bin string
}

func (b *uiBrowser) run(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.bin, append([]string{"--headless=new", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars", "--window-size=1400,2000",
		"--user-data-dir=" + filepath.Join(b.t.TempDir(), "profile")}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// until loads url until check accepts its DOM. The UI is a single-page
// app: with --virtual-time-budget Chromium waits for its fetches (virtual
// time stops while requests are pending), and 5 s was always enough here;
// longer budgets and a few retries cover a slow machine and the short lag
// before a closed workflow shows up in visibility.
func (b *uiBrowser) until(url, what string, check func(dom string) error) {
	b.t.Helper()
	var last error
	var dom []byte
	for i, budget := range []int{5000, 10000, 20000, 20000, 30000} {
		if i > 0 {
			time.Sleep(time.Duration(i) * time.Second)
		}
		var err error
		dom, err = b.run("--virtual-time-budget="+strconv.Itoa(budget), "--dump-dom", url)
		if err != nil {
			last = err
			continue
		}
		if last = check(string(dom)); last == nil {
			if i > 0 {
				b.t.Logf("%s: shown on try %d (virtual time budget %d ms)", what, i+1, budget)
			}
			return
		}
	}
	saved := filepath.Join(b.t.TempDir(), "dom.html")
	_ = os.WriteFile(saved, dom, 0o644)
	b.t.Fatalf("%s (%s): %v (last DOM: %s)", what, url, last, saved)
}

// screenshot saves a PNG of the page as Chromium renders it.
func (b *uiBrowser) screenshot(url, file string) {
	b.t.Helper()
	if _, err := b.run("--virtual-time-budget=10000", "--screenshot="+file, url); err != nil {
		b.t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Size() == 0 {
		b.t.Fatalf("screenshot %s not written (%v)", file, err)
	}
	b.t.Logf("screenshot: %s", file)
}

var (
	uiRenderSrcRE = regexp.MustCompile(`<iframe[^>]*\ssrc="(/render\?[^"]*)"`)
	uiTagRE       = regexp.MustCompile(`<[^>]*>`)
	uiListRE      = regexp.MustCompile(`href="/namespaces/default/workflows/([^/"]+)/[0-9a-f-]{36}/history"`)
)

// renderSrcs returns the src of every markdown iframe (/render?content=…).
func uiRenderSrcs(dom string) []string {
	var out []string
	for _, m := range uiRenderSrcRE.FindAllStringSubmatch(dom, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// uiListed returns the workflow ids the list page links to.
func uiListed(dom string) map[string]bool {
	out := map[string]bool{}
	for _, m := range uiListRE.FindAllStringSubmatch(dom, -1) {
		out[m[1]] = true
	}
	return out
}

func uiStripTags(s string) string { return uiTagRE.ReplaceAllString(s, " ") }

// wantAll says which of the texts s lacks.
func uiWantAll(s string, texts ...string) error {
	var missing []string
	for _, x := range texts {
		if !strings.Contains(s, x) {
			missing = append(missing, strconv.Quote(x))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("page lacks %s", strings.Join(missing, ", "))
	}
	return nil
}

func uiQuiet() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
}
