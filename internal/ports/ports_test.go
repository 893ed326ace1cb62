package ports

import (
	"net"
	"strconv"
	"testing"
)

func TestAllocateLocksAndReleases(t *testing.T) {
	t.Setenv("ROUNDHOUSE_PORTS_DIR", t.TempDir())
	seen := map[int]bool{}
	var leases []*Lease
	for i := 0; i < 20; i++ {
		l, err := Allocate()
		if err != nil {
			t.Fatal(err)
		}
		if seen[l.Port] {
			t.Fatalf("port %d handed out twice while held", l.Port)
		}
		seen[l.Port] = true
		if !Held(l.Port) {
			t.Fatalf("port %d not locked", l.Port)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(l.Port))
		if err != nil {
			t.Fatalf("allocated port %d is not bindable: %v", l.Port, err)
		}
		ln.Close()
		leases = append(leases, l)
	}
	for _, l := range leases {
		l.Release()
		if Held(l.Port) {
			t.Fatalf("port %d still locked after Release", l.Port)
		}
	}
}

// TestAllocateBelow: the port is under the limit, locked for this
// process, and a second lease is another port.
func TestAllocateBelow(t *testing.T) {
	t.Setenv("ROUNDHOUSE_PORTS_DIR", t.TempDir())
	a, err := AllocateBelow(32768)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	b, err := AllocateBelow(32768)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	if a.Port >= 32768 || b.Port >= 32768 || a.Port < 20000 || a.Port == b.Port {
		t.Errorf("ports %d and %d: want two different ports in [20000, 32768)", a.Port, b.Port)
	}
	if !Held(a.Port) {
		t.Errorf("port %d not held after AllocateBelow", a.Port)
	}
	if _, err := AllocateBelow(20500); err == nil {
		t.Error("AllocateBelow(20500): want an error for a range under 1024 ports")
	}
}
