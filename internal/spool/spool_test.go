package spool

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestSpoolSurvivesAndRecovers(t *testing.T) {
	dir := t.TempDir()
	s, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 0, Attempt: 0, Retry: 0}
	b := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 4, Attempt: 1, Retry: 2}
	s.Call(a, schemas.Call{EpisodeID: a.ID(), CallIndex: 0, CompletionTokenIDs: []int32{4, 5}})
	s.Call(a, schemas.Call{EpisodeID: a.ID(), CallIndex: 1})
	s.Call(b, schemas.Call{EpisodeID: b.ID(), CallIndex: 0})
	s.Blob(a, "abc.png", []byte("img"))
	s.Blob(b, "abc.png", []byte("img"))
	if got := s.Blobs(a); len(got) != 1 || got[0] != "abc.png" {
		t.Fatalf("blobs of a: %v", got)
	}
	if b, _ := os.ReadFile(s.BlobPath("run", "abc.png")); string(b) != "img" {
		t.Fatalf("blob content %q", b)
	}
	// Open tries are not orphans of this process.
	if o, _ := s.Orphans(); len(o) != 0 {
		t.Fatalf("orphans while open: %v", o)
	}
	if err := s.Done(a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path(a)); !os.IsNotExist(err) {
		t.Fatal("Done must remove the spool file")
	}
	// A file the spool did not write is not a try.
	stray := filepath.Join(dir, "run", "round=1", "phase=train", "notes", "try-0.jsonl")
	os.MkdirAll(filepath.Dir(stray), 0o755)
	os.WriteFile(stray, []byte("{}\n"), 0o644)
	// A try spooled by a worker before spool files left their episode's
	// folder is still found.
	c := schemas.EpisodeKey{Run: "run", Round: 1, Phase: "train", Group: 5, Attempt: 0, Retry: 1}
	old := filepath.Join(dir, "run", "round=1", "phase=train", c.ID(), "try-1.jsonl")
	os.MkdirAll(filepath.Dir(old), 0o755)
	oldCall := schemas.Call{EpisodeID: c.ID()}
	os.WriteFile(old, append(oldCall.AppendJSON(nil), '\n'), 0o644)
	// A new process on the same dir (the old one died) sees b and c as orphans.
	s2, _ := New(dir, nil)
	orphans, err := s2.Orphans()
	if err != nil || len(orphans) != 2 {
		t.Fatalf("orphans %v, %v", orphans, err)
	}
	slices.SortFunc(orphans, func(x, y Orphan) int { return int(x.Key.Group - y.Key.Group) })
	if orphans[1].Key != c || orphans[1].Path != old {
		t.Fatalf("orphan of the old layout %+v, want %+v at %s", orphans[1], c, old)
	}
	if err := Remove(orphans[1]); err != nil {
		t.Fatal(err)
	}
	o := orphans[0]
	if o.Key != b || o.Path != s.Path(b) {
		t.Fatalf("orphan attribution %+v, want %+v at %s", o, b, s.Path(b))
	}
	// A torn last line (crash mid-write) is skipped, earlier lines kept.
	f, _ := os.OpenFile(o.Path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"episode_id":"torn`)
	f.Close()
	calls, err := ReadCalls(o.Path)
	if err != nil || len(calls) != 1 || calls[0].EpisodeID != b.ID() {
		t.Fatalf("ReadCalls = %v, %v", calls, err)
	}
	if err := Remove(o); err != nil {
		t.Fatal(err)
	}
	if left, _ := s2.Orphans(); len(left) != 0 {
		t.Fatalf("orphans after Remove: %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "run", "blobs", "abc.png")); err != nil {
		t.Fatal("blobs stay for other episodes of the run")
	}
}
