package store

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// s3Answering is a store whose server answers every request with status,
// after failing the first fail requests with 503.
func s3Answering(t *testing.T, status int, fail int32) (*Store, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return testStore(t, srv.URL), &n
}

func testStore(t *testing.T, endpoint string) *Store {
	t.Helper()
	s, err := New(context.Background(), Config{Endpoint: endpoint, Region: "us-east-1", Bucket: "b", AccessKey: "k", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestUnavailable classifies real errors of the S3 client.
func TestUnavailable(t *testing.T) {
	ctx := context.Background()
	// A port nothing listens on: no connection.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	_, err = testStore(t, closed).Exists(ctx, "k")
	if err == nil || !Unavailable(err) {
		t.Errorf("connection refused: %v; want Unavailable", err)
	}
	busy, _ := s3Answering(t, http.StatusServiceUnavailable, 0)
	if _, err := busy.Get(ctx, "k"); err == nil || !Unavailable(err) {
		t.Errorf("503: %v; want Unavailable", err)
	}
	denied, _ := s3Answering(t, http.StatusForbidden, 0)
	if _, err := denied.Get(ctx, "k"); err == nil || Unavailable(err) {
		t.Errorf("403: %v; want an answer, not Unavailable", err)
	}
	if Unavailable(errors.New("parquet: invalid magic footer")) || Unavailable(nil) {
		t.Error("an error of the data, or none, is not Unavailable")
	}
}

// TestAwait: an outage is waited out, an answer is returned at once, and
// the wait ends at its limit.
func TestAwait(t *testing.T) {
	ctx := context.Background()
	// The SDK retries a 503 itself (3 attempts), so 4 failures outlast one
	// call and only Await's second call gets through.
	s, n := s3Answering(t, http.StatusOK, 4)
	calls := 0
	err := Await(ctx, time.Minute, "get k", func() error { calls++; _, err := s.Get(ctx, "k"); return err })
	if err != nil || calls != 2 {
		t.Errorf("after an outage: err %v after %d calls (%d requests); want success on the second call", err, calls, n.Load())
	}
	denied, _ := s3Answering(t, http.StatusForbidden, 0)
	calls = 0
	err = Await(ctx, time.Minute, "get k", func() error { calls++; _, err := denied.Get(ctx, "k"); return err })
	if err == nil || calls != 1 {
		t.Errorf("403: err %v after %d calls; want it returned after one", err, calls)
	}
	calls = 0
	err = Await(ctx, 2*time.Second, "get k", func() error { calls++; return &net.OpError{Op: "dial", Err: errors.New("refused")} })
	if err == nil || calls < 2 {
		t.Errorf("a lasting outage: err %v after %d calls; want it given up after some tries", err, calls)
	}
}
