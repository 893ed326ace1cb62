package schemas

import "fmt"

// Layout names every object of a run under runs/<run>/ in the bucket.
// Partitions are hive-style (round=R/phase=P) so DuckDB, Athena and Spark
// read the tables as they are.
type Layout struct{ Run string }

func (l Layout) Prefix() string { return "runs/" + l.Run + "/" }

func (l Layout) Calls(round int32, phase, episode string) string {
	return fmt.Sprintf("%scalls/round=%d/phase=%s/%s.parquet", l.Prefix(), round, phase, episode)
}

// CallsDir is the partition holding all call files of a round's phase.
func (l Layout) CallsDir(round int32, phase string) string {
	return fmt.Sprintf("%scalls/round=%d/phase=%s/", l.Prefix(), round, phase)
}

func (l Layout) Episodes(round int32, phase, episode string) string {
	return fmt.Sprintf("%sepisodes/round=%d/phase=%s/%s.parquet", l.Prefix(), round, phase, episode)
}

// EpisodesDir is the partition holding all episode files of a round's phase.
func (l Layout) EpisodesDir(round int32, phase string) string {
	return fmt.Sprintf("%sepisodes/round=%d/phase=%s/", l.Prefix(), round, phase)
}

func (l Layout) Samples(round int32) string {
	return fmt.Sprintf("%ssamples/round=%d/samples.parquet", l.Prefix(), round)
}

func (l Layout) Batch(round int32) string {
	return fmt.Sprintf("%sbatches/round=%d/%s", l.Prefix(), round, BatchFile)
}

// Weights is the directory of a weights id; files of the weights live under it.
func (l Layout) Weights(id string) string { return l.Prefix() + "weights/" + id + "/" }

func (l Layout) Report(tag string) string { return l.EvalDir(tag) + "report.json" }

// ReportText is the full report's text form with every task's row, as
// `starter report show --tasks` prints it; written beside report.json,
// since past a few dozen tasks the terminal shows only the worst.
func (l Layout) ReportText(tag string) string { return l.EvalDir(tag) + "report.txt" }

// ReportTasks is the full report's per-task table as CSV with a header
// (DuckDB: select * from 'tasks.csv'), beside report.json.
func (l Layout) ReportTasks(tag string) string { return l.EvalDir(tag) + "tasks.csv" }

// EvalDir holds everything stored under an evaluation tag: report.json
// (the full report: unsharded, or merged from shards) and shards/.
func (l Layout) EvalDir(tag string) string { return l.Evals() + tag + "/" }

// Evals holds every evaluation tag of the run, and the comparisons.
func (l Layout) Evals() string { return l.Prefix() + "eval/" }

// ShardsDir holds the shard reports of a sharded evaluation.
func (l Layout) ShardsDir(tag string) string { return l.EvalDir(tag) + "shards/" }

// ShardReport is the report of shard i of n (cells with index % n == i):
// eval/<tag>/shards/<i>-of-<n>.json. `starter report merge` builds
// report.json from all n of them.
func (l Layout) ShardReport(tag string, i, n int) string {
	return fmt.Sprintf("%s%d-of-%d.json", l.ShardsDir(tag), i, n)
}

func (l Layout) Summary(round int32) string {
	return fmt.Sprintf("%srounds/round=%d/summary.json", l.Prefix(), round)
}

func (l Layout) State() string { return l.Prefix() + "state.json" }

// Artifacts is where an episode's output files go.
func (l Layout) Artifacts(round int32, phase, episode string) string {
	return fmt.Sprintf("%sartifacts/round=%d/phase=%s/%s/", l.Prefix(), round, phase, episode)
}

// TryArtifacts is where one try of an episode puts its output files: the
// accepted try's row names its folder (Episode.Artifacts), so a late try's
// files sit beside it and never replace them.
func (l Layout) TryArtifacts(round int32, phase, episode, try string) string {
	return l.Artifacts(round, phase, episode) + try + "/"
}

// Staged is where one try of an episode writes its row and calls
// (episode.parquet, calls.parquet). Every try writes its own; only the try
// the workflow accepted is published to the tables (docs/design.md §8).
func (l Layout) Staged(round int32, phase, episode, try string) string {
	return l.StagedEpisode(round, phase, episode) + try + "/"
}

