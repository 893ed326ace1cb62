// Package npz writes and reads NumPy .npz archives of named 1-D arrays
// (int32, int64, float32, and fixed-width byte strings), the format np.load
// reads without extra packages (byte strings load without allow_pickle).
//
// An archive is a zip file of uncompressed "<name>.npy" members, each a
// version 1.0 .npy file: magic "\x93NUMPY", version 1 0, a little-endian
// uint16 header length, a Python dict literal header padded with spaces to a
// 64-byte boundary and ended by '\n', then the raw little-endian data.
//
// Writing streams: an array's length is declared up front (it is part of the
// header), its values may then be appended in any number of pieces, so a
// batch of many calls never has to sit in memory as one slice.
package npz

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// DType is the element type of an array.
type DType int

// Supported element types.
const (
	Int32 DType = iota + 1
	Int64
	Float32
)

// descr is the NumPy type string of a DType.
func (d DType) descr() string {
	switch d {
	case Int32:
		return "<i4"
	case Int64:
		return "<i8"
	case Float32:
		return "<f4"
	}
	return ""
}

// size is the byte width of one element.
func (d DType) size() int {
	if d == Int64 {
		return 8
	}
	return 4
}

func (d DType) String() string {
	switch d {
	case Int32:
		return "int32"
	case Int64:
		return "int64"
	case Float32:
		return "float32"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

var magic = []byte("\x93NUMPY")

// header builds the .npy v1.0 preamble for a 1-D array of n elements.
func header(descr string, n int) []byte {
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }", descr, n)
	// NumPy aligns the data to 64 bytes; magic(6)+version(2)+length(2) = 10.
	total := 10 + len(dict) + 1
	pad := (64 - total%64) % 64
	h := make([]byte, 0, total+pad)
	h = append(h, magic...)
	h = append(h, 1, 0)
	h = binary.LittleEndian.AppendUint16(h, uint16(len(dict)+pad+1))
	h = append(h, dict...)
	h = append(h, bytes.Repeat([]byte{' '}, pad)...)
	return append(h, '\n')
}

// Writer writes an .npz archive one array at a time.
type Writer struct {
	zw    *zip.Writer
	cur   *Array
	names map[string]bool
}

// NewWriter starts an archive on w. Close must be called to finish it.
func NewWriter(w io.Writer) *Writer {
	return &Writer{zw: zip.NewWriter(w), names: map[string]bool{}}
}

// Array is an array being written: its values are appended with the method
// of its DType until the declared length is reached.
type Array struct {
	name   string
	dtype  DType
	n, got int
	w      io.Writer
	buf    []byte
}

// Begin starts array name of n elements of type d. The previous array must be
// complete.
func (w *Writer) Begin(name string, d DType, n int) (*Array, error) {
	if err := w.finish(); err != nil {
		return nil, err
	}
	if d.descr() == "" {
		return nil, fmt.Errorf("npz: array %q: unsupported dtype %v", name, d)
	}
	a, err := w.begin(name, d.descr(), n)
	if err != nil {
		return nil, err
	}
	a.dtype = d
	return a, nil
}

func (w *Writer) begin(name, descr string, n int) (*Array, error) {
	if name == "" || strings.ContainsAny(name, "/\\") {
		return nil, fmt.Errorf("npz: invalid array name %q", name)
	}
	if n < 0 {
		return nil, fmt.Errorf("npz: array %q: negative length %d", name, n)
	}
	if w.names[name] {
		return nil, fmt.Errorf("npz: duplicate array %q", name)
	}
	w.names[name] = true
	// Stored, not deflated: np.savez does the same and token ids compress
	// poorly enough that the CPU is better spent elsewhere.
	zf, err := w.zw.CreateHeader(&zip.FileHeader{Name: name + ".npy", Method: zip.Store})
	if err != nil {
		return nil, fmt.Errorf("npz: array %q: %w", name, err)
	}
	if _, err := zf.Write(header(descr, n)); err != nil {
		return nil, fmt.Errorf("npz: array %q header: %w", name, err)
	}
	w.cur = &Array{name: name, n: n, w: zf}
	return w.cur, nil
}

func (w *Writer) finish() error {
	if w.cur != nil && w.cur.got != w.cur.n {
		return fmt.Errorf("npz: array %q has %d of %d declared values", w.cur.name, w.cur.got, w.cur.n)
	}
	w.cur = nil
	return nil
}

// Close checks the last array is complete and writes the zip directory.
func (w *Writer) Close() error {
	if err := w.finish(); err != nil {
		return err
	}
	if err := w.zw.Close(); err != nil {
		return fmt.Errorf("npz: close: %w", err)
	}
	return nil
}

func (a *Array) check(d DType, k int) error {
	if a.dtype != d {
		return fmt.Errorf("npz: array %q is %v, not %v", a.name, a.dtype, d)
	}
	if a.got+k > a.n {
		return fmt.Errorf("npz: array %q: %d values exceed the declared %d", a.name, a.got+k, a.n)
	}
	return nil
}

func (a *Array) flush(k int) error {
	a.got += k
	if _, err := a.w.Write(a.buf); err != nil {
		return fmt.Errorf("npz: array %q: %w", a.name, err)
	}
	a.buf = a.buf[:0]
	return nil
}

// littleEndian hosts write 4-byte values as they lie in memory: no copy,
// which keeps batch writing close to the disk's sequential speed.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

func (a *Array) raw(p unsafe.Pointer, n, k int) error {
	if k == 0 {
		return nil
	}
	a.buf = unsafe.Slice((*byte)(p), n)
	err := a.flush(k)
	a.buf = nil
	return err
}

// Int32 appends values to an int32 array.
func (a *Array) Int32(v ...int32) error {
	if err := a.check(Int32, len(v)); err != nil {
		return err
	}
	if littleEndian && len(v) > 0 {
		return a.raw(unsafe.Pointer(&v[0]), 4*len(v), len(v))
	}
	for _, x := range v {
		a.buf = binary.LittleEndian.AppendUint32(a.buf, uint32(x))
	}
	return a.flush(len(v))
}

// Int64 appends values to an int64 array.
func (a *Array) Int64(v ...int64) error {
	if err := a.check(Int64, len(v)); err != nil {
		return err
	}
	for _, x := range v {
		a.buf = binary.LittleEndian.AppendUint64(a.buf, uint64(x))
	}
	return a.flush(len(v))
}

// Float32 appends values to a float32 array.
func (a *Array) Float32(v ...float32) error {
	if err := a.check(Float32, len(v)); err != nil {
		return err
	}
	if littleEndian && len(v) > 0 {
		return a.raw(unsafe.Pointer(&v[0]), 4*len(v), len(v))
	}
	for _, x := range v {
		a.buf = binary.LittleEndian.AppendUint32(a.buf, math.Float32bits(x))
	}
	return a.flush(len(v))
}

// WriteStrings writes a whole array of byte strings as NumPy's fixed-width
// "|S<w>" dtype, w the longest string (at least 1); NumPy strips the NUL
// padding on access. Strings must not end in NUL bytes themselves.
func (w *Writer) WriteStrings(name string, v []string) error {
	width := 1
	for _, s := range v {
		if strings.HasSuffix(s, "\x00") {
			return fmt.Errorf("npz: array %q: string %q ends in NUL", name, s)
		}
		width = max(width, len(s))
	}
	if err := w.finish(); err != nil {
		return err
	}
	a, err := w.begin(name, fmt.Sprintf("|S%d", width), len(v))
	if err != nil {
		return err
	}
	buf := make([]byte, 0, width*len(v))
	for _, s := range v {
		buf = append(buf, s...)
		buf = append(buf, make([]byte, width-len(s))...)
	}
	a.buf = buf
	return a.flush(len(v))
}

// WriteInt32 writes a whole int32 array.
func (w *Writer) WriteInt32(name string, v []int32) error {
	a, err := w.Begin(name, Int32, len(v))
	if err != nil {
		return err
	}
	return a.Int32(v...)
}

// WriteInt64 writes a whole int64 array.
func (w *Writer) WriteInt64(name string, v []int64) error {
	a, err := w.Begin(name, Int64, len(v))
	if err != nil {
		return err
	}
	return a.Int64(v...)
}

// WriteFloat32 writes a whole float32 array.
func (w *Writer) WriteFloat32(name string, v []float32) error {
	a, err := w.Begin(name, Float32, len(v))
	if err != nil {
		return err
	}
	return a.Float32(v...)
}

// ReadFile reads the arrays of an .npz file: those named, or every one
// when none is named (a batch's image lists are read without its token
// arrays). Values are []int32, []int64, []float32 or []string ("|S<w>",
// NUL padding removed) by dtype. Only what this package writes (and
// np.savez writes for such arrays) is understood: 1-D, little-endian, C
// order. A named array the file lacks is absent from the map.
func ReadFile(path string, names ...string) (map[string]any, error) {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return nil, fmt.Errorf("npz: open %s: %w", path, err)
	}
	defer zr.Close()
	out := map[string]any{}
	for _, f := range zr.File {
		name, ok := strings.CutSuffix(f.Name, ".npy")
		if !ok || (len(names) > 0 && !slices.Contains(names, name)) {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("npz: %s: %w", f.Name, err)
		}
		v, err := readNpy(rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("npz: %s: %w", f.Name, err)
		}
		out[name] = v
	}
	return out, nil
}

