package connect_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/store"
)

// cleanEnv unsets every variable FromEnv reads (restored after the test)
// and points the Temporal config file at nothing, so the developer's own
// environment and ~/.config/temporalio cannot leak in.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "TEMPORAL_") || strings.HasPrefix(k, "ROUNDHOUSE_") || strings.HasPrefix(k, "AWS_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	t.Setenv("TEMPORAL_CONFIG_FILE", filepath.Join(t.TempDir(), "none.toml"))
}

func quiet() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// The dev stack's public keys apply only to a local endpoint; anywhere
// else, without keys, the AWS default chain signs.
func TestS3CredentialDefaults(t *testing.T) {
	cases := []struct {
		name      string
		env       map[string]string
		endpoint  *string // set after FromEnv, as a flag would
		wantKey   string
		pathStyle bool
	}{
		{name: "dev stack", wantKey: store.DevAccessKey, pathStyle: true},
		{name: "other local port", env: map[string]string{"ROUNDHOUSE_S3_ENDPOINT": "http://localhost:9200"}, wantKey: store.DevAccessKey, pathStyle: true},
		{name: "remote endpoint", env: map[string]string{"ROUNDHOUSE_S3_ENDPOINT": "https://s3.example.com"}, wantKey: "", pathStyle: true},
		{name: "AWS via env", env: map[string]string{"ROUNDHOUSE_S3_ENDPOINT": ""}, wantKey: "", pathStyle: false},
		{name: "AWS via flag", endpoint: ptr(""), wantKey: "", pathStyle: false},
		{name: "remote via flag", endpoint: ptr("https://minio.example.com"), wantKey: "", pathStyle: true},
		{name: "static keys", env: map[string]string{"ROUNDHOUSE_S3_ENDPOINT": "", "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE123", "AWS_SECRET_ACCESS_KEY": "s"}, wantKey: "AKIAEXAMPLE123"},
		{name: "path style off", env: map[string]string{"ROUNDHOUSE_S3_ENDPOINT": "https://s3.example.com", "ROUNDHOUSE_S3_PATH_STYLE": "false"}, pathStyle: false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cleanEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			e := connect.FromEnv()
			if c.endpoint != nil {
				e.S3.Endpoint = *c.endpoint
			}
			ak, _, _ := e.S3.StaticKeys()
			if ak != c.wantKey {
				t.Errorf("static key = %q, want %q", ak, c.wantKey)
			}
			if e.S3.UsesPathStyle() != c.pathStyle {
				t.Errorf("path style = %t, want %t", e.S3.UsesPathStyle(), c.pathStyle)
			}
			// A child started with Env() sees the same settings.
			child := childFromEnv(t, e.Env())
			if cak, _, _ := child.S3.StaticKeys(); cak != ak || child.S3.Endpoint != e.S3.Endpoint || child.S3.UsesPathStyle() != e.S3.UsesPathStyle() {
				t.Errorf("child: key %q endpoint %q path style %t", cak, child.S3.Endpoint, child.S3.UsesPathStyle())
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// childFromEnv is FromEnv in a process whose environment is env.
func childFromEnv(t *testing.T, env []string) connect.Endpoints {
	t.Helper()
	cleanEnv(t)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return connect.FromEnv()
}

// TEMPORAL_* follow the SDK's conventions; ROUNDHOUSE_* (the dev stack's)
// win; an API key implies TLS unless TLS is explicitly off; Env carries all
// of it to a child, overriding what the child's own environment says.
func TestTemporalEnv(t *testing.T) {
	cleanEnv(t)
	t.Setenv("TEMPORAL_ADDRESS", "ns.acct.tmprl.cloud:7233")
	t.Setenv("TEMPORAL_NAMESPACE", "ns.acct")
	t.Setenv("TEMPORAL_API_KEY", "tk-secret")
	e := connect.FromEnv()
	if e.Temporal != "ns.acct.tmprl.cloud:7233" || e.Namespace != "ns.acct" || e.APIKey != "tk-secret" {
		t.Fatalf("FromEnv = %v", e)
	}
	opts, err := e.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	if opts.ConnectionOptions.TLS == nil || opts.ConnectionOptions.TLSDisabled || opts.Credentials == nil {
		t.Fatalf("API key without TLS: %+v", opts.ConnectionOptions)
	}
	t.Setenv("TEMPORAL_TLS", "false")
	if opts, _ := connect.FromEnv().ClientOptions(); !opts.ConnectionOptions.TLSDisabled {
		t.Fatal("TEMPORAL_TLS=false did not disable TLS")
	}
	t.Setenv("TEMPORAL_TLS", "")
	t.Setenv("ROUNDHOUSE_TEMPORAL", "127.0.0.1:7233")
	if e := connect.FromEnv(); e.Temporal != "127.0.0.1:7233" {
		t.Fatalf("ROUNDHOUSE_TEMPORAL did not win: %s", e.Temporal)
	}
	// The dev stack's child gets plaintext and no key, whatever the
	// developer's shell says.
	dev := connect.Endpoints{Temporal: "127.0.0.1:7233", Namespace: "default"}
	cleanEnv(t)
	t.Setenv("TEMPORAL_API_KEY", "tk-secret")
	t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", "/cloud.pem")
	env := append(os.Environ(), dev.Env()...)
	child := childFromEnv(t, env)
	opts, err = child.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	if child.APIKey != "" || !opts.ConnectionOptions.TLSDisabled || opts.Credentials != nil {
		t.Fatalf("dev child inherited the shell's Temporal Cloud settings: %v", child)
	}
}

// The temporal.toml profile (TEMPORAL_PROFILE) is read like the CLI does.
func TestTemporalConfigFile(t *testing.T) {
	cleanEnv(t)
	dir := t.TempDir()
	ca := newCA(t, "ca")
	caFile := write(t, dir, "ca.pem", ca.pem)
	toml := fmt.Sprintf("[profile.prod]\naddress = \"temporal.prod:7233\"\nnamespace = \"rl\"\n[profile.prod.tls]\nserver_ca_cert_path = %q\nserver_name = \"temporal.prod\"\n", caFile)
	t.Setenv("TEMPORAL_CONFIG_FILE", write(t, dir, "temporal.toml", []byte(toml)))
	t.Setenv("TEMPORAL_PROFILE", "prod")
	e := connect.FromEnv()
	if e.Temporal != "temporal.prod:7233" || e.Namespace != "rl" || e.TLS.CAFile != caFile || e.TLS.ServerName != "temporal.prod" {
		t.Fatalf("profile not applied: %v", e)
	}
	opts, err := e.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	if opts.ConnectionOptions.TLS == nil || opts.ConnectionOptions.TLS.RootCAs == nil || opts.ConnectionOptions.TLS.ServerName != "temporal.prod" {
		t.Fatalf("TLS from profile: %+v", opts.ConnectionOptions.TLS)
	}
	t.Setenv("TEMPORAL_PROFILE", "missing")
	if _, err := connect.Temporal(context.Background(), connect.FromEnv(), quiet()); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing profile: %v", err)
	}
}

// Bad TLS files fail before any dial, naming the flag, the file and the fix.
func TestTLSFileErrors(t *testing.T) {
	cleanEnv(t)
	dir := t.TempDir()
	ca := newCA(t, "ca")
	certPEM, keyPEM := ca.leaf(t, "worker", false)
	cert, key := write(t, dir, "c.pem", certPEM), write(t, dir, "k.pem", keyPEM)
	_, otherKey := ca.leaf(t, "other", false)
	missing := filepath.Join(dir, "missing.pem")
	junk := write(t, dir, "junk.pem", []byte("not pem"))
	keyFile := write(t, dir, "api.key", []byte("  \n"))
	// Nothing listens here: an error that got as far as dialing would say
	// "not reachable".
	base := connect.Endpoints{Temporal: "127.0.0.1:1", Namespace: "default"}
	cases := []struct {
		name string
		tls  connect.TLS
		key  string
		want []string
	}{
		{"missing cert", connect.TLS{CertFile: missing, KeyFile: key}, "", []string{"--tls-cert " + missing, "no such file", "client certificate PEM"}},
		{"missing key", connect.TLS{CertFile: cert, KeyFile: missing}, "", []string{"--tls-key " + missing, "no such file", "private key"}},
		{"cert without key", connect.TLS{CertFile: cert}, "", []string{"without --tls-key"}},
		{"key without cert", connect.TLS{KeyFile: key}, "", []string{"without --tls-cert"}},
		{"mismatched key", connect.TLS{CertFile: cert, KeyFile: write(t, dir, "k2.pem", otherKey)}, "", []string{"matching private key"}},
		{"missing CA", connect.TLS{CAFile: missing}, "", []string{"--tls-ca " + missing, "no such file", "CA"}},
		{"CA not PEM", connect.TLS{CAFile: junk}, "", []string{"--tls-ca " + junk, "no PEM certificate"}},
		{"missing API key file", connect.TLS{}, missing, []string{"--api-key-file " + missing, "no such file"}},
		{"empty API key file", connect.TLS{}, keyFile, []string{"--api-key-file " + keyFile, "empty"}},
	}
	for _, c := range cases {
		e := base
		e.TLS, e.APIKeyFile = c.tls, c.key
		start := time.Now()
		_, err := connect.Temporal(context.Background(), e, quiet())
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not contain %q", c.name, err, w)
			}
		}
		if strings.Contains(err.Error(), "not reachable") || time.Since(start) > time.Second {
			t.Errorf("%s: dialed before checking files: %v", c.name, err)
		}
		if strings.Contains(err.Error(), "BEGIN") {
			t.Errorf("%s: error quotes PEM content", c.name)
		}
	}
}

// A server certificate from another CA, a server that wants a client
// certificate, and a plaintext client meeting a TLS server: each fails the
// health check with an error that names TLS and what to change.
func TestTLSHandshakeErrors(t *testing.T) {
	cleanEnv(t)
	dir := t.TempDir()
	serverCA, otherCA, clientCA := newCA(t, "server-ca"), newCA(t, "other-ca"), newCA(t, "client-ca")
	rightCA := write(t, dir, "server-ca.pem", serverCA.pem)
	wrongCA := write(t, dir, "other-ca.pem", otherCA.pem)
	strangerPEM, strangerKey := otherCA.leaf(t, "stranger", false)
	front := startTLSFront(t, serverCA, nil, "")
	mfront := startTLSFront(t, serverCA, clientCA, "")
	cases := []struct {
		name string
		addr string
		tls  connect.TLS
		want []string
	}{
		{"wrong CA", front.addr(), connect.TLS{CAFile: wrongCA}, []string{"TLS", wrongCA, "not signed by"}},
		{"system roots", front.addr(), connect.TLS{Enabled: ptr(true)}, []string{"TLS", "system's trusted CAs", "--tls-ca"}},
		{"wrong server name", front.addr(), connect.TLS{CAFile: rightCA, ServerName: "other.test"}, []string{"TLS", "--tls-server-name"}},
		{"no client certificate", mfront.addr(), connect.TLS{CAFile: rightCA}, []string{"TLS", "client certificate", "--tls-cert"}},
		{"untrusted client certificate", mfront.addr(), connect.TLS{CAFile: rightCA,
			CertFile: write(t, dir, "s.pem", strangerPEM), KeyFile: write(t, dir, "s.key", strangerKey)}, []string{"TLS", "client certificate", "s.pem"}},
		{"plaintext to TLS", front.addr(), connect.TLS{}, []string{"TLS", "--tls"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := connect.Endpoints{Temporal: c.addr, Namespace: "default", TLS: c.tls}
			start := time.Now()
			_, err := connect.Temporal(context.Background(), e, quiet())
			t.Logf("%v after %v", err, time.Since(start).Round(time.Millisecond))
			if err == nil {
				t.Fatal("connected")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not contain %q", err, w)
				}
			}
		})
	}
}

