package workflows_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/rig"
)

// BenchmarkRolloutHosts runs one collection round of the instant stand-in
// on 1, 2 and 3 rollout hosts of a rig (each its own network namespace and
// worker, reaching Temporal and S3 over its own link), and says where the
// time goes: waiting in Temporal (an episode activity scheduled → started:
// dispatch, and a free slot), on the worker (started → completed: the
// episode subprocess, its proxy, staging its records in S3), publishing
// the accepted tries (S3 reads and copies) and compaction. Episodes take
// no time (delay=0s: the ceiling of Temporal, S3 and the workers on this
// machine) or 2 s each (delay=2s: episodes that are not free, as real
// ones never are, where hosts add slots).
//
//	go test -run '^$' -bench RolloutHosts -benchtime 1x ./workflows/
func BenchmarkRolloutHosts(b *testing.B) {
	const slots = 4
	for _, v := range []struct {
		delay            string
		groups, attempts int
	}{{"0", 64, 6}, {"2", 16, 6}} {
		for _, n := range []int{1, 2, 3} {
			b.Run(fmt.Sprintf("delay=%ss/hosts=%d", v.delay, n), func(b *testing.B) {
				itest.Slow(b)
				bins := itest.Binaries(b)
				hosts := []rig.HostSpec{{Name: "t1", Roles: "train,control"}}
				for i := 1; i <= n; i++ {
					hosts = append(hosts, rig.HostSpec{Name: fmt.Sprintf("r%d", i), Roles: "rollout", Slots: slots,
						Env: []string{"INSTANT_EPISODE_DELAY=" + v.delay}})
				}
				var r scaleResult
				for i := range b.N {
					rg := rig.New(b, rig.Config{Hosts: hosts, Bins: bins})
					r = runScaleRoundOn(b, rg.Stack(), bins, fmt.Sprintf("hosts-%s-%d-%d", v.delay, n, i), v.groups, v.attempts, n*slots)
				}
				report(b, r, n, slots)
			})
		}
	}
}

func report(b *testing.B, r scaleResult, hosts, slots int) {
	episodes := float64(r.Episodes)
	var wait, publish time.Duration
	for _, c := range r.Children {
		wait += c.ByType["RunEpisode"] - c.Busy
		publish += c.ByType["Publish"]
	}
	b.ReportMetric(episodes/r.Collect().Seconds(), "episodes/s")
	b.ReportMetric(r.Collect().Seconds(), "collect-s")
	b.ReportMetric(float64(wait.Microseconds())/1000/episodes, "queued-ms/ep")
	b.ReportMetric(float64(r.Busy().Microseconds())/1000/episodes, "worker-ms/ep")
	b.ReportMetric(publish.Seconds(), "publish-s")
	b.ReportMetric(r.Parent.ByType["Compact"].Seconds(), "compact-s")
	b.Logf("%d rollout host(s) × %d slots: %d episodes in %v (%.1f/s); per episode %.1f ms queued in Temporal, %.1f ms on the worker; publish %v, compact %v",
		hosts, slots, r.Episodes, r.Collect().Round(time.Millisecond), episodes/r.Collect().Seconds(),
		float64(wait.Microseconds())/1000/episodes, float64(r.Busy().Microseconds())/1000/episodes,
		publish.Round(time.Millisecond), r.Parent.ByType["Compact"].Round(time.Millisecond))
}
