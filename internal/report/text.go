package report

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// The text forms of reports, comparisons and a run's rounds: the terminal
// prints them, and a file written beside the JSON can hold the same.

// WriteTable writes a report's per-task, per-suite and overall table, with
// both denominators and 95 % intervals, then says what kind of score it is
// and where the report is stored (bucket). Past ShortTasks tasks, only the
// WorstShown worst tasks get a row, and a line says where every task's is
// (ReportFiles). A report on eval_init_ids whose invalid share is over the
// limit is written, then refused as a final score: the error says why and
// what to do.
func WriteTable(w io.Writer, rep schemas.Report, bucket string) error {
	return writeTable(w, rep, bucket, false)
}

// WriteFullTable is WriteTable with every task's row, however many.
func WriteFullTable(w io.Writer, rep schemas.Report, bucket string) error {
	return writeTable(w, rep, bucket, true)
}

func writeTable(w io.Writer, rep schemas.Report, bucket string, all bool) error {
	key := rep.Key()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "task\tname\tsuite\tattempted\tvalid\tinvalid\tlost\tsuccesses\tsuccess / valid [95% CI]\tsuccess / attempted\tinvalid by cause\t")
	row := func(id, name, suite string, r schemas.TaskResult) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", id, name, suite, r.Attempted(), r.Valid, r.Invalid, r.Lost, r.Successes,
			stats.Rate(r.Successes, r.Valid), stats.Rate(r.Successes, r.Attempted()), Causes(r))
	}
	tasks, short := shownTasks(rep.Tasks, all)
	for _, t := range tasks {
		row(strconv.Itoa(int(t.Task)), t.Name, t.Suite, t)
	}
	for _, su := range rep.Suites {
		row("suite", "", su.Suite, su)
	}
	row("all", "", "", rep.Overall)
	tw.Flush()
	if short {
		writeWhereTasks(w, rep, bucket, len(tasks))
	}
	took := ""
	if rep.StartedAtMS > 0 && rep.FinishedAtMS >= rep.StartedAtMS {
		took = ", took " + (time.Duration(rep.FinishedAtMS-rep.StartedAtMS) * time.Millisecond).Round(time.Second).String()
	}
	fmt.Fprintf(w, "weights %s (digest %.12s), %s, harness %s (config %s)%s\nreport: s3://%s/%s\n",
		rep.WeightsID, rep.WeightsDigest, rep.InitKey, rep.Harness, rep.Digest, took, bucket, key)
	o := rep.Overall
	if st := rep.Stopped; st != nil {
		fmt.Fprintf(w, "!! INCOMPLETE: the evaluation was stopped (%s): %d cells were skipped and count as lost; not a score of the split. Run the same `starter eval` again (same --run and --tag) to finish it\n",
			st.Reason, st.Skipped)
	}
	if o.Invalid+o.Lost > 0 {
		fmt.Fprintf(w, "invalid by cause: %s (%.1f%% of %d attempted; lost cells are listed as missing in the report)\n", Causes(o), 100*o.InvalidShare(), o.Attempted())
	}
	if OverInvalidLimit(rep) {
		fmt.Fprintf(w, "!! TOO MANY INVALID: %.1f%% of attempted episodes were invalid or lost, over the limit of %.0f%% (collect.max_invalid_share): the success rate speaks for the episodes that ran, not for the split\n",
			100*o.InvalidShare(), 100*InvalidLimit(rep))
	}
	switch {
	case rep.IsShard():
		fmt.Fprintf(w, "SHARD %d/%d of tag %s: not a score of the split. Once all %d shards are done: starter report merge --run %s --tag %s\n",
			rep.Shard, rep.Shards, rep.Tag, rep.Shards, rep.Run, rep.Tag)
	case rep.Stopped != nil && rep.InitKey != FinalKey:
		fmt.Fprintf(w, "incomplete (%s): %s over the %d valid of %d attempted episodes before the stop — not a score of the split\n",
			rep.InitKey, stats.Rate(o.Successes, o.Valid), o.Valid, o.Attempted())
	case rep.InitKey == FinalKey:
		if err := FinalScoreError(rep); err != nil {
			return fmt.Errorf("tag %s of run %s: %w", rep.Tag, rep.Run, err)
		}
		what := fmt.Sprintf("all %d tasks", len(rep.Tasks))
		if rep.Protocol != "" {
			what = fmt.Sprintf("%s: %d required tasks", rep.Protocol, len(rep.RequiredTasks))
		}
		p := ProtocolResult(rep)
		fmt.Fprintf(w, "final score (eval_init_ids, %s): %s over %d valid of %d attempted episodes\n", what, stats.Rate(p.Successes, p.Valid), p.Valid, p.Attempted())
	default:
		fmt.Fprintf(w, "validation score (%s): %s over %d valid of %d attempted episodes — for choosing weights, not a final score\n",
			rep.InitKey, stats.Rate(o.Successes, o.Valid), o.Valid, o.Attempted())
	}
	return nil
}

