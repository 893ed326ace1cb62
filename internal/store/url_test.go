package store_test

import (
	"strings"
	"testing"

	"github.com/roundhouse-rl/roundhouse/internal/store"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct{ in, bucket, prefix, err string }{
		{in: "s3://b/ckpts/", bucket: "b", prefix: "ckpts/"},
		{in: "s3://b/team/ckpts", bucket: "b", prefix: "team/ckpts/"},
		{in: "https://b/ckpts/", err: "not an s3:// URL"},
		{in: "s3:///ckpts/", err: "names no bucket"},
		{in: "s3://b", err: "names no prefix"},
		{in: "s3://b/", err: "names no prefix"},
	} {
		b, p, err := store.ParseURL(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || b != c.bucket || p != c.prefix {
			t.Errorf("%s: %q %q %v", c.in, b, p, err)
		}
	}
}
