package rl

import (
	"math"
	"reflect"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func near(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-12 {
			return false
		}
	}
	return true
}

func TestLeaveOneOutWorkedExample(t *testing.T) {
	got := LeaveOneOut([]float64{1, 0, 1, 0, 0, 1})
	want := []float64{0.6, -0.6, 0.6, -0.6, -0.6, 0.6}
	if !near(got, want) {
		t.Fatalf("LeaveOneOut = %v, want %v", got, want)
	}
}

func TestLeaveOneOutProperties(t *testing.T) {
	for _, rewards := range [][]float64{{1, 1, 1}, {0, 0}, {0.5, 0.2, 0.9, 0.1}, {1, 0}} {
		a := LeaveOneOut(rewards)
		var sum float64
		for _, x := range a {
			sum += x
		}
		if math.Abs(sum) > 1e-12 {
			t.Errorf("advantages of %v sum to %v, want 0", rewards, sum)
		}
		allZero := true
		for _, x := range a {
			allZero = allZero && x == 0
		}
		if allZero == HasSignal(rewards) {
			t.Errorf("%v: HasSignal=%v but advantages %v", rewards, HasSignal(rewards), a)
		}
	}
	if LeaveOneOut([]float64{1}) != nil {
		t.Error("a single attempt must have no advantage")
	}
}

func TestSelectPoolBand(t *testing.T) {
	res := []schemas.TaskResult{
		{Task: 0, Valid: 5, SuccessRate: 0}, {Task: 1, Valid: 5, SuccessRate: 0.4},
		{Task: 2, Valid: 5, SuccessRate: 1}, {Task: 3, Valid: 0}, {Task: 4, Valid: 5, SuccessRate: 0.8},
	}
	if got := SelectPool(res, 0, 1); !reflect.DeepEqual(got, []int32{1, 4}) {
		t.Fatalf("pool = %v, want [1 4]", got)
	}
	if got := SelectPool(res, 0, 0.5); !reflect.DeepEqual(got, []int32{1}) {
		t.Fatalf("pool with band (0,0.5) = %v, want [1]", got)
	}
}

func TestPlanGroupsDeterministicAndSpread(t *testing.T) {
	ids := []int32{11, 12, 13, 14}
	a := PlanGroups([]int32{3, 1}, ids, 8, 7, 2)
	b := PlanGroups([]int32{1, 3}, ids, 8, 7, 2)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same inputs gave different plans: %v vs %v", a, b)
	}
	seen := map[Group]bool{}
	perTask := map[int32]int{}
	for _, g := range a {
		if seen[g] {
			t.Fatalf("pair %v repeated before all pairs were used: %v", g, a)
		}
		seen[g] = true
		perTask[g.Task]++
	}
	if perTask[1] != 4 || perTask[3] != 4 {
		t.Fatalf("groups not spread evenly: %v", perTask)
	}
	if c := PlanGroups([]int32{1, 3}, ids, 8, 7, 3); reflect.DeepEqual(a, c) {
		t.Fatalf("another round should draw other init states")
	}
}

func TestSelectCalls(t *testing.T) {
	if got := SelectCalls(5, 16, SelectRandom, 1, "e"); len(got) != 5 {
		t.Fatalf("short episode: %v", got)
	}
	a := SelectCalls(40, 16, SelectRandom, 1, "ep-1")
	if len(a) != 16 || !reflect.DeepEqual(a, SelectCalls(40, 16, SelectRandom, 1, "ep-1")) {
		t.Fatalf("selection not deterministic or wrong size: %v", a)
	}
	if reflect.DeepEqual(a, SelectCalls(40, 16, SelectRandom, 2, "ep-1")) {
		t.Fatal("another seed should select other calls")
	}
	for i := 1; i < len(a); i++ {
		if a[i] <= a[i-1] {
			t.Fatalf("selection not sorted and unique: %v", a)
		}
	}
}

func TestSelectionRules(t *testing.T) {
	for _, c := range []struct {
		rule string
		want []int
	}{
		{SelectFirst, []int{0, 1, 2}},
		{SelectLast, []int{7, 8, 9}},
		{SelectSpread, []int{0, 3, 6}},
	} {
		if got := SelectCalls(10, 3, c.rule, 1, "e"); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.rule, got, c.want)
		}
	}
}
