package report

import (
	"errors"
	"fmt"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

// CheckPool refuses a report that must not choose a training pool
// (`starter train --pool-report`): one of the final-test split, a shard, or
// one of another harness config — always; one of other weights than the
// starting weights described by local (stale) or without digests
// (hand-written) unless anyWeights. The error completes "--pool-report
// FILE …".
func CheckPool(rep schemas.Report, local []schemas.WeightsFile, h schemas.Harness, anyWeights bool) error {
	if rep.InitKey == FinalKey {
		return errors.New("is an evaluation on eval_init_ids, the final-test split: final-test data never chooses a training pool; pass a validation report (val_init_ids)")
	}
	if rep.IsShard() {
		return fmt.Errorf("is shard %d/%d of tag %s, not a whole validation: merge the shards (starter report merge --run %s --tag %s) and pass eval/%s/report.json", rep.Shard, rep.Shards, rep.Tag, rep.Run, rep.Tag, rep.Tag)
	}
	if rep.Digest != "" && rep.Digest != h.Digest {
		return fmt.Errorf("comes from harness %s with config digest %s, --config gives %s with %s: validate with this harness file and vars, then pass that report", rep.Harness, rep.Digest, h.Name, h.Digest)
	}
	if anyWeights {
		return nil
	}
	if rep.Digest == "" {
		return errors.New("records no harness config digest (hand-written?), so where it comes from cannot be checked: pass a report Roundhouse wrote, or --pool-report-any-weights to use it anyway")
	}
	if rep.WeightsDigest == "" {
		return errors.New("records no weights digest (written before reports had one), so its weights cannot be checked: validate --weights again with starter eval --init-key val_init_ids, or pass --pool-report-any-weights")
	}
	if len(local) == 0 {
		return errors.New("needs --weights, the weights it should have evaluated, to be checked against")
	}
	if d := schemas.WeightsDigest(local); d != rep.WeightsDigest {
		return fmt.Errorf("is stale: it evaluated weights %s (digest %.12s), not --weights (digest %.12s); validate --weights with starter eval --init-key val_init_ids, or pass --pool-report-any-weights to use it anyway", rep.WeightsID, rep.WeightsDigest, d)
	}
	return nil
}
