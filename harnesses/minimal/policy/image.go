package policy

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // image formats a data URL may carry
	_ "image/jpeg"
	_ "image/png"
	"math"
	"strings"
)

// Vision is the toy's image pathway, the part of policy.json a
// vision-language model keeps in its processor and vision tower:
//
//   - Patch: an image of w×h pixels becomes ceil(w/Patch)·ceil(h/Patch)
//     <|image_pad|> tokens (Patches), as Qwen2-VL's processor expands an
//     image into merged patches.
//   - Bands, Scale: the fixed "vision encoder" cuts the image into Bands
//     horizontal bands and measures each band's redness, Scale times the
//     mean over its pixels of (R − (G+B)/2)/255 in 8-bit RGB
//     (ImageFeatures). Scale sets how far one optimizer step moves the
//     image's logits, as a real encoder's output norm does.
//   - V (Bands × actions): the trainable projection. The features of the
//     last image of the prompt add Σ_k f_k·V[k][a] to action a's logit.
type Vision struct {
	Patch int         `json:"patch"`
	Bands int         `json:"bands"`
	Scale float64     `json:"scale"`
	V     [][]float64 `json:"V"`
}

func (v *Vision) check(actions int) error {
	if v.Patch < 1 || v.Bands < 1 || !(v.Scale > 0) || math.IsInf(v.Scale, 0) {
		return fmt.Errorf("policy: vision patch %d and bands %d must be ≥ 1 and scale %v > 0", v.Patch, v.Bands, v.Scale)
	}
	if len(v.V) != v.Bands {
		return fmt.Errorf("policy: vision V has %d rows, want one per band (%d)", len(v.V), v.Bands)
	}
	for i, row := range v.V {
		if len(row) != actions {
			return fmt.Errorf("policy: vision V row %d has %d entries, want %d", i, len(row), actions)
		}
		for _, x := range row {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return fmt.Errorf("policy: vision V row %d is not finite", i)
			}
		}
	}
	return nil
}

// Patches is the number of <|image_pad|> tokens of a w×h image.
func (p *Policy) Patches(w, h int) int {
	return ((w + p.Vision.Patch - 1) / p.Vision.Patch) * ((h + p.Vision.Patch - 1) / p.Vision.Patch)
}

// ImageFeatures is the redness of each horizontal band of img (band k holds
// rows [k·H/Bands, (k+1)·H/Bands)); trainer.py computes the same from the
// decoded pixels.
func (p *Policy) ImageFeatures(img image.Image) []float64 {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	out := make([]float64, p.Vision.Bands)
	for k := range out {
		lo, hi := k*h/p.Vision.Bands, (k+1)*h/p.Vision.Bands
		var sum float64
		for y := lo; y < hi; y++ {
			for x := 0; x < w; x++ {
				c := color.NRGBAModel.Convert(img.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA)
				sum += (float64(c.R) - (float64(c.G)+float64(c.B))/2) / 255
			}
		}
		if n := (hi - lo) * w; n > 0 {
			out[k] = p.Vision.Scale * sum / float64(n)
		}
	}
	return out
}

// DecodeImageURL decodes a data:image/…;base64 URL. The toy fetches
// nothing: other URLs are refused.
func DecodeImageURL(u string) (image.Image, error) {
	header, payload, ok := strings.Cut(u, ",")
	if !ok || !strings.HasPrefix(header, "data:image/") || !strings.HasSuffix(header, ";base64") {
		return nil, errors.New("the toy model reads only data:image/…;base64 URLs")
	}
	data, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return nil, fmt.Errorf("image data: %w", err)
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return img, nil
}

// ImageURL is img's data URL.
func ImageURL(png []byte) string {
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)
}
