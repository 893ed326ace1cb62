package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/harness"
	"github.com/roundhouse-rl/roundhouse/internal/proc"
	"github.com/roundhouse-rl/roundhouse/internal/store"
	"github.com/roundhouse-rl/roundhouse/schemas"
)

// probeTimeout bounds a processor probe: importing transformers and
// loading a processor's configuration takes seconds, not minutes.
const probeTimeout = 2 * time.Minute

// probes remembers, per weights key, that this host reported the model
// server's processor: once per weights, not per episode.
type probes struct {
	mu   sync.Mutex
	done map[string]*sync.Once
}

func (p *probes) once(key string) *sync.Once {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		p.done = map[string]*sync.Once{}
	}
	o := p.done[key]
	if o == nil {
		o = &sync.Once{}
		p.done[key] = o
	}
	return o
}

// ProbeProcessor runs the harness's model_server.processor_probe once per
// weights this host serves, with vars (Acquire's, which name the served
// weights), and stores the processor it prints at
// Layout.RolloutProcessor: the trainer compares its own with it before
// training (docs/design.md §4, "Images reach the trainer"). A probe that
// fails is logged and not retried for those weights; the episode goes
// on, and the trainer then has no rollout side to compare with.
func (h *Host) ProbeProcessor(ctx context.Context, hr schemas.Harness, run, weightsID string, vars map[string]string) {
	if !hr.Model.Vision || len(hr.Model.ProcessorProbe) == 0 {
		return
	}
	h.probed.once(hr.Digest + "/" + run + "/" + weightsID).Do(func() {
		info, err := h.probe(ctx, hr, run, weightsID, vars)
		if err != nil {
			h.log.Warn("processor probe failed: the trainer will not compare processors for these weights",
				"harness", hr.Name, "run", run, "weights", weightsID, "error", err)
			return
		}
		h.log.Info("model server processor", "run", run, "weights", weightsID, "image_processor", info.ImageProcessor,
			"transformers", info.Transformers, "torchvision", info.Torchvision)
	})
}

func (h *Host) probe(ctx context.Context, hr schemas.Harness, run, weightsID string, vars map[string]string) (schemas.ProcessorInfo, error) {
	var info schemas.ProcessorInfo
	v := map[string]string{"weights": filepath.Join(vars["weights_dir"], hr.Model.WeightsFile)}
	for k, val := range vars {
		if _, set := v[k]; !set {
			v[k] = val
		}
	}
	args, err := harness.FillArgs(hr.Model.ProcessorProbe, v)
	if err != nil {
		return info, fmt.Errorf("model_server.processor_probe: %w", err)
	}
	dir := filepath.Join(h.WorkDir, "probes")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return info, err
	}
	log := filepath.Join(dir, fmt.Sprintf("%s-%s.log", run, weightsID))
	res, err := proc.Run(ctx, proc.Spec{Name: "processor-probe", Args: args, Dir: hr.Dir, Log: log, Timeout: probeTimeout})
	if err != nil {
		return info, err
	}
	out, _ := os.ReadFile(log)
	if res.TimedOut || res.ExitCode != 0 {
		return info, fmt.Errorf("exit %d (timed out %v): %s", res.ExitCode, res.TimedOut, proc.LogTail(log, 500))
	}
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	last := lines[len(lines)-1]
	if err := json.Unmarshal(last, &info); err != nil || info.ImageProcessor == "" {
		return info, fmt.Errorf("its last line %q is not a processor's JSON with image_processor (%v)", last, err)
	}
	key := schemas.Layout{Run: run}.RolloutProcessor(weightsID)
	if err := store.PutJSON(ctx, h.Store, key, info); err != nil {
		return info, fmt.Errorf("store %s: %w", key, err)
	}
	return info, nil
}
