package workflows_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/itest"
	"github.com/roundhouse-rl/roundhouse/internal/rig"
)

// BenchmarkRolloutHosts runs one collection round of instant episodes on
// 1, 2 and 3 rollout hosts of a rig (each its own network namespace and
// worker, reaching Temporal and S3 over its own link), and says where the
// time goes: waiting in Temporal (an episode activity scheduled → started:
// dispatch, and a free slot), on the worker (started → completed: the
// episode subprocess, its proxy, staging its records in S3), publishing
// the accepted tries (S3 copies) and compaction.
//
//	go test -run '^$' -bench RolloutHosts -benchtime 1x ./workflows/
func BenchmarkRolloutHosts(b *testing.B) {
	const groups, attempts, slots = 64, 6, 4
	for _, n := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			itest.Slow(b)
			bins := itest.Binaries(b)
			hosts := []rig.HostSpec{{Name: "t1", Roles: "train,control"}}
			for i := 1; i <= n; i++ {
				hosts = append(hosts, rig.HostSpec{Name: fmt.Sprintf("r%d", i), Roles: "rollout", Slots: slots})
			}
			var r scaleResult
			for i := range b.N {
				rg := rig.New(b, rig.Config{Hosts: hosts, Bins: bins})
				r = runScaleRoundOn(b, rg.Stack(), bins, fmt.Sprintf("hosts-%d-%d", n, i), groups, attempts, n*slots)
			}
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
				n, slots, r.Episodes, r.Collect().Round(time.Millisecond), episodes/r.Collect().Seconds(),
				float64(wait.Microseconds())/1000/episodes, float64(r.Busy().Microseconds())/1000/episodes,
				publish.Round(time.Millisecond), r.Parent.ByType["Compact"].Round(time.Millisecond))
		})
	}
}