var (
	descrRe = regexp.MustCompile(`'descr':\s*'([^']*)'`)
	orderRe = regexp.MustCompile(`'fortran_order':\s*(True|False)`)
	shapeRe = regexp.MustCompile(`'shape':\s*\((\d+),?\)`)
)

func readNpy(r io.Reader) (any, error) {
	pre := make([]byte, 10)
	if _, err := io.ReadFull(r, pre); err != nil {
		return nil, fmt.Errorf("read preamble: %w", err)
	}
	if !bytes.Equal(pre[:6], magic) {
		return nil, errors.New("not an .npy file")
	}
	if pre[6] != 1 {
		return nil, fmt.Errorf("unsupported .npy version %d.%d", pre[6], pre[7])
	}
	h := make([]byte, binary.LittleEndian.Uint16(pre[8:]))
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	hs := string(h)
	dm, om, sm := descrRe.FindStringSubmatch(hs), orderRe.FindStringSubmatch(hs), shapeRe.FindStringSubmatch(hs)
	if dm == nil || om == nil || sm == nil {
		return nil, fmt.Errorf("unsupported header %q (only 1-D arrays)", strings.TrimSpace(hs))
	}
	if om[1] == "True" {
		return nil, errors.New("fortran order is not supported")
	}
	n, err := strconv.Atoi(sm[1])
	if err != nil {
		return nil, fmt.Errorf("shape: %w", err)
	}
	if w, ok := strings.CutPrefix(dm[1], "|S"); ok {
		width, err := strconv.Atoi(w)
		if err != nil || width < 1 {
			return nil, fmt.Errorf("unsupported dtype %q", dm[1])
		}
		data := make([]byte, n*width)
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, fmt.Errorf("read %d strings: %w", n, err)
		}
		v := make([]string, n)
		for i := range v {
			v[i] = string(bytes.TrimRight(data[i*width:(i+1)*width], "\x00"))
		}
		return v, nil
	}
	var d DType
	for _, c := range []DType{Int32, Int64, Float32} {
		if c.descr() == dm[1] {
			d = c
		}
	}
	if d == 0 {
		return nil, fmt.Errorf("unsupported dtype %q", dm[1])
	}
	data := make([]byte, n*d.size())
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, fmt.Errorf("read %d values: %w", n, err)
	}
	switch d {
	case Int32:
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(binary.LittleEndian.Uint32(data[4*i:]))
		}
		return v, nil
	case Int64:
		v := make([]int64, n)
		for i := range v {
			v[i] = int64(binary.LittleEndian.Uint64(data[8*i:]))
		}
		return v, nil
	default:
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		return v, nil
	}
}

// File is a Writer onto a file it owns.
type File struct {
	*Writer
	f    *os.File
	path string
}

// Create starts an archive in a new file at path.
func Create(path string) (*File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("npz: %w", err)
	}
	return &File{Writer: NewWriter(f), f: f, path: path}, nil
}

// Close finishes the archive and closes the file (also when finishing fails).
func (f *File) Close() error {
	err := f.Writer.Close()
	if cerr := f.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("npz: close %s: %w", f.path, cerr)
	}
	return err
}
