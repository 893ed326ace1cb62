package schemas

import (
	"fmt"
	"regexp"
	"strconv"
)

// EpisodeKey is the identity of one try of an episode: its place in the run
// (round, phase, group, attempt) and which try it is. The rollout host keys
// the proxy's episodes, the spool's files and orphaned records by it; call
// and episode rows carry the same fields as columns.
type EpisodeKey struct {
	Run     string
	Round   int32
	Phase   string
	Group   int32
	Attempt int32
	// Retry counts the earlier tries of this episode (0 on the first), as
	// the rows' retry column does.
	Retry int32
}

// ID is the episode's id, the same for all its tries (EpisodeID).
func (k EpisodeKey) ID() string { return EpisodeID(k.Round, k.Phase, k.Group, k.Attempt) }

// EpisodeID names an episode by its place in the run, so a retry of the
// same episode writes the same keys.
func EpisodeID(round int32, phase string, group, attempt int32) string {
	return fmt.Sprintf("r%d-%s-g%03d-a%02d", round, phase, group, attempt)
}

var episodeID = regexp.MustCompile(`^r(\d+)-(.+)-g(\d+)-a(\d+)$`)

// ParseEpisodeID reads an episode id of run back into the key of its first
// try; ids EpisodeID does not write are an error.
func ParseEpisodeID(run, id string) (EpisodeKey, error) {
	m := episodeID.FindStringSubmatch(id)
	if m == nil {
		return EpisodeKey{}, fmt.Errorf("%q is not an episode id (r<round>-<phase>-g<group>-a<attempt>)", id)
	}
	var n [3]int32
	for i, s := range []string{m[1], m[3], m[4]} {
		v, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return EpisodeKey{}, fmt.Errorf("episode id %q: %w", id, err)
		}
		n[i] = int32(v)
	}
	k := EpisodeKey{Run: run, Round: n[0], Phase: m[2], Group: n[1], Attempt: n[2]}
	if k.ID() != id {
		return EpisodeKey{}, fmt.Errorf("%q is not an episode id as written (%s)", id, k.ID())
	}
	return k, nil
}

// TryID names one try of an episode uniquely in its run: its retry number
// and the run of the workflow that scheduled it, since a round restarted
// by a resume counts its tries from 0 again.
func TryID(retry int32, workflowRunID string) string {
	return fmt.Sprintf("try%d-%.8s", retry, workflowRunID)
}
