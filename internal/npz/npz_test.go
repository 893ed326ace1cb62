package npz

import (
	"bytes"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeSample(t *testing.T, path string) {
	t.Helper()
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteInt32("ids", []int32{1, -2, math.MaxInt32}); err != nil {
		t.Fatal(err)
	}
	// Streamed in pieces, the way a large batch is written.
	a, err := w.Begin("off", Int64, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, piece := range [][]int64{{0}, {3, 1 << 40}, {math.MinInt64}} {
		if err := a.Int64(piece...); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFloat32("lp", []float32{-0.5, 0, float32(math.Inf(-1))}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFloat32("empty", nil); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteStrings("names", []string{"ab.png", "", "c"}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteStrings("nonames", nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.npz")
	writeSample(t, path)
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"ids":     []int32{1, -2, math.MaxInt32},
		"off":     []int64{0, 3, 1 << 40, math.MinInt64},
		"lp":      []float32{-0.5, 0, float32(math.Inf(-1))},
		"empty":   []float32{},
		"names":   []string{"ab.png", "", "c"},
		"nonames": []string{},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
	some, err := ReadFile(path, "names", "off", "absent")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(some, map[string]any{"names": want["names"], "off": want["off"]}) {
		t.Fatalf("named arrays only: got %#v", some)
	}
}

func TestHeaderAligned(t *testing.T) {
	for _, n := range []int{0, 7, 123456789} {
		h := header(Float32.descr(), n)
		if len(h)%64 != 0 || h[len(h)-1] != '\n' {
			t.Fatalf("n=%d: header of %d bytes is not 64-aligned or not newline-terminated", n, len(h))
		}
	}
}

func TestWriterErrors(t *testing.T) {
	w := NewWriter(&bytes.Buffer{})
	a, err := w.Begin("x", Int32, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Float32(1); err == nil {
		t.Error("float32 into an int32 array: want error")
	}
	if err := a.Int32(1, 2, 3); err == nil {
		t.Error("more values than declared: want error")
	}
	if err := a.Int32(1); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Begin("y", Int32, 1); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("beginning a new array before x is complete: got %v", err)
	}
	if err := w.Close(); err == nil {
		t.Error("close with an incomplete array: want error")
	}

	w = NewWriter(&bytes.Buffer{})
	if err := w.WriteInt32("x", nil); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteInt32("x", nil); err == nil {
		t.Error("duplicate name: want error")
	}
	if _, err := w.Begin("a/b", Int32, 0); err == nil {
		t.Error("name with a slash: want error")
	}
}

func pythonNumpy(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import numpy").Run(); err != nil {
		t.Skipf("%s with numpy is not available: %v", py, err)
	}
	return py
}

// TestNumpyLoads checks the archive against the real consumer: np.load.
func TestNumpyLoads(t *testing.T) {
	py := pythonNumpy(t)
	path := filepath.Join(t.TempDir(), "b.npz")
	writeSample(t, path)
	script := `
import json, sys, numpy as np
z = np.load(sys.argv[1])
out = {}
for k in z.files:
    a = z[k]
    vals = [x.decode() for x in a.tolist()] if a.dtype.kind == "S" else [None if np.isinf(x) else x.item() for x in a]
    out[k] = {"dtype": str(a.dtype), "shape": list(a.shape), "values": vals}
print(json.dumps(out))
`
	cmd := exec.Command(py, "-c", script, path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("np.load: %v\n%s", err, stderr.String())
	}
	type arr struct {
		DType  string `json:"dtype"`
		Shape  []int  `json:"shape"`
		Values []any  `json:"values"`
	}
	var got map[string]arr
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]arr{
		"ids":     {"int32", []int{3}, []any{1.0, -2.0, float64(math.MaxInt32)}},
		"off":     {"int64", []int{4}, []any{0.0, 3.0, float64(1 << 40), float64(math.MinInt64)}},
		"lp":      {"float32", []int{3}, []any{-0.5, 0.0, nil}},
		"empty":   {"float32", []int{0}, []any{}},
		"names":   {"|S6", []int{3}, []any{"ab.png", "", "c"}},
		"nonames": {"|S1", []int{0}, []any{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("numpy read %+v, want %+v", got, want)
	}
}

// TestReadsNumpySavez checks the reader against what numpy itself writes.
func TestReadsNumpySavez(t *testing.T) {
	py := pythonNumpy(t)
	path := filepath.Join(t.TempDir(), "np.npz")
	script := `import sys, numpy as np
np.savez(sys.argv[1], a=np.array([5, -6], dtype=np.int32), b=np.array([7], dtype=np.int64), c=np.array([0.25], dtype=np.float32), d=np.array([b"x.png", b"yz"]))`
	if out, err := exec.Command(py, "-c", script, path).CombinedOutput(); err != nil {
		t.Fatalf("np.savez: %v\n%s", err, out)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": []int32{5, -6}, "b": []int64{7}, "c": []float32{0.25}, "d": []string{"x.png", "yz"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
}
