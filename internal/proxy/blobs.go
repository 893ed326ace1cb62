package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
)

// BlobPrefix starts the reference that replaces an inline image in a
// recorded request: blob://sha256/<hex>.<ext>. The blob itself is stored
// once per content under the run's blobs/ folder (schemas.Layout.Blob).
const BlobPrefix = "blob://sha256/"

// dataImage finds candidates; the slash after "image" may be escaped (\/).
var dataImage = []byte(`"data:image`)

// extractImages returns the request body with every base64 data-URL image
// (any JSON string value "data:image/...;base64,...") replaced by a
// content-addressed reference, handing each image to put with its blob name
// (<hex>.<ext>). Everything else stays byte for byte. Bodies without inline
// images cost one bytes.Index.
func extractImages(body []byte, put func(name string, data []byte)) []byte {
	if put == nil || !bytes.Contains(body, dataImage) {
		return body
	}
	var out bytes.Buffer
	rest := body
	for {
		i := bytes.Index(rest, dataImage)
		if i < 0 {
			break
		}
		end := stringEnd(rest, i)
		if end < 0 {
			break
		}
		// Without escapes the string's bytes are the data URL; an image is
		// not copied to be decoded (base64 has none, but "/" may come as "\/").
		url := rest[i+1 : end-1]
		if bytes.IndexByte(url, '\\') >= 0 {
			var s string
			if json.Unmarshal(rest[i:end], &s) != nil {
				s = ""
			}
			url = []byte(s)
		}
		name, data := decodeDataURL(url)
		if name == "" {
			out.Write(rest[:end])
			rest = rest[end:]
			continue
		}
		put(name, data)
		out.Write(rest[:i])
		out.WriteString(`"` + BlobPrefix + name + `"`)
		rest = rest[end:]
	}
	out.Write(rest)
	return out.Bytes()
}

// stringEnd returns the index just past the JSON string starting at the
// quote at i, or -1.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// decodeDataURL decodes "data:image/png;base64,...." into its blob name
// (<sha256 hex>.<ext>) and bytes; "" when it is not a base64 image.
func decodeDataURL(url []byte) (string, []byte) {
	header, payload, ok := bytes.Cut(url, []byte(","))
	if !ok || !bytes.HasSuffix(header, []byte(";base64")) {
		return "", nil
	}
	mediaType := strings.TrimSuffix(strings.TrimPrefix(string(header), "data:"), ";base64")
	data := make([]byte, base64.StdEncoding.DecodedLen(len(payload)))
	n, err := base64.StdEncoding.Decode(data, payload)
	if err != nil {
		return "", nil
	}
	data = data[:n]
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]) + "." + imageExt(mediaType), data
}

// imageExt is a blob's extension. A fixed table, not the machine's MIME
// database: the same picture must get the same name on every host (one
// Debian host answered "pjpeg" for image/jpeg).
func imageExt(mediaType string) string {
	mediaType = strings.ToLower(strings.TrimSpace(mediaType))
	switch mediaType {
	case "image/jpeg", "image/jpg", "image/pjpeg":
		return "jpg"
	case "image/svg+xml":
		return "svg"
	case "image/x-icon", "image/vnd.microsoft.icon":
		return "ico"
	}
	if _, sub, ok := strings.Cut(mediaType, "/"); ok {
		if sub = strings.TrimPrefix(sub, "x-"); validExt.MatchString(sub) {
			return sub
		}
	}
	return "bin"
}

// validExt keeps names within what blob references match (host.blobRef).
var validExt = regexp.MustCompile(`^[a-z0-9]{1,16}$`)