// Secrets never reach JSON, fmt or slog output, nor the child's view of
// anything but its environment.
func TestSecretsNeverPrinted(t *testing.T) {
	const apiKey, secret, token = "tk-API-SECRET-1234567890", "S3-SECRET-abcdefghij", "SESSION-TOKEN-xyz"
	e := connect.Endpoints{Temporal: "x.tmprl.cloud:7233", Namespace: "ns", APIKey: apiKey,
		S3: store.Config{Endpoint: "https://s3.example.com", Bucket: "b", AccessKey: "AKIAABCDEFGHIJKL", SecretKey: secret, SessionToken: token}}
	var out bytes.Buffer
	j, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	out.Write(j)
	j, _ = json.Marshal(e.S3)
	out.Write(j)
	for _, h := range []slog.Handler{slog.NewJSONHandler(&out, nil), slog.NewTextHandler(&out, nil)} {
		l := slog.New(h)
		l.Info("start", "endpoints", e, "ptr", &e, "s3", e.S3, "s3ptr", &e.S3)
		l.Info("start", slog.Any("endpoints", e))
	}
	fmt.Fprintf(&out, "%v %+v %#v %s %v %+v %#v", e, e, e, e, e.S3, e.S3, e.S3)
	fmt.Fprint(&out, []any{e, e.S3}, struct{ E connect.Endpoints }{e})
	for _, s := range []string{apiKey, secret, token, "AKIAABCDEFGHIJKL"} {
		if strings.Contains(out.String(), s) {
			t.Errorf("%q printed:\n%s", s, out.String())
		}
	}
	if !strings.Contains(out.String(), "x.tmprl.cloud") || !strings.Contains(out.String(), "s3.example.com") {
		t.Errorf("the non-secret settings are missing:\n%s", out.String())
	}
}

