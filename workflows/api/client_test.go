package api

import (
	"fmt"
	"strings"
	"testing"

	"go.temporal.io/api/serviceerror"
)

func TestUnmappedAttribute(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{serviceerror.NewInvalidArgument("Namespace fresh has no mapping defined for search attribute RoundhouseRound"), true},
		{fmt.Errorf("start workflow: %w", serviceerror.NewInvalidArgument("invalid query: unknown search attribute RoundhouseKind")), true},
		{serviceerror.NewInvalidArgument("invalid query: operator 'LIKE' not allowed"), false},
		{serviceerror.NewUnavailable("RoundhouseRun"), false},
		{nil, false},
	}
	for _, c := range cases {
		if got := IsUnmappedAttribute(c.err); got != c.want {
			t.Errorf("IsUnmappedAttribute(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	hint := CreateAttributesHint("prod", searchAttributes)
	for _, want := range []string{"--namespace prod", "--name RoundhouseRound --type Int", "--name RoundhouseSuccessRate --type Double", "--name RoundhouseRun --type Keyword"} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint %q lacks %q", hint, want)
		}
	}
}
