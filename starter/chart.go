package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/roundhouse-rl/roundhouse/internal/chart"
)

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
