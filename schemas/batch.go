package schemas

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
)

// Training batch: batch.npz, a NumPy archive (np.load) that a PyTorch trainer
// reads without extra services. Token arrays of all selected calls are
// concatenated; offsets (length n+1) delimit call i as [off[i], off[i+1]).
const (
	BatchPromptIDs         = "prompt_ids"         // int32 [sum prompt tokens]
	BatchPromptOffsets     = "prompt_offsets"     // int64 [n+1]
	BatchCompletionIDs     = "completion_ids"     // int32 [sum completion tokens]
	BatchCompletionOffsets = "completion_offsets" // int64 [n+1]
	BatchRolloutLogprobs   = "rollout_logprobs"   // float32 [sum completion tokens], as recorded by the proxy
	BatchAdvantages        = "advantages"         // float32 [n], leave-one-out advantage of the call's episode
	BatchWeights           = "weights"            // float32 [n], 1/(selected calls in the episode)
	// BatchTemperatures is what the trainer divides sample i's logits by
	// before its log-softmax: the call's temperature when the model server
	// returned processed logprobs (they include it), 1 otherwise, and 1 for
	// every sample when the array is missing (batches written before it).
	// docs/design.md §4, "Sampling settings".
	BatchTemperatures = "temperatures" // float32 [n]
	// BatchStaleness is how many weights versions older than the
	// trainer's starting weights the weights that sampled sample i are (0:
	// those very weights). Overlapped rounds (docs/design.md §4, "Stale
	// samples") produce stale samples; the drift guard judges only the
	// samples at 0, and the rest is reported as policy lag. Missing: all 0.
	BatchStaleness = "staleness" // int32 [n]
	// Images: the distinct blobs (<sha256>.<ext>, Layout.Blob) the batch's
	// requests sent, each once, in order of first use; sample i's own images,
	// in prompt order and with repeats, are image_index[image_offsets[i]:
	// image_offsets[i+1]], indexes into images. The trainer gets the blobs as
	// files <dir>/<name> (--images dir), fetched and checked by the trainer
	// activity (docs/design.md §4). Batches without images have the three
	// arrays empty (offsets all 0); readers treat missing arrays the same.
	BatchImages        = "images"        // |S<w> [m] blob names
	BatchImageIndex    = "image_index"   // int32 [sum images per sample]
	BatchImageOffsets  = "image_offsets" // int64 [n+1]
	BatchFile          = "batch.npz"
	TrainerMetricsFile = "metrics.json"
	// TrainerDriftGuard starts the line a trainer prints when its drift
	// guard stops the update (docs/design.md §4): the round stops with that
	// line as its cause instead of being retried.
	TrainerDriftGuard = "trainer: drift guard: "
)

// TrainerMetrics is what a trainer writes to metrics.json next to its output weights.
type TrainerMetrics struct {
	Loss             float64 `json:"loss"`
	Steps            int     `json:"steps"`
	Samples          int     `json:"samples"`
	Tokens           int     `json:"tokens"`
	ClipFraction     float64 `json:"clip_fraction"`
	DualClipFraction float64 `json:"dual_clip_fraction"`
	// LogprobMismatch is mean |log pi_old - log pi_rollout| over completion
	// tokens, computed before the first update (the drift guard's figure);
	// LogprobMismatchMax its largest token, DriftShare the share of samples
	// whose own mean exceeds the harness's drift_call_limit (drift_limit
	// where that is unset), DriftCallMax the largest sample mean, and
	// DriftTokenShare the share of tokens past drift_token_limit.
	LogprobMismatch    float64 `json:"logprob_mismatch"`
	LogprobMismatchMax float64 `json:"logprob_mismatch_max"`
	DriftShare         float64 `json:"drift_share"`
	DriftCallMax       float64 `json:"drift_call_max,omitempty"`
	DriftTokenShare    float64 `json:"drift_token_share,omitempty"`
	MeanRatio          float64 `json:"mean_ratio"`
	// Processor is what made the trainer's pixels, for a vision-language
	// model; ProcessorMismatch names the versions that differ from the
	// model server's (--rollout-processor), flagged before training.
	Processor *ProcessorInfo `json:"processor,omitempty"`
	// StaleSamples are the batch's samples with staleness above 0
	// (BatchStaleness); PolicyLagMean and PolicyLagMax are |log π_old −
	// log π_rollout| over their tokens: how far the policy moved since
	// they were sampled, not drift. All zero in a synchronous round.
	StaleSamples  int     `json:"stale_samples,omitempty"`
	PolicyLagMean float64 `json:"policy_lag_mean,omitempty"`
	PolicyLagMax  float64 `json:"policy_lag_max,omitempty"`
	// RolloutProcessor is the model server's side, as its rollout host's
	// probe reported it (model_server.processor_probe); set by the trainer
	// activity, nil without a probe.
	RolloutProcessor  *ProcessorInfo `json:"rollout_processor,omitempty"`
	ProcessorMismatch string         `json:"processor_mismatch,omitempty"`
	// Temperatures is the range of the batch's temperatures (the array
	// BatchTemperatures) the trainer divided the logits by, so a round
	// shows whether its π_old was tempered; nil when the batch had no such
	// array (every sample at 1).
	Temperatures *TemperatureRange `json:"temperatures,omitempty"`
}

