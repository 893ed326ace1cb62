package codec

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

type input struct {
	Run    string
	Rounds int
}

func TestRoundTripHidesPlaintext(t *testing.T) {
	c, err := New(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	dc := c.DataConverter()
	in := input{Run: "secret-run-name", Rounds: 3}
	p, err := dc.ToPayload(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Metadata[converter.MetadataEncoding]) != Encoding || string(p.Metadata[MetadataKeyID]) != c.KeyID() {
		t.Fatalf("metadata = %v", p.Metadata)
	}
	if bytes.Contains(p.Data, []byte("secret-run-name")) || bytes.Contains(p.Data, []byte("json/plain")) {
		t.Fatal("ciphertext contains the plaintext or its encoding")
	}
	var out input
	if err := dc.FromPayload(p, &out); err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Fatalf("round trip = %+v, want %+v", out, in)
	}
	// Fresh nonces: the same value never encrypts the same way twice.
	p2, _ := dc.ToPayload(in)
	if bytes.Equal(p.Data, p2.Data) {
		t.Fatal("two encryptions of the same value are identical")
	}
}

// Turning encryption on must not break workflows whose history already
// holds plain payloads.
func TestPlainPayloadsPassThrough(t *testing.T) {
	c, _ := New(newKey(t))
	plain, err := converter.GetDefaultDataConverter().ToPayload(input{Run: "old"})
	if err != nil {
		t.Fatal(err)
	}
	var out input
	if err := c.DataConverter().FromPayload(plain, &out); err != nil || out.Run != "old" {
		t.Fatalf("plain payload: %+v, %v", out, err)
	}
	nilp, _ := converter.GetDefaultDataConverter().ToPayload(nil)
	if got, err := c.Decode([]*commonpb.Payload{nilp}); err != nil || got[0] != nilp {
		t.Fatalf("nil payload: %v %v", got, err)
	}
}

func TestWrongKeyFailsClearly(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	a, _ := New(k1)
	b, err := LoadFile(writeFile(t, []byte(base64.StdEncoding.EncodeToString(k2)+"\n")))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := a.DataConverter().ToPayload(input{Run: "r"})
	var out input
	err = b.DataConverter().FromPayload(p, &out)
	if err == nil {
		t.Fatal("decrypted with the wrong key")
	}
	for _, want := range []string{KeyID(k1), KeyID(k2), EnvKeyFile, "add that key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), base64.StdEncoding.EncodeToString(k2)) {
		t.Error("error contains the key")
	}
}

func TestTamperedPayloadFails(t *testing.T) {
	c, _ := New(newKey(t))
	p, _ := c.DataConverter().ToPayload(input{Run: "r"})
	p.Data[len(p.Data)-1] ^= 1
	var out input
	if err := c.DataConverter().FromPayload(p, &out); err == nil || !strings.Contains(err.Error(), "corrupt or was altered") {
		t.Fatalf("tampered payload: %v", err)
	}
	p.Data = p.Data[:5]
	if err := c.DataConverter().FromPayload(p, &out); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated payload: %v", err)
	}
}

// Rotation: the new key first encrypts; the old one, second, still
// decrypts what was written before.
func TestRotation(t *testing.T) {
	old, cur := newKey(t), newKey(t)
	before, _ := New(old)
	p, _ := before.DataConverter().ToPayload(input{Run: "before"})
	file := "# rotated\n" + base64.StdEncoding.EncodeToString(cur) + "\n\n" + base64.StdEncoding.EncodeToString(old) + "\n"
	after, err := LoadFile(writeFile(t, []byte(file)))
	if err != nil {
		t.Fatal(err)
	}
	if after.KeyID() != KeyID(cur) {
		t.Fatalf("encrypting key = %s, want the first", after.KeyID())
	}
	var out input
	if err := after.DataConverter().FromPayload(p, &out); err != nil || out.Run != "before" {
		t.Fatalf("old payload after rotation: %+v, %v", out, err)
	}
	q, _ := after.DataConverter().ToPayload(input{Run: "after"})
	if string(q.Metadata[MetadataKeyID]) != KeyID(cur) {
		t.Fatal("new payloads not under the new key")
	}
}

func TestKeyFiles(t *testing.T) {
	raw := newKey(t)
	c, err := LoadFile(writeFile(t, raw))
	if err != nil || c.KeyID() != KeyID(raw) {
		t.Fatalf("raw key: %v", err)
	}
	c, err = LoadFile(writeFile(t, []byte(base64.RawStdEncoding.EncodeToString(raw))))
	if err != nil || c.KeyID() != KeyID(raw) {
		t.Fatalf("unpadded base64 key: %v", err)
	}
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"short":    {[]byte(base64.StdEncoding.EncodeToString(raw[:16])), "decodes to 16 bytes"},
		"garbage":  {[]byte("not a key at all!"), "not base64"},
		"empty":    {[]byte("# nothing\n"), "no key"},
		"rawshort": {bytes.Repeat([]byte{0xff}, 31), "not base64"},
	} {
		_, err := LoadFile(writeFile(t, tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), EnvKeyFile) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "not a key at all") {
			t.Errorf("%s: error echoes the file", name)
		}
	}
	_, err = LoadFile(filepath.Join(t.TempDir(), "missing"))
	if err == nil || !strings.Contains(err.Error(), "no such file") || !strings.Contains(err.Error(), "32 random bytes") {
		t.Errorf("missing file: %v", err)
	}
}

// The codec server decodes what the workers encoded, for the UI.
func TestHandlerDecodes(t *testing.T) {
	c, _ := New(newKey(t))
	p, _ := c.DataConverter().ToPayload("hello")
	srv := httptest.NewServer(Handler(c, "http://127.0.0.1:8233"))
	defer srv.Close()
	body, _ := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{p}})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/decode", bytes.NewReader(body))
	req.Header.Set("Origin", "http://127.0.0.1:8233")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "http://127.0.0.1:8233" {
		t.Fatalf("status %d, CORS %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	var out commonpb.Payloads
	if err := protojson.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	var s string
	if err := converter.GetDefaultDataConverter().FromPayload(out.Payloads[0], &s); err != nil || s != "hello" {
		t.Fatalf("decoded %q, %v", s, err)
	}
	// Another origin gets no CORS grant.
	req, _ = http.NewRequest(http.MethodOptions, srv.URL+"/decode", nil)
	req.Header.Set("Origin", "http://evil.example")
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS granted to another origin")
	}
}