// WriteComparison writes a paired comparison: per task, suite and overall
// both success rates, B's gain and the McNemar p-value, then the
// discordant cells grouped by how the losing side ended. Past ShortTasks
// tasks, only the WorstShown tasks of lowest p get a row and the groups
// only their counts; the stored comparison holds the rest.
func WriteComparison(w io.Writer, c schemas.Comparison) {
	writeComparison(w, c, false)
}

// WriteFullComparison is WriteComparison with every task and every
// discordant cell, however many.
func WriteFullComparison(w io.Writer, c schemas.Comparison) {
	writeComparison(w, c, true)
}

func writeComparison(w io.Writer, c schemas.Comparison, all bool) {
	fmt.Fprintf(w, "A = %s (weights %s), B = %s (weights %s); pairs are cells valid under both (%d left out)\n\n",
		c.A, c.WeightsA, c.B, c.WeightsB, c.Unpaired)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "task\tname\tpairs\tA success [95% CI]\tB success [95% CI]\tB − A\tonly A\tonly B\tMcNemar p\t")
	row := func(r schemas.PairedResult, task, name string) {
		pct := func(k int) string { return fmt.Sprintf("%d: %s", k, stats.Rate(k, r.Pairs)) }
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%+.1f pp\t%d\t%d\t%.3g\t\n", task, name, r.Pairs, pct(r.SuccessA), pct(r.SuccessB),
			100*r.Difference, r.OnlyA, r.OnlyB, r.PValue)
	}
	tasks, short := shownPairs(c.Tasks, all)
	for _, r := range tasks {
		row(r, fmt.Sprint(r.Task), r.Name)
	}
	for _, r := range c.Suites {
		row(r, "suite", r.Suite)
	}
	row(c.Overall, "all", "")
	tw.Flush()
	if short {
		fmt.Fprintf(w, "%d of %d tasks shown: the lowest McNemar p; every task and discordant cell: the stored comparison, or --tasks\n", len(tasks), len(c.Tasks))
	}
	if len(c.Discordant) == 0 {
		fmt.Fprintln(w, "\nno discordant cell: A and B succeeded on exactly the same pairs")
		return
	}
	fmt.Fprintf(w, "\ndiscordant cells: %d\n", len(c.Discordant))
	for _, g := range GroupDiscordant(c.Discordant) {
		won, lost := "B", "A"
		if g.Winner == "a" {
			won, lost = "A", "B"
		}
		fmt.Fprintf(w, "\n%s solved, %s did not (%s ended: %s): %d\n", won, lost, lost, g.Termination, len(g.Cells))
		if short {
			continue
		}
		for _, d := range g.Cells {
			fmt.Fprintf(w, "  task %d init %d  A %s %s\n                B %s %s\n", d.Task, d.InitID, d.A.EpisodeID, d.A.Artifacts, d.B.EpisodeID, d.B.Artifacts)
		}
	}
}

