package chart

import (
	"encoding/xml"
	"fmt"
	"image"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/wcharczuk/go-chart/v2/drawing"
)

func TestCheckFile(t *testing.T) {
	for _, f := range []string{"a.svg", "b.PNG", "dir/c.png"} {
		if err := CheckFile(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, f := range []string{"a.pdf", "chart", "a.svg.gz"} {
		if err := CheckFile(f); err == nil || !strings.HasPrefix(err.Error(), f+": ") || !strings.Contains(err.Error(), ".svg or .png") {
			t.Errorf("%s: error %v, want one starting with the file and naming the formats", f, err)
		}
	}
}

// svgColor is a colour as go-chart writes it into SVG styles.
func svgColor(c drawing.Color) string { return c.String() }

// svgDoc is what a chart test reads from an SVG file: its texts and the
// number of dots (circles) of each fill colour.
type svgDoc struct {
	texts map[string]bool
	dots  map[string]int
	// bars counts vertical one-segment lines (error bars) by stroke colour.
	bars map[string]int
	// fills counts closed filled paths (a bar chart's bars) by fill colour.
	fills map[string]int
}

// readSVG parses the file as XML: a malformed SVG fails the test.
func readSVG(t *testing.T, file string) svgDoc {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc := svgDoc{texts: map[string]bool{}, dots: map[string]int{}, bars: map[string]int{}, fills: map[string]int{}}
	d := xml.NewDecoder(f)
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", file, err)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = el.Name.Local
		}
		switch el.Name.Local {
		case "text":
			var s string
			if err := d.DecodeElement(&s, &el); err != nil {
				t.Fatal(err)
			}
			doc.texts[s] = true
		case "path":
			var d, stroke, fill string
			for _, a := range el.Attr {
				switch a.Name.Local {
				case "d":
					d = a.Value
				case "style":
					for _, p := range strings.Split(a.Value, ";") {
						if v, ok := strings.CutPrefix(p, "stroke:"); ok {
							stroke = v
						}
						if v, ok := strings.CutPrefix(p, "fill:"); ok {
							fill = v
						}
					}
				}
			}
			if strings.HasSuffix(strings.TrimSpace(d), "Z") {
				doc.fills[fill]++
			}
			var x1, y1, x2, y2 int
			if n, _ := fmt.Sscanf(strings.Join(strings.Fields(d), " "), "M %d %d L %d %d", &x1, &y1, &x2, &y2); n == 4 && x1 == x2 && y1 != y2 && strings.Count(d, "L") == 1 {
				doc.bars[stroke]++
			}
		case "circle":
			for _, a := range el.Attr {
				if a.Name.Local == "style" {
					for _, p := range strings.Split(a.Value, ";") {
						if v, ok := strings.CutPrefix(p, "fill:"); ok {
							doc.dots[v]++
						}
					}
				}
			}
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q, want svg", file, root)
	}
	return doc
}

// pixels counts the pixels of img in each of colors.
func pixels(img image.Image, colors ...drawing.Color) map[drawing.Color]int {
	found := map[drawing.Color]int{}
	for y := 0; y < img.Bounds().Dy(); y++ {
		for x := 0; x < img.Bounds().Dx(); x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			for _, c := range colors {
				if uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(b>>8) == c.B {
					found[c]++
				}
			}
		}
	}
	return found
}
