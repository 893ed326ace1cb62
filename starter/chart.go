package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/roundhouse-rl/roundhouse/internal/chart"
	"github.com/roundhouse-rl/roundhouse/internal/runs"
)

// printSuccess is the chart's data as a table, so the numbers can be read
// (and grepped) without opening the file.
func printSuccess(out io.Writer, rs []runs.RoundSuccess, final int32) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tcollection success / valid\t/ attempted\tvalidation success / valid\t/ attempted\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", chart.RoundLabel(r.Round, final), r.Train, r.Train.OfAttempted(), r.Val, r.Val.OfAttempted())
	}
	tw.Flush()
	printBySuite(out, rs, final)
}

// printBySuite splits the success table by task suite when the run has
// more than one (the minimal harness's vision task is suite "vision"), so
// a task family that does not learn is not hidden in the mean.
func printBySuite(out io.Writer, rs []runs.RoundSuccess, final int32) {
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
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "round\t")
	for _, s := range suites {
		fmt.Fprintf(tw, "%s collection\t%s validation\t", s, s)
	}
	fmt.Fprintln(tw)
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t", chart.RoundLabel(r.Round, final))
		for _, s := range suites {
			fmt.Fprintf(tw, "%s\t%s\t", r.TrainBySuite[s], r.ValBySuite[s])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// checkChartFile refuses a --chart file of a format no chart is drawn in.
func checkChartFile(file string) error {
	if err := chart.CheckFile(file); err != nil {
		return fmt.Errorf("--chart %w", err)
	}
	return nil
}

// writeChart writes a rendered chart to its file and prints where it is.
func writeChart(out io.Writer, file string, b []byte) error {
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return fmt.Errorf("--chart %s: %w", file, err)
	}
	path, err := filepath.Abs(file)
	if err != nil {
		path = file
	}
	fmt.Fprintf(out, "\nchart: %s\n", path)
	return nil
}
