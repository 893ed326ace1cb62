package env

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
)

// CameraSize is the side of the square camera image in pixels.
const CameraSize = 32

var (
	red    = color.NRGBA{230, 20, 20, 255}
	gray   = color.NRGBA{120, 120, 120, 255}
	wood   = color.NRGBA{150, 110, 70, 255}
	bg     = color.NRGBA{235, 235, 235, 255}
	yellow = color.NRGBA{230, 200, 40, 255}
)

// render draws the scene as the camera sees it: the cabinet on top, the
// table with the cube in the middle, the drawer at the bottom, each a band
// of the image; the marked container is red, the other gray.
func render(s State) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, CameraSize, CameraSize))
	fill := func(x0, y0, x1, y1 int, c color.NRGBA) {
		for y := y0; y < y1; y++ {
			for x := x0; x < x1; x++ {
				img.SetNRGBA(x, y, c)
			}
		}
	}
	fill(0, 0, CameraSize, CameraSize, bg)
	container := func(l loc) color.NRGBA {
		if s.Marked == l {
			return red
		}
		return gray
	}
	fill(2, 1, 30, 10, container(cabinet))
	fill(2, 12, 30, 20, wood)
	fill(2, 22, 30, 31, container(drawer))
	if s.Cube == table || s.Cube == gripper {
		fill(14, 13, 18, 17, yellow)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		panic(err) // encoding an in-memory image cannot fail
	}
	return buf.Bytes()
}
