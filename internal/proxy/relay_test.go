package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// hits records the requests a server received.
type hits struct {
	mu   sync.Mutex
	reqs []string // "METHOD host path"
}

func (h *hits) add(r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reqs = append(h.reqs, r.Method+" "+r.Host+" "+r.URL.EscapedPath())
}

func (h *hits) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.reqs...)
}

// rawRequest sends head verbatim (so the request line may be absolute-form
// or CONNECT, which http.Client would not write) and returns the status.
func rawRequest(t *testing.T, addr, head, body string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, head+body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%q: %v", head, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The proxy is not an open relay: whatever the request line, Host header or
// path says, requests reach only the configured model server, or nothing.
func TestNotAnOpenRelay(t *testing.T) {
	var evil, up hits
	evilSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		evil.add(r)
		_, _ = io.WriteString(w, "evil")
	}))
	defer evilSrv.Close()
	model := newStub(t, modeOK)
	// Record what reaches the model server, then answer as the stub does.
	upSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.add(r)
		model.ServeHTTP(w, r)
	}))
	defer upSrv.Close()
	p, srv := newProxy(t, nil, Options{})
	p.SetUpstream(upSrv.URL)
	prefix := p.Begin(named("ep"))
	defer p.End(idOf("ep"))
	addr := strings.TrimPrefix(srv.URL, "http://")
	evilHost := strings.TrimPrefix(evilSrv.URL, "http://")
	upHost := strings.TrimPrefix(upSrv.URL, "http://")
	chat := string(chatBody("pick up the cube", reqOpts{}))

	cases := []struct {
		name, head, body string
		status           int
		upPath           string // path the model server must see; "" for none
	}{
		{"absolute-form outside /e/", "GET " + evilSrv.URL + "/x HTTP/1.1\r\nHost: " + evilHost + "\r\n\r\n", "", 404, ""},
		{"absolute-form episode path", "GET " + evilSrv.URL + prefix + "/models HTTP/1.1\r\nHost: " + evilHost + "\r\n\r\n", "", 200, "/v1/models"},
		{"foreign Host header", "GET " + prefix + "/models HTTP/1.1\r\nHost: " + evilHost + "\r\n\r\n", "", 200, "/v1/models"},
		{"absolute-form chat", fmt.Sprintf("POST %s%s/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", evilSrv.URL, prefix, evilHost, len(chat)), chat, 200, "/v1/chat/completions"},
		{"dot segments", "GET " + prefix + "/../../x HTTP/1.1\r\nHost: " + addr + "\r\n\r\n", "", 400, ""},
		{"encoded dot segments", "GET " + prefix + "/%2e%2e/%2E%2E/x HTTP/1.1\r\nHost: " + addr + "\r\n\r\n", "", 400, ""},
		{"encoded slash dot segments", "GET " + prefix + "/..%2f..%2fx HTTP/1.1\r\nHost: " + addr + "\r\n\r\n", "", 400, ""},
		{"single dot segment", "GET " + prefix + "/./models HTTP/1.1\r\nHost: " + addr + "\r\n\r\n", "", 400, ""},
		{"CONNECT authority", "CONNECT " + evilHost + " HTTP/1.1\r\nHost: " + evilHost + "\r\n\r\n", "", 405, ""},
		{"CONNECT episode path", "CONNECT " + prefix + "/models HTTP/1.1\r\nHost: " + addr + "\r\n\r\n", "", 405, ""},
		{"escapes pass through as sent", "GET " + prefix + "/models/org%2Fname%20x HTTP/1.1\r\nHost: " + addr + "\r\n\r\n", "", 404, "/v1/models/org%2Fname%20x"},
		{"authority in path", "GET " + prefix + "//" + evilHost + "/x HTTP/1.1\r\nHost: " + addr + "\r\n\r\n", "", 404, "/v1//" + evilHost + "/x"},
	}
	for _, c := range cases {
		before := len(up.all())
		status, body := rawRequest(t, addr, c.head, c.body)
		if status != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, status, c.status, body)
		}
		got := up.all()[before:]
		switch {
		case c.upPath == "" && len(got) != 0:
			t.Errorf("%s: reached the model server: %v", c.name, got)
		case c.upPath != "" && (len(got) != 1 || !strings.HasSuffix(got[0], " "+upHost+" "+c.upPath)):
			t.Errorf("%s: model server saw %v, want one request for %s with Host %s", c.name, got, c.upPath, upHost)
		}
	}
	if e := evil.all(); len(e) != 0 {
		t.Fatalf("requests reached another server: %v", e)
	}
}

// A model server's redirect is returned to the harness, never followed:
// the proxy talks to its configured upstream only.
func TestUpstreamRedirectNotFollowed(t *testing.T) {
	var evil hits
	evilSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		evil.add(r)
	}))
	defer evilSrv.Close()
	upSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, evilSrv.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer upSrv.Close()
	p, srv := newProxy(t, nil, Options{})
	p.SetUpstream(upSrv.URL)
	prefix := p.Begin(named("ep"))
	// A client that does not follow redirects itself, so that only the
	// proxy's behaviour is seen.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/chat/completions", "/models"} {
		method, body := http.MethodPost, strings.NewReader(string(chatBody("hi", reqOpts{})))
		if path == "/models" {
			method, body = http.MethodGet, strings.NewReader("")
		}
		req, _ := http.NewRequest(method, srv.URL+prefix+path, body)
		req.Header.Set("Content-Type", "application/json")
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 300 {
			t.Errorf("%s: status %d, want the upstream's redirect or an error", path, resp.StatusCode)
		}
	}
	p.End(idOf("ep"))
	if e := evil.all(); len(e) != 0 {
		t.Fatalf("redirect followed: %v", e)
	}
}

// The stream relay flushes when the next event is not yet whole in what it
// has read from the model server: a partial event (or nothing) could mean
// waiting on the network, a whole one cannot.
func TestEventBuffered(t *testing.T) {
	for _, c := range []struct {
		rest string
		want bool
	}{
		{"", false},
		{"data: {\"a\":1}", false},
		{"data: {\"a\":1}\n", false},
		{"data: {\"a\":1}\n\n", true},
		{"data: {\"a\":1}\r\n\r\n", true},
		{"data: {\"a\":1}\n\ndata: [DO", true},
	} {
		br := bufio.NewReader(strings.NewReader("data: first\n\n" + c.rest))
		if _, err := br.ReadSlice('\n'); err != nil {
			t.Fatal(err)
		}
		if _, err := br.ReadSlice('\n'); err != nil { // the blank line: the first event read
			t.Fatal(err)
		}
		if got := eventBuffered(br); got != c.want {
			t.Errorf("after the first event, %q buffered: eventBuffered = %v, want %v", c.rest, got, c.want)
		}
	}
}
