package store_test

import (
	"bytes"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// Calls files written before the seed columns read as calls without a
// seed; files with them keep the seed.
func TestCallsWithoutSeedColumnsRead(t *testing.T) {
	type oldCall struct { // schemas.Call before seed and seed_injected, in part
		EpisodeID string `parquet:"episode_id"`
		CallIndex int32  `parquet:"call_index"`
		Request   string `parquet:"request"`
	}
	b, err := store.EncodeParquet([]oldCall{{EpisodeID: "r0-val-g000-a00", CallIndex: 2, Request: "{}"}})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := parquet.Read[schemas.Call](bytes.NewReader(b), int64(len(b)))
	if err != nil || len(rows) != 1 || rows[0].CallIndex != 2 || rows[0].Seed != nil || rows[0].SeedInjected {
		t.Fatalf("old calls file: %+v, %v; want call 2 without a seed", rows, err)
	}
	seed := int64(809757429)
	b, err = store.EncodeParquet([]schemas.Call{{CallIndex: 1, Seed: &seed, SeedInjected: true}, {CallIndex: 2}})
	if err != nil {
		t.Fatal(err)
	}
	rows, err = parquet.Read[schemas.Call](bytes.NewReader(b), int64(len(b)))
	if err != nil || len(rows) != 2 || rows[0].Seed == nil || *rows[0].Seed != seed || !rows[0].SeedInjected || rows[1].Seed != nil {
		t.Fatalf("calls with seeds read back as %+v, %v", rows, err)
	}
}
