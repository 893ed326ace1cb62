package schemas

import (
	"reflect"
	"testing"
)

func TestIndexImages(t *testing.T) {
	names, index, offsets := IndexImages([][]string{{"a", "b"}, nil, {"b", "c", "a"}})
	if !reflect.DeepEqual(names, []string{"a", "b", "c"}) || !reflect.DeepEqual(index, []int32{0, 1, 1, 2, 0}) ||
		!reflect.DeepEqual(offsets, []int64{0, 2, 2, 5}) {
		t.Fatalf("names %v index %v offsets %v", names, index, offsets)
	}
	if names, index, offsets := IndexImages(nil); names != nil || index != nil || !reflect.DeepEqual(offsets, []int64{0}) {
		t.Fatalf("no samples: %v %v %v", names, index, offsets)
	}
}
