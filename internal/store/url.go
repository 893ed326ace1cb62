package store

import (
	"fmt"
	"strings"
)

// ParseURL splits s3://bucket/prefix/ into the bucket and the prefix,
// which always ends in "/" and is never empty.
func ParseURL(u string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(u, "s3://")
	if !ok {
		return "", "", fmt.Errorf("%q is not an s3:// URL: write it as s3://bucket/prefix/", u)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" || strings.ContainsAny(bucket, " \t") {
		return "", "", fmt.Errorf("%q names no bucket: write it as s3://bucket/prefix/", u)
	}
	prefix = strings.TrimLeft(prefix, "/")
	if prefix == "" {
		return "", "", fmt.Errorf("%q names no prefix: give the folder holding the weights ids, s3://%s/prefix/", u, bucket)
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return bucket, prefix, nil
}
