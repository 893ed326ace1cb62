package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/roundhouse-rl/roundhouse/schemas"
)

func dataURL(mediaType string, data []byte) string {
	return "data:" + mediaType + ";base64," + base64.StdEncoding.EncodeToString(data)
}

func TestExtractImagesReplacesOnlyInlineImages(t *testing.T) {
	png := []byte("\x89PNG fake pixels")
	jpg := []byte("jpeg bytes")
	sum := sha256.Sum256(png)
	pngName := hex.EncodeToString(sum[:]) + ".png"
	body := `{"model":"toy","messages":[{"role":"user","content":[` +
		`{"type":"text","text":"data:image/ in text is not an image"},` +
		`{"type":"image_url","image_url":{"url":"` + dataURL("image/png", png) + `"}},` +
		`{"type":"image_url","image_url":{"url":"` + strings.ReplaceAll(dataURL("image/jpeg", jpg), "/", `\/`) + `"}},` +
		`{"type":"image_url","image_url":{"url":"` + dataURL("image/png", png) + `"}},` +
		`{"type":"image_url","image_url":{"url":"https://example.com/x.png"}}]}],"temperature":1}`
	got := map[string][]byte{}
	calls := 0
	out := extractImages([]byte(body), func(name string, data []byte) { calls++; got[name] = data })
	if !json.Valid(out) {
		t.Fatalf("output is not JSON: %s", out)
	}
	if calls != 3 || len(got) != 2 || !bytes.Equal(got[pngName], png) {
		t.Fatalf("blobs %v (calls %d), want the png under %s and the jpeg", keys(got), calls, pngName)
	}
	if bytes.Contains(out, []byte("base64")) {
		t.Errorf("inline image left in %s", out)
	}
	for _, keep := range []string{`"data:image/ in text is not an image"`, `"https://example.com/x.png"`, `"temperature":1`, `"` + BlobPrefix + pngName + `"`} {
		if !bytes.Contains(out, []byte(keep)) {
			t.Errorf("output lacks %s: %s", keep, out)
		}
	}
	plain := []byte(`{"model":"toy","messages":[]}`)
	if o := extractImages(plain, func(string, []byte) { t.Error("no image expected") }); !bytes.Equal(o, plain) {
		t.Errorf("a body without images changed: %s", o)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The upstream receives the harness's images; the record references blobs,
// and OnCall sees each record as its call completes, before End returns it.
func TestImagesAndOnCall(t *testing.T) {
	var upstreamBody []byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamBody, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop","token_ids":[1]}],"prompt_token_ids":[5]}`))
	}))
	defer up.Close()
	var mu sync.Mutex
	var blobs []string
	var spooled []schemas.Call
	p, srv := newProxy(t, nil, Options{
		OnBlob: func(ep schemas.EpisodeKey, name string, data []byte) {
			mu.Lock()
			blobs = append(blobs, ep.ID()+"/"+name)
			mu.Unlock()
		},
		OnCall: func(ep schemas.EpisodeKey, c schemas.Call) { mu.Lock(); spooled = append(spooled, c); mu.Unlock() },
	})
	p.SetUpstream(up.URL)
	prefix := p.Begin(named("img"))
	img, img2 := dataURL("image/png", []byte("pixels")), dataURL("image/jpeg", []byte("other"))
	part := func(u string) string { return `{"type":"image_url","image_url":{"url":"` + u + `"}}` }
	body := []byte(`{"model":"toy","messages":[{"role":"user","content":[` + part(img) + `,` + part(img2) + `]},` +
		`{"role":"user","content":[` + part(img) + `]}]}`)
	if status, _, b := post(t, srv.URL+prefix+"/chat/completions", body); status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	if !bytes.Contains(upstreamBody, []byte(img)) {
		t.Error("the model server must receive the image itself")
	}
	// OnCall runs after the answer has been flushed, so the harness can
	// have it first; End waits for it.
	recs := p.End(idOf("img"))
	mu.Lock()
	n := len(spooled)
	mu.Unlock()
	if n != 1 {
		t.Fatalf("OnCall saw %d records by the time End returned, want 1", n)
	}
	if len(blobs) != 3 || !strings.HasPrefix(blobs[0], idOf("img")+"/") {
		t.Fatalf("blobs %v", blobs)
	}
	// The record lists the images in prompt order, the repeat included: the
	// trainer pairs them with the prompt's image placeholders one by one.
	a, b := sha(t, "pixels")+".png", sha(t, "other")+".jpg"
	if want := []string{a, b, a}; !slices.Equal(recs[0].Images, want) {
		t.Errorf("recorded images %v, want %v", recs[0].Images, want)
	}
	if strings.Contains(recs[0].Request, "base64") || !strings.Contains(recs[0].Request, BlobPrefix) {
		t.Errorf("recorded request %s", recs[0].Request)
	}
	if spooled[0].Request != recs[0].Request || spooled[0].CallIndex != 0 {
		t.Errorf("spooled record differs from End's: %+v", spooled[0])
	}
}

func TestWrongContentType415(t *testing.T) {
	up := newStub(t, modeOK)
	p, srv := newProxy(t, up, Options{})
	prefix := p.Begin(named("ct"))
	resp, err := http.Post(srv.URL+prefix+"/chat/completions", "text/plain", strings.NewReader(string(chatBody("hi", reqOpts{}))))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("status %d", resp.StatusCode)
	}
	checkOpenAIError(t, b, "invalid_request_error", "text/plain", "application/json")
	recs := p.End(idOf("ct"))
	if len(recs) != 1 || recs[0].HTTPStatus != http.StatusUnsupportedMediaType || recs[0].Trainable {
		t.Fatalf("records %+v", recs)
	}
	if n := len(up.chatBodies()); n != 0 {
		t.Errorf("upstream called %d times", n)
	}
}

// Root endpoints of the model server (vLLM serves /tokenize and /health
// outside /v1) pass through unrecorded.
func TestRootEndpointsPassThrough(t *testing.T) {
	up := newStub(t, modeOK)
	p, srv := newProxy(t, up, Options{})
	prefix := p.Begin(named("root"))
	base := srv.URL + strings.TrimSuffix(prefix, "/v1")
	resp, err := http.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/health: %d", resp.StatusCode)
	}
	status, _, b := post(t, base+"/tokenize", []byte(`{"model":"toy","prompt":"hi"}`))
	if status != 200 || !strings.Contains(string(b), `"tokens":[7,8]`) {
		t.Errorf("/tokenize: %d %s", status, b)
	}
	if recs := p.End(idOf("root")); len(recs) != 0 {
		t.Errorf("pass-through recorded: %v", recs)
	}
}

func sha(t *testing.T, s string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