// The flags land in Endpoints; --tls is a boolean that may stand alone.
func TestFlags(t *testing.T) {
	cleanEnv(t)
	e := connect.FromEnv()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	connect.AddFlags(fs, &e)
	if err := fs.Parse([]string{"--namespace", "rl", "--tls", "--tls-ca", "/ca.pem", "--tls-server-name", "t", "--s3-path-style=false", "--api-key-file", "/k"}); err != nil {
		t.Fatal(err)
	}
	if e.Namespace != "rl" || e.TLS.Enabled == nil || !*e.TLS.Enabled || e.TLS.CAFile != "/ca.pem" || e.TLS.ServerName != "t" ||
		e.S3.PathStyle == nil || *e.S3.PathStyle || e.APIKeyFile != "/k" {
		t.Fatalf("flags not applied: %v", e)
	}
}

// The payload key file is checked at start-up, before any dial.
func TestPayloadKeyFileChecked(t *testing.T) {
	cleanEnv(t)
	e := connect.Endpoints{Temporal: "127.0.0.1:1", Namespace: "default", PayloadKeyFile: filepath.Join(t.TempDir(), "nokey")}
	_, err := connect.Temporal(context.Background(), e, quiet())
	if err == nil || !strings.Contains(err.Error(), "ROUNDHOUSE_PAYLOAD_KEY_FILE") || strings.Contains(err.Error(), "not reachable") {
		t.Fatalf("missing key file: %v", err)
	}
}

