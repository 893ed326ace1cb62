package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/roundhouse-rl/roundhouse/internal/stats"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// History is what a run has recorded so far: its finished rounds'
// summaries, in round order, and its state (FinalValSuccess -1 when none).
type History struct {
	Summaries []schemas.RoundSummary
	State     schemas.State
}

// ReadHistory reads a run's round summaries and state; a run without
// run.json, harness.json or state.json is unknown.
func ReadHistory(ctx context.Context, s *store.Store, run string) (History, error) {
	l := schemas.Layout{Run: run}
	h := History{State: schemas.State{FinalValSuccess: -1}}
	found := false
	for _, key := range []string{l.RunSpec(), l.Harness(), l.State()} {
		ok, err := s.Exists(ctx, key)
		if err != nil {
			return h, err
		}
		if ok {
			found = true
			break
		}
	}
	if !found {
		return h, fmt.Errorf("run %s not found in s3://%s/runs/: see `starter status` for the runs", run, s.Bucket)
	}
	objs, err := s.List(ctx, l.Prefix()+"rounds/")
	if err != nil {
		return h, err
	}
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, "/summary.json") {
			continue
		}
		b, err := s.Get(ctx, o.Key)
		if err != nil {
			return h, err
		}
		var r schemas.RoundSummary
		if err := json.Unmarshal(b, &r); err != nil {
			return h, fmt.Errorf("%s: %w", o.Key, err)
		}
		h.Summaries = append(h.Summaries, r)
	}
	sort.Slice(h.Summaries, func(i, j int) bool { return h.Summaries[i].Round < h.Summaries[j].Round })
	if b, err := s.Get(ctx, l.State()); err == nil {
		_ = json.Unmarshal(b, &h.State)
	}
	return h, nil
}

// Counts are the outcomes of one phase of a round. Episodes counts the
// episode rows (valid and invalid); Lost the episodes without a row, which
// the rows cannot tell and the round's summary or report adds.
type Counts struct{ Episodes, Valid, Successes, Lost int }

// Rate is successes over valid episodes, -1 when none is valid.
func (c Counts) Rate() float64 {
	if c.Valid == 0 {
		return -1
	}
	return float64(c.Successes) / float64(c.Valid)
}

// Attempted is every episode of the phase: valid, invalid and lost.
func (c Counts) Attempted() int { return c.Episodes + c.Lost }

// String is success over valid episodes with its 95 % interval:
// "19/30 (63.3% [45–79])".
func (c Counts) String() string {
	if c.Episodes == 0 {
		return "-"
	}
	if c.Valid == 0 {
		return fmt.Sprintf("0/0 valid of %d", c.Attempted())
	}
	return fmt.Sprintf("%d/%d (%s)", c.Successes, c.Valid, stats.Rate(c.Successes, c.Valid))
}

// OfAttempted is success over attempted episodes with its 95 % interval.
func (c Counts) OfAttempted() string {
	if c.Attempted() == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d (%s)", c.Successes, c.Attempted(), stats.Rate(c.Successes, c.Attempted()))
}

// RoundSuccess is a round's success as the episode rows tell it: the
// collection (train phase) and the validation that opened the round
// (val-r<R>). The final validation of an N-round run is round N+1's.
type RoundSuccess struct {
	Round      int32
	Train, Val Counts
	// By task suite (the harness's tasks[].suite), for runs that mix them.
	TrainBySuite, ValBySuite map[string]Counts
}

// successRow is the part of schemas.Episode the chart needs: ScanTable
// decodes only these columns.
type successRow struct {
	EpisodeID string `parquet:"episode_id"`
	Suite     string `parquet:"suite"`
	Success   bool   `parquet:"success"`
	Valid     bool   `parquet:"valid"`
}

func (c *Counts) add(r successRow) {
	c.Episodes++
	if r.Valid {
		c.Valid++
		if r.Success {
			c.Successes++
		}
	}
}

