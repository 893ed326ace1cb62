package rl

import (
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func TestFilterCall(t *testing.T) {
	off := schemas.Filters{}
	length := schemas.Filters{MaxTokens: 100}
	length6 := schemas.Filters{MaxTokens: 100, MaxTokensFromRound: 6}
	post := schemas.Filters{PostSuccess: true}
	post6 := schemas.Filters{PostSuccess: true, PostSuccessFromRound: 6}
	both := schemas.Filters{MaxTokens: 100, PostSuccess: true}
	for _, c := range []struct {
		name        string
		f           schemas.Filters
		round       int32
		call        int32
		tokens      int
		successCall int32
		want        Drop
	}{
		{"off keeps long post-success calls", off, 9, 7, 1000, 3, Keep},
		{"length at the limit", length, 1, 0, 100, -1, Keep},
		{"length over the limit", length, 1, 0, 101, -1, DropLength},
		{"length before its round", length6, 5, 0, 101, -1, Keep},
		{"length from its round", length6, 6, 0, 101, -1, DropLength},
		{"post-success before success", post, 1, 2, 10, 3, Keep},
		{"post-success at the success call", post, 1, 3, 10, 3, DropPostSuccess},
		{"post-success after", post, 1, 4, 10, 3, DropPostSuccess},
		{"post-success unknown", post, 1, 4, 10, -1, Keep},
		{"post-success zero read from old rows is unknown", post, 1, 4, 10, 0, Keep},
		{"post-success before its round", post6, 5, 4, 10, 3, Keep},
		{"post-success from its round", post6, 6, 4, 10, 3, DropPostSuccess},
		{"post-success later round", post6, 7, 4, 10, 3, DropPostSuccess},
		{"length wins when both apply", both, 1, 4, 101, 3, DropLength},
	} {
		if got := FilterCall(c.f, c.round, c.call, c.tokens, c.successCall); got != c.want {
			t.Errorf("%s: FilterCall = %v, want %v", c.name, got, c.want)
		}
	}
}
