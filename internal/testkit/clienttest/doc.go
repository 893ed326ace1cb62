// Package clienttest proves the recording proxy (internal/proxy) with
// software this project did not write: the official openai npm package drives
// the proxy, and DuckDB (@duckdb/node-api) reads the Parquet files written
// from its records. It holds only tests; the Node side lives in node/ and is
// installed by the tests themselves with npm ci (see ensureNode).
package clienttest
