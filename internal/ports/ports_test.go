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