// WriteDiagnostics writes the table a user reads when training does or
// does not move: signal, validity, selection, token capture, trainer per
// round; then how the collection's task failures ended and the validation
// success over the rounds (with the final validation once st is done).
func WriteDiagnostics(w io.Writer, sums []schemas.RoundSummary, st schemas.State) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tgroups w/o signal\tinvalid by cause\tzero-weight\ttoken capture\timages\tlogprob Δ mean\tmax\tcall max\tdrift share\tloss\tclip frac\tsteps\t")
	for _, r := range sums {
		capture := "-"
		if r.Calls > 0 {
			capture = fmt.Sprintf("%.1f%%", 100*float64(r.Calls-r.UntrainableCalls)/float64(r.Calls))
		}
		// Distinct images the batch took to the trainer, and their uses.
		images := "-"
		if r.ImageRefs > 0 {
			images = fmt.Sprintf("%d (%d uses)", r.Images, r.ImageRefs)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\t%.2g\t%.2g\t%.2g\t%.1f%%\t%.4f\t%.3f\t%d\t\n", r.Round, r.Groups-r.GroupsWithSignal,
			CauseList(r.InvalidByCause), r.ZeroWeightSamples, capture, images, r.Trainer.LogprobMismatch, r.Trainer.LogprobMismatchMax, r.Trainer.DriftCallMax,
			100*r.Trainer.DriftShare, r.Trainer.Loss, r.Trainer.ClipFraction, r.Trainer.Steps)
	}
	tw.Flush()
	// How the collection's task failures ended: a planner that loops to its
	// turn budget, one that claims success early and one that errors call
	// for different fixes.
	var reasons []string
	for _, r := range sums {
		if len(r.TaskFailuresByReason) > 0 {
			reasons = append(reasons, fmt.Sprintf("r%d %s", r.Round, CauseList(r.TaskFailuresByReason)))
		}
	}
	if len(reasons) > 0 {
		fmt.Fprintf(w, "\ntask failures by reason: %s\n", strings.Join(reasons, " · "))
	}
	// Why calls did not train: failures, missing ids, or sampling the
	// trainer cannot reproduce (docs/design.md §3, "Sampling settings").
	var untrainable []string
	for _, r := range sums {
		if len(r.UntrainableByReason) > 0 {
			untrainable = append(untrainable, fmt.Sprintf("r%d %s", r.Round, CauseList(r.UntrainableByReason)))
		}
	}
	if len(untrainable) > 0 {
		fmt.Fprintf(w, "\nuntrainable calls by reason: %s\n", strings.Join(untrainable, " · "))
	}
	// Overlapped rounds: what each collected on and trained from, and how
	// both sides spent the run (docs/design.md §1, "Overlapped rounds").
	var overlap []string
	for _, r := range sums {
		if l := OverlapLine(r); l != "" {
			overlap = append(overlap, "  "+l)
		}
	}
	if len(overlap) > 0 {
		fmt.Fprintf(w, "\noverlapped rounds:\n%s\n", strings.Join(overlap, "\n"))
	}
	if b := RunBusy(sums); b.Rounds > 0 {
		fmt.Fprintf(w, "\ntime: %s\n", b)
	}
	var trend []string
	for _, r := range sums {
		if r.ValSuccess >= 0 {
			trend = append(trend, fmt.Sprintf("%.1f%%", 100*r.ValSuccess))
		}
	}
	if st.FinalValSuccess >= 0 && st.RoundsDone == st.Rounds && st.Rounds > 0 {
		trend = append(trend, fmt.Sprintf("%.1f%% (final)", 100*st.FinalValSuccess))
	}
	if len(trend) > 0 {
		fmt.Fprintf(w, "\nvalidation success: %s\n", strings.Join(trend, " → "))
	}
}

// ShortTasks is the most tasks a report or comparison prints a row for
// each of: a few dozen read in a terminal, ten thousand do not. Past it,
// the text forms show the WorstShown worst tasks and where the rest are.
const ShortTasks = 50

// WorstShown is how many tasks a text form past ShortTasks shows.
const WorstShown = 10

// shownTasks is the tasks a report's table lists, and whether that is a
// short form leaving some out.
func shownTasks(tasks []schemas.TaskResult, all bool) ([]schemas.TaskResult, bool) {
	if all || len(tasks) <= ShortTasks {
		return tasks, false
	}
	return WorstTasks(tasks, WorstShown), true
}

// WorstTasks is the n tasks of lowest success over valid episodes, worst
// first; tasks without a valid episode come first, as they have no rate
// at all (a required one refuses a final score). Ties go to the task with
// more evidence (more valid, or for those without, more attempted), then
// to the lower id. Tasks nothing was attempted of (another shard's) are
// left out.
func WorstTasks(tasks []schemas.TaskResult, n int) []schemas.TaskResult {
	var ts []schemas.TaskResult
	for _, t := range tasks {
		if t.Attempted() > 0 {
			ts = append(ts, t)
		}
	}
	slices.SortStableFunc(ts, func(a, b schemas.TaskResult) int {
		if (a.Valid == 0) != (b.Valid == 0) {
			if a.Valid == 0 {
				return -1
			}
			return 1
		}
		if a.Valid == 0 {
			return cmp.Or(cmp.Compare(b.Attempted(), a.Attempted()), cmp.Compare(a.Task, b.Task))
		}
		// a.S/a.V against b.S/b.V without floats, so equal rates tie exactly.
		return cmp.Or(cmp.Compare(a.Successes*b.Valid, b.Successes*a.Valid), cmp.Compare(b.Valid, a.Valid), cmp.Compare(a.Task, b.Task))
	})
	return ts[:min(n, len(ts))]
}