// Success counts successes per round and phase from the run's episode
// partitions (episodes/round=R/phase=train|val/).
func Success(ctx context.Context, s *store.Store, run string) ([]RoundSuccess, error) {
	l := schemas.Layout{Run: run}
	root := l.Prefix() + "episodes/"
	objs, err := s.List(ctx, root)
	if err != nil {
		return nil, err
	}
	byRound := map[int32]*RoundSuccess{}
	seen := map[string]bool{}
	for _, o := range objs {
		round, phase, ok := partition(strings.TrimPrefix(o.Key, root))
		if !ok || (phase != schemas.PhaseTrain && phase != schemas.PhaseVal) {
			continue
		}
		dir := l.EpisodesDir(round, phase)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		rs := byRound[round]
		if rs == nil {
			rs = &RoundSuccess{Round: round}
			byRound[round] = rs
		}
		c, by := &rs.Train, &rs.TrainBySuite
		if phase == schemas.PhaseVal {
			c, by = &rs.Val, &rs.ValBySuite
		}
		if *by == nil {
			*by = map[string]Counts{}
		}
		err := store.ScanTable(ctx, s, dir, func(r successRow) string { return r.EpisodeID }, nil, func(rows []successRow) error {
			for _, r := range rows {
				c.add(r)
				sc := (*by)[r.Suite]
				sc.add(r)
				(*by)[r.Suite] = sc
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read episodes of %s: %w", dir, err)
		}
	}
	out := make([]RoundSuccess, 0, len(byRound))
	for _, rs := range byRound {
		out = append(out, *rs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Round < out[j].Round })
	return out, nil
}

// partition parses "round=R/phase=P/<file>".
func partition(rest string) (int32, string, bool) {
	parts := strings.Split(rest, "/")
	if len(parts) < 3 || !strings.HasPrefix(parts[0], "round=") || !strings.HasPrefix(parts[1], "phase=") {
		return 0, "", false
	}
	r, err := strconv.ParseInt(strings.TrimPrefix(parts[0], "round="), 10, 32)
	if err != nil {
		return 0, "", false
	}
	return int32(r), strings.TrimPrefix(parts[1], "phase="), true
}

// RoundLabel names a round in the success table and on its chart; final
// is the round of the run's final validation (N+1), 0 when there is none.
func RoundLabel(round, final int32) string {
	if round == final {
		return fmt.Sprintf("%d (final)", round)
	}
	return strconv.Itoa(int(round))
}

// WriteSuccess writes the success chart's data as a table, so the numbers
// can be read (and grepped) without opening the chart.
func WriteSuccess(w io.Writer, rs []RoundSuccess, final int32) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tcollection success / valid\t/ attempted\tvalidation success / valid\t/ attempted\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", RoundLabel(r.Round, final), r.Train, r.Train.OfAttempted(), r.Val, r.Val.OfAttempted())
	}
	tw.Flush()
	writeBySuite(w, rs, final)
}

// writeBySuite splits the success table by task suite when the run has
// more than one (the minimal harness's vision task is suite "vision"), so
// a task family that does not learn is not hidden in the mean.
func writeBySuite(w io.Writer, rs []RoundSuccess, final int32) {
	set := map[string]bool{}
	for _, r := range rs {
		for s := range r.TrainBySuite {
			set[s] = true
		}
		for s := range r.ValBySuite {
			set[s] = true
		}
	}
	if len(set) < 2 {
		return
	}
	suites := slices.Sorted(maps.Keys(set))
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "round\t")
	for _, s := range suites {
		fmt.Fprintf(tw, "%s collection\t%s validation\t", s, s)
	}
	fmt.Fprintln(tw)
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t", RoundLabel(r.Round, final))
		for _, s := range suites {
			fmt.Fprintf(tw, "%s\t%s\t", r.TrainBySuite[s], r.ValBySuite[s])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
