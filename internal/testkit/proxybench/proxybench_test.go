package proxybench

import "testing"

// The benchmark is only meaningful if every path really answers like the
// stub and the recording path really records; this checks that (behaviour
// only, no timing).
func TestPathsAnswerLikeTheStub(t *testing.T) {
	for _, p := range Paths {
		t.Run(string(p), func(t *testing.T) {
			env, err := Start(p)
			if err != nil {
				t.Fatal(err)
			}
			defer env.Close()
			// 120 calls over 2 clients: episodes rotate at EpisodeLen.
			for _, r := range []Result{env.Saturate(2, 120, 0), env.Paced(3, 500, 30, 0)} {
				if r.Errors > 0 || r.Calls == 0 {
					t.Fatalf("%d calls, %d errors, first: %v", r.Calls, r.Errors, r.FirstErr)
				}
			}
			if p != Recording {
				return
			}
			s, err := env.StoredBytesPerCall(2)
			if err != nil || s.PerEpisodeFile <= 0 || s.CompactedFile <= 0 {
				t.Fatalf("stored %+v, %v", s, err)
			}
			if _, err := env.RetainedPerCall(10); err != nil {
				t.Fatal(err)
			}
		})
	}
}