// TemperatureRange is the smallest and largest temperature of a batch.
type TemperatureRange struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// ProcessorInfo names what turns an image into pixels and placeholder
// tokens on one side, model server or trainer: the same image processor
// class (fast or slow) and versions on both make the same pixels.
type ProcessorInfo struct {
	Processor      string `json:"processor,omitempty"`
	ImageProcessor string `json:"image_processor"`
	Transformers   string `json:"transformers,omitempty"`
	Torchvision    string `json:"torchvision,omitempty"`
}

// WeightsManifestFile is written last into weights/<id>/: the weights are
// complete, and usable by the next round, exactly when it exists and its
// files match it.
const WeightsManifestFile = "manifest.json"

// WeightsManifest lists the files of a weights id.
type WeightsManifest struct {
	WeightsID string         `json:"weights_id"`
	Files     []WeightsFile  `json:"files"`
	Metrics   TrainerMetrics `json:"metrics"`
	CreatedAt int64          `json:"created_at_ms"`
	// Dir is the folder under weights/<id>/ that holds the files: a
	// trainer try uploads into its own (try<k>-<run>/), so a late try's
	// files never land on the published ones. Empty: directly under
	// weights/<id>/ (uploads and imports, and manifests from before).
	Dir string `json:"dir,omitempty"`
	// Batch is the batch.npz these weights were trained on (its samples
	// table names each sample's weights), Staleness its samples by
	// staleness and SampledBy by the weights that sampled them; empty for
	// uploads and imports, and in manifests from before.
	Batch     string         `json:"batch,omitempty"`
	Staleness Staleness      `json:"staleness,omitempty"`
	SampledBy map[string]int `json:"sampled_by,omitempty"`
}

// Key is where file name of these weights lies, prefix being weights/<id>/.
func (m WeightsManifest) Key(prefix, name string) string { return prefix + m.Dir + name }

// WeightsFile is one file of a weights id; Name is its slash-separated
// path inside the weights directory (e.g. tokenizer/tokenizer.json).
type WeightsFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// WeightsDigest hashes a manifest's files (name, size, SHA-256, in name
// order): two weights ids with the same files have the same digest.
// Reports carry it so they compare weights by content, not by id.
func WeightsDigest(files []WeightsFile) string {
	fs := slices.Clone(files)
	sort.Slice(fs, func(i, j int) bool { return fs[i].Name < fs[j].Name })
	h := sha256.New()
	for _, f := range fs {
		fmt.Fprintf(h, "%s\x00%d\x00%s\n", f.Name, f.Size, f.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// IndexImages lays out per-sample image lists as the batch stores them:
// the distinct names in order of first use, each sample's images as
// indexes into them, and offsets (length n+1) delimiting the samples.
func IndexImages(perSample [][]string) (names []string, index []int32, offsets []int64) {
	seen := map[string]int32{}
	offsets = make([]int64, 1, len(perSample)+1)
	for _, images := range perSample {
		for _, name := range images {
			j, ok := seen[name]
			if !ok {
				j = int32(len(names))
				seen[name] = j
				names = append(names, name)
			}
			index = append(index, j)
		}
		offsets = append(offsets, int64(len(index)))
	}
	return names, index, offsets
}
