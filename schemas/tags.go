package schemas

import (
	"fmt"
	"regexp"
)

// A report's tag also says where its episodes are stored. A training
// run's validation (val-r<R>) records under phase val of round R, beside
// the round's collection; any other tag is an evaluation, whose records
// get a phase of their own, eval-<tag>, so evaluations never mix their
// episodes. TagPhase is the one place that rule is written down.

// valTag is the shape of ValTag's tags. An evaluation may not use it: its
// report would take the place of a validation's.
var valTag = regexp.MustCompile(`^val-r[0-9]+$`)

// ValTag is the report tag of the validation that opens a round.
func ValTag(round int32) string { return fmt.Sprintf("val-r%d", round) }

// IsValTag says whether tag has the shape of a training run's validation
// tags, val-r<R>.
func IsValTag(tag string) bool { return valTag.MatchString(tag) }

// TagPhase is the phase of the records of the report tagged tag: val for
// a validation, eval-<tag> for an evaluation.
func TagPhase(tag string) string {
	if IsValTag(tag) {
		return PhaseVal
	}
	return PhaseEval + "-" + tag
}