// writeWhereTasks says, under a short table, which tasks it shows and
// where every task's row is: the files beside a full report, or for a
// shard (which has none) the command that prints them.
func writeWhereTasks(w io.Writer, rep schemas.Report, bucket string, shown int) {
	fmt.Fprintf(w, "%d of %d tasks shown: the lowest success over valid episodes (those without a valid episode first)\n", shown, len(rep.Tasks))
	if rep.IsShard() {
		fmt.Fprintf(w, "every task: starter report show --run %s --tag %s --shard %d/%d --tasks\n", rep.Run, rep.Tag, rep.Shard, rep.Shards)
		return
	}
	l := schemas.Layout{Run: rep.Run}
	fmt.Fprintf(w, "every task: s3://%s/%s (CSV), s3://%s/%s, or starter report show --run %s --tag %s --tasks\n",
		bucket, l.ReportTasks(rep.Tag), bucket, l.ReportText(rep.Tag), rep.Run, rep.Tag)
}

// shownPairs is the tasks a comparison's table lists, and whether that is
// a short form: past ShortTasks, the WorstShown of lowest McNemar p (where
// A and B differ most surely, either way), ties to the larger difference,
// then the lower id.
func shownPairs(tasks []schemas.PairedResult, all bool) ([]schemas.PairedResult, bool) {
	if all || len(tasks) <= ShortTasks {
		return tasks, false
	}
	ts := slices.Clone(tasks)
	slices.SortStableFunc(ts, func(a, b schemas.PairedResult) int {
		return cmp.Or(cmp.Compare(a.PValue, b.PValue), cmp.Compare(math.Abs(b.Difference), math.Abs(a.Difference)), cmp.Compare(a.Task, b.Task))
	})
	return ts[:WorstShown], true
}

// ReportFile is a file written beside a full report.json.
type ReportFile struct {
	Key  string
	Body []byte
}

// ReportFiles are the files written beside a full report: every task's
// row as text (WriteFullTable, report.txt) and as CSV (tasks.csv). They
// depend on the stored report alone, so a retry writes the same bytes. A
// shard has none: its tasks are in the merged report's.
func ReportFiles(rep schemas.Report, bucket string) ([]ReportFile, error) {
	if rep.IsShard() {
		return nil, nil
	}
	l := schemas.Layout{Run: rep.Run}
	var txt, csv bytes.Buffer
	if err := WriteFullTable(&txt, rep, bucket); err != nil {
		// The table is written; the refusal belongs with it.
		fmt.Fprintf(&txt, "!! %v\n", err)
	}
	if err := WriteTasksCSV(&csv, rep); err != nil {
		return nil, fmt.Errorf("tasks of report %s: %w", rep.Tag, err)
	}
	return []ReportFile{{Key: l.ReportText(rep.Tag), Body: txt.Bytes()}, {Key: l.ReportTasks(rep.Tag), Body: csv.Bytes()}}, nil
}

// TasksCSVHeader is tasks.csv's header. Rates are fractions; a rate
// without a valid episode is empty (NULL in DuckDB).
var TasksCSVHeader = []string{"task", "name", "suite", "attempted", "valid", "invalid", "lost", "successes",
	"success_rate", "ci95_low", "ci95_high", "success_over_attempted", "invalid_by_cause"}

// WriteTasksCSV writes one row per task of rep, in the report's order,
// under TasksCSVHeader.
func WriteTasksCSV(w io.Writer, rep schemas.Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(TasksCSVHeader); err != nil {
		return err
	}
	frac := func(k, n int) string {
		if n == 0 {
			return ""
		}
		return strconv.FormatFloat(float64(k)/float64(n), 'f', 4, 64)
	}
	for _, t := range rep.Tasks {
		lo, hi := "", ""
		if t.Valid > 0 {
			ci := stats.Wilson(t.Successes, t.Valid)
			lo, hi = strconv.FormatFloat(ci.Lo, 'f', 4, 64), strconv.FormatFloat(ci.Hi, 'f', 4, 64)
		}
		causes := Causes(t)
		if causes == "-" {
			causes = ""
		}
		if err := cw.Write([]string{strconv.Itoa(int(t.Task)), t.Name, t.Suite, strconv.Itoa(t.Attempted()), strconv.Itoa(t.Valid),
			strconv.Itoa(t.Invalid), strconv.Itoa(t.Lost), strconv.Itoa(t.Successes), frac(t.Successes, t.Valid), lo, hi,
			frac(t.Successes, t.Attempted()), causes}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