// A bucket that exists but refuses writes (or deletes) fails Store at
// start-up, naming the bucket and the permission; ReadOnly skips the probe.
func TestStoreNotWritable(t *testing.T) {
	for _, c := range []struct {
		name, refuse string
		want         []string
	}{
		{"no put", http.MethodPut, []string{`"b" at`, "not writable", "access denied", "s3:PutObject"}},
		{"no delete", http.MethodDelete, []string{`"b" at`, "not deletes", "s3:DeleteObject"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var puts []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPut {
					puts = append(puts, r.URL.Path)
				}
				if r.Method == c.refuse {
					w.Header().Set("Content-Type", "application/xml")
					w.WriteHeader(http.StatusForbidden)
					_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`)
					return
				}
				if r.Method == http.MethodDelete {
					w.WriteHeader(http.StatusNoContent)
				}
			}))
			defer srv.Close()
			e := connect.Endpoints{S3: store.Config{Endpoint: srv.URL, Bucket: "b", AccessKey: "a", SecretKey: "s"}}
			_, err := connect.Store(context.Background(), e)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not contain %q", err, w)
				}
			}
			if len(puts) != 1 || !strings.HasPrefix(puts[0], "/b/.roundhouse-probe/") {
				t.Errorf("puts = %v, want one probe under /b/.roundhouse-probe/", puts)
			}
			e.ReadOnly = true
			if _, err := connect.Store(context.Background(), e); err != nil {
				t.Errorf("read-only: %v", err)
			}
		})
	}
}

func TestScrubEnv(t *testing.T) {
	got := connect.ScrubEnv([]string{"PATH=/bin", "TEMPORAL_API_KEY=k", "AWS_SECRET_ACCESS_KEY=s", "AWS_ACCESS_KEY_ID=a",
		"AWS_SESSION_TOKEN=t", "TEMPORAL_GRPC_META_AUTHORIZATION=Bearer x", "AWS_REGION=eu-west-1", "TEMPORAL_ADDRESS=h:7233"})
	want := []string{"PATH=/bin", "AWS_REGION=eu-west-1", "TEMPORAL_ADDRESS=h:7233"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("ScrubEnv = %v, want %v", got, want)
	}
}

func TestUnsetSecrets(t *testing.T) {
	t.Setenv("TEMPORAL_API_KEY", "k-123")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s-456")
	t.Setenv("TEMPORAL_GRPC_META_AUTHORIZATION", "Bearer x")
	t.Setenv("ROUNDHOUSE_BUCKET", "keep")
	connect.UnsetSecrets()
	for _, k := range []string{"TEMPORAL_API_KEY", "AWS_SECRET_ACCESS_KEY", "TEMPORAL_GRPC_META_AUTHORIZATION"} {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("%s is still set (%q)", k, v)
		}
	}
	if os.Getenv("ROUNDHOUSE_BUCKET") != "keep" {
		t.Error("UnsetSecrets removed a variable that is not a secret")
	}
}