// StagedEpisode holds every staged try of one episode. It ends in "/", so
// g100's prefix does not also take g1000's tries.
func (l Layout) StagedEpisode(round int32, phase, episode string) string {
	return fmt.Sprintf("%s%s/", l.StagedDir(round, phase), episode)
}

// StagedDir holds the staged tries of a round's phase.
func (l Layout) StagedDir(round int32, phase string) string {
	return fmt.Sprintf("%sstaged/round=%d/phase=%s/", l.Prefix(), round, phase)
}

// Harness is the resolved harness file the run was started with (JSON);
// activities read it from here so workflow history carries no copy per episode.
func (l Layout) Harness() string { return l.Prefix() + "harness.json" }

// Blob is a content-addressed blob (an image a planner sent), named
// <sha256>.<ext>; recorded requests reference it as blob://sha256/<name>.
func (l Layout) Blob(name string) string { return l.Prefix() + "blobs/" + name }

// Orphan holds the records of an episode try that was never completed: its
// worker died mid-episode or the try failed and was retried. Orphans live
// outside calls/ so they are never trained on.
func (l Layout) Orphan(round int32, phase, episode string, retry int32) string {
	return fmt.Sprintf("%sorphans/round=%d/phase=%s/%s-try%d.parquet", l.Prefix(), round, phase, episode, retry)
}

// OrphansDir holds the orphaned tries of a round's phase.
func (l Layout) OrphansDir(round int32, phase string) string {
	return fmt.Sprintf("%sorphans/round=%d/phase=%s/", l.Prefix(), round, phase)
}

// ArtifactsDir holds the output files of a round's phase's episodes.
func (l Layout) ArtifactsDir(round int32, phase string) string {
	return fmt.Sprintf("%sartifacts/round=%d/phase=%s/", l.Prefix(), round, phase)
}

// TrainerLog is the log of one try of a round's trainer, uploaded while it
// runs and when it ends, whether it succeeded or not.
func (l Layout) TrainerLog(round int32, try int32) string {
	return fmt.Sprintf("%slogs/train/round=%d/try-%d.log", l.Prefix(), round, try)
}

// Stop is the marker of a run asked to stop: episodes that have not
// started yet skip themselves while it exists. `starter train` removes it
// when it resumes the run.
func (l Layout) Stop() string { return l.Prefix() + "STOP" }

// EvalStop is the marker of one evaluation execution asked to stop (its
// Temporal run id names it): that evaluation's episodes that have not
// started skip themselves while it exists. Being per execution, a later
// evaluation of the same tag never sees it, and a training run sharing
// the prefix is not stopped by it.
func (l Layout) EvalStop(tag, runID string) string { return l.EvalDir(tag) + "STOP-" + runID }

// RunSpec is run.json: what the run was started with, written first, so a
// resumed run keeps its rounds, groups and attempts.
func (l Layout) RunSpec() string { return l.Prefix() + "run.json" }

// PoolReport is where `starter train --pool-report` stores the report that
// chooses round 1's pool.
func (l Layout) PoolReport() string { return l.Prefix() + "pool-report.json" }

// SweepPrefix holds what a scheduled validation sweep keeps outside any
// run: sweeps/<name>/ (its reports stay in the evaluation run's eval/).
func SweepPrefix(name string) string { return "sweeps/" + name + "/" }

// SweepLeaderboard is the sweep's leaderboard (schemas.Leaderboard).
func SweepLeaderboard(name string) string { return SweepPrefix(name) + "leaderboard.json" }

// SweepLeaderboardMarkdown is the same leaderboard as a markdown table.
func SweepLeaderboardMarkdown(name string) string { return SweepPrefix(name) + "leaderboard.md" }

// Comparison is where `starter compare` stores the paired comparison of
// two reports of a run.
func (l Layout) Comparison(a, b string) string {
	return l.Evals() + "compare-" + a + "-vs-" + b + ".json"
}

// RolloutProcessor is where a rollout host stores the processor its model
// server makes pixels with for a weights id (model_server.processor_probe).
func (l Layout) RolloutProcessor(weightsID string) string {
	return l.Prefix() + "processors/" + weightsID + ".json"
}
