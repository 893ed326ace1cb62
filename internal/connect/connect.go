// Package connect opens Roundhouse's two external services, Temporal and S3,
// with timeouts and errors that say how to fix an unreachable endpoint.
//
// Temporal's client settings follow the SDK's environment configuration
// (go.temporal.io/sdk/contrib/envconfig): TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS*, TEMPORAL_PROFILE and
// the temporal.toml config file; ROUNDHOUSE_TEMPORAL and
// ROUNDHOUSE_NAMESPACE, which the dev stack sets, and flags take precedence.
package connect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"

	"github.com/roundhouse-rl/roundhouse/internal/codec"
	"github.com/roundhouse-rl/roundhouse/internal/store"
)

// Endpoints are the addresses of Temporal and S3 and how to authenticate to
// them. Secrets (the API key, S3 keys) are never marshalled or logged: see
// String and LogValue.
type Endpoints struct {
	Temporal  string
	Namespace string
	TLS       TLS
	// APIKey is the Temporal API key (TEMPORAL_API_KEY); APIKeyFile, when
	// set, is read instead at start-up. There is no flag for the key itself:
	// a secret on a command line ends in shell history and in every user's
	// `ps` output.
	APIKey     string `json:"-"`
	APIKeyFile string `json:",omitempty"`
	// PayloadKeyFile turns on AES-256-GCM payload encryption (see package
	// codec); ROUNDHOUSE_PAYLOAD_KEY_FILE.
	PayloadKeyFile string `json:",omitempty"`
	S3             store.Config
	// ReadOnly skips Store's write probe, for commands that only read.
	ReadOnly bool `json:",omitempty"`

	// profile holds what the SDK's config brought that has no field here
	// (inline PEM data, gRPC metadata, authority); loadErr a broken config
	// file, reported by Temporal before it dials.
	profile envconfig.ClientConfigProfile
	loadErr error
}

// TLS is the Temporal client's transport security. mTLS is CertFile plus
// KeyFile; CAFile verifies a server whose certificate a private CA signed.
type TLS struct {
	// Enabled: nil means on exactly when an API key, a client certificate,
	// a CA or a server name is given (Temporal Cloud needs only the key).
	Enabled    *bool  `json:",omitempty"`
	CertFile   string `json:",omitempty"` // --tls-cert, TEMPORAL_TLS_CLIENT_CERT_PATH
	KeyFile    string `json:",omitempty"` // --tls-key, TEMPORAL_TLS_CLIENT_KEY_PATH (a path, not a secret)
	CAFile     string `json:",omitempty"` // --tls-ca, TEMPORAL_TLS_SERVER_CA_CERT_PATH
	ServerName string `json:",omitempty"` // --tls-server-name, TEMPORAL_TLS_SERVER_NAME
}

const (
	envAPIKeyFile = "ROUNDHOUSE_TEMPORAL_API_KEY_FILE"
	dialTimeout   = 10 * time.Second
)

// FromEnv reads the Temporal settings (ROUNDHOUSE_TEMPORAL, else
// TEMPORAL_ADDRESS or the config profile, else 127.0.0.1:7233; likewise
// ROUNDHOUSE_NAMESPACE/TEMPORAL_NAMESPACE, default "default"; TLS and API
// key as in the SDK; ROUNDHOUSE_TEMPORAL_API_KEY_FILE), the payload key file
// and the S3 settings (store.FromEnv). A broken config file is reported by
// Temporal, at start-up.
func FromEnv() Endpoints {
	e := Endpoints{Temporal: "127.0.0.1:7233", Namespace: "default", S3: store.FromEnv(),
		PayloadKeyFile: os.Getenv(codec.EnvKeyFile), APIKeyFile: os.Getenv(envAPIKeyFile)}
	prof, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{})
	if err != nil {
		e.loadErr = fmt.Errorf("Temporal client config (TEMPORAL_CONFIG_FILE/TEMPORAL_PROFILE): %w", err)
	}
	e.profile = prof
	if prof.Address != "" {
		e.Temporal = prof.Address
	}
	if prof.Namespace != "" {
		e.Namespace = prof.Namespace
	}
	e.APIKey = prof.APIKey
	if t := prof.TLS; t != nil {
		e.TLS = TLS{CertFile: t.ClientCertPath, KeyFile: t.ClientKeyPath, CAFile: t.ServerCACertPath, ServerName: t.ServerName}
		// Explicit only when said so: an empty TEMPORAL_TLS_* variable
		// alone would otherwise turn TLS on.
		if v, ok := os.LookupEnv("TEMPORAL_TLS"); t.Disabled || (ok && (v == "1" || strings.EqualFold(v, "true"))) {
			on := !t.Disabled
			e.TLS.Enabled = &on
		}
	}
	if v := os.Getenv("ROUNDHOUSE_TEMPORAL"); v != "" {
		e.Temporal = v
	}
	if v := os.Getenv("ROUNDHOUSE_NAMESPACE"); v != "" {
		e.Namespace = v
	}
	return e
}

// Env is the environment that makes FromEnv return e in a child process
// (a worker or starter started by the dev stack or a test). Every setting
// is explicit, so the child ignores what the parent's own environment or
// config file says (a Temporal Cloud key in a developer's shell never goes
// to the dev server). It holds secrets: give it to a process, never print it.
func (e Endpoints) Env() []string {
	c := e.S3
	ak, sk, tok := c.StaticKeys()
	env := []string{
		"ROUNDHOUSE_TEMPORAL=" + e.Temporal, "ROUNDHOUSE_NAMESPACE=" + e.Namespace,
		"TEMPORAL_TLS=" + strconv.FormatBool(e.tlsEnabled()),
		"TEMPORAL_TLS_CLIENT_CERT_PATH=" + e.TLS.CertFile, "TEMPORAL_TLS_CLIENT_KEY_PATH=" + e.TLS.KeyFile,
		"TEMPORAL_TLS_SERVER_CA_CERT_PATH=" + e.TLS.CAFile, "TEMPORAL_TLS_SERVER_NAME=" + e.TLS.ServerName,
		"TEMPORAL_API_KEY=" + e.APIKey, envAPIKeyFile + "=" + e.APIKeyFile,
		codec.EnvKeyFile + "=" + e.PayloadKeyFile,
		"ROUNDHOUSE_S3_ENDPOINT=" + c.Endpoint, "ROUNDHOUSE_BUCKET=" + c.Bucket,
		"AWS_ACCESS_KEY_ID=" + ak, "AWS_SECRET_ACCESS_KEY=" + sk, "AWS_SESSION_TOKEN=" + tok,
	}
	if c.Region != "" {
		env = append(env, "AWS_REGION="+c.Region)
	}
	if c.PathStyle != nil {
		env = append(env, "ROUNDHOUSE_S3_PATH_STYLE="+strconv.FormatBool(*c.PathStyle))
	}
	return env
}

// tlsEnabled resolves TLS.Enabled.
func (e Endpoints) tlsEnabled() bool {
	if e.TLS.Enabled != nil {
		return *e.TLS.Enabled
	}
	t := e.TLS
	pt := e.profile.TLS
	inline := pt != nil && (len(pt.ClientCertData) > 0 || len(pt.ServerCACertData) > 0)
	return e.APIKey != "" || e.APIKeyFile != "" || t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" || t.ServerName != "" || inline
}

// String describes e without secrets.
func (e Endpoints) String() string {
	auth := "plaintext"
	if e.tlsEnabled() {
		auth = "TLS"
		if e.TLS.CertFile != "" {
			auth = "mTLS cert " + e.TLS.CertFile
		}
		if e.TLS.CAFile != "" {
			auth += ", CA " + e.TLS.CAFile
		}
	}
	switch {
	case e.APIKeyFile != "":
		auth += ", API key from " + e.APIKeyFile
	case e.APIKey != "":
		auth += ", API key set"
	}
	enc := ""
	if e.PayloadKeyFile != "" {
		enc = ", payloads encrypted"
	}
	return fmt.Sprintf("Temporal %s namespace %s (%s%s); %s", e.Temporal, e.Namespace, auth, enc, e.S3)
}

// GoString keeps secrets out of %#v.
func (e Endpoints) GoString() string { return "connect.Endpoints{" + e.String() + "}" }

// LogValue keeps secrets out of slog output.
func (e Endpoints) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("temporal", e.Temporal), slog.String("namespace", e.Namespace),
		slog.Bool("tls", e.tlsEnabled()), slog.String("tls_cert", e.TLS.CertFile),
		slog.String("tls_ca", e.TLS.CAFile), slog.String("tls_server_name", e.TLS.ServerName),
		slog.Bool("api_key", e.APIKey != "" || e.APIKeyFile != ""), slog.String("api_key_file", e.APIKeyFile),
		slog.String("payload_key_file", e.PayloadKeyFile), slog.Any("s3", e.S3))
}

// ClientOptions builds the Temporal client options: files are read and
// checked here, so a missing certificate or key fails before any dial.
func (e Endpoints) ClientOptions() (client.Options, error) {
	if e.loadErr != nil {
		return client.Options{}, e.loadErr
	}
	p := e.profile
	p.Address, p.Namespace = e.Temporal, e.Namespace
	p.Codec = nil // payload encryption is in-process (PayloadKeyFile), not a remote codec
	p.APIKey = e.APIKey
	if e.APIKeyFile != "" {
		b, err := os.ReadFile(e.APIKeyFile)
		if err != nil {
			return client.Options{}, fmt.Errorf("--api-key-file %s: %w: pass a file holding the Temporal API key (or set TEMPORAL_API_KEY)", e.APIKeyFile, unwrapPath(err))
		}
		p.APIKey = strings.TrimSpace(string(b))
		if p.APIKey == "" {
			return client.Options{}, fmt.Errorf("--api-key-file %s is empty: it should hold the Temporal API key", e.APIKeyFile)
		}
	}
	if !e.tlsEnabled() {
		p.TLS = &envconfig.ClientConfigTLS{Disabled: true}
	} else {
		t, err := e.tlsConfig()
		if err != nil {
			return client.Options{}, err
		}
		p.TLS = t
	}
	opts, err := p.ToClientOptions(envconfig.ToClientOptionsRequest{})
	if err != nil {
		return client.Options{}, fmt.Errorf("Temporal client options: %w", err)
	}
	dc, err := e.DataConverter()
	if err != nil {
		return client.Options{}, err
	}
	opts.DataConverter = dc
	return opts, nil
}

// tlsConfig checks the TLS files and returns the SDK's TLS settings.
func (e Endpoints) tlsConfig() (*envconfig.ClientConfigTLS, error) {
	t := &envconfig.ClientConfigTLS{ClientCertPath: e.TLS.CertFile, ClientKeyPath: e.TLS.KeyFile,
		ServerCACertPath: e.TLS.CAFile, ServerName: e.TLS.ServerName}
	if pt := e.profile.TLS; pt != nil {
		t.DisableHostVerification = pt.DisableHostVerification
		// Inline PEM data from TEMPORAL_TLS_*_DATA, unless a path replaced it.
		if t.ClientCertPath == "" && t.ClientKeyPath == "" {
			t.ClientCertData, t.ClientKeyData = pt.ClientCertData, pt.ClientKeyData
		}
		if t.ServerCACertPath == "" {
			t.ServerCACertData = pt.ServerCACertData
		}
	}
	read := func(flag, path, env, what string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w: pass the %s (or set %s)", flag, path, unwrapPath(err), what, env)
		}
		return b, nil
	}
	switch {
	case e.TLS.CertFile != "" && e.TLS.KeyFile == "":
		return nil, fmt.Errorf("--tls-cert %s without --tls-key: mTLS needs the client certificate's private key too (TEMPORAL_TLS_CLIENT_KEY_PATH)", e.TLS.CertFile)
	case e.TLS.KeyFile != "" && e.TLS.CertFile == "":
		return nil, fmt.Errorf("--tls-key %s without --tls-cert: mTLS needs the client certificate too (TEMPORAL_TLS_CLIENT_CERT_PATH)", e.TLS.KeyFile)
	case e.TLS.CertFile != "":
		cert, err := read("--tls-cert", e.TLS.CertFile, "TEMPORAL_TLS_CLIENT_CERT_PATH", "client certificate PEM")
		if err != nil {
			return nil, err
		}
		key, err := read("--tls-key", e.TLS.KeyFile, "TEMPORAL_TLS_CLIENT_KEY_PATH", "client private key PEM")
		if err != nil {
			return nil, err
		}
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			// The error never quotes the key.
			return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: not a PEM certificate and its matching private key: %w", e.TLS.CertFile, e.TLS.KeyFile, err)
		}
	}
	if e.TLS.CAFile != "" {
		ca, err := read("--tls-ca", e.TLS.CAFile, "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "PEM of the CA that signed the server's certificate")
		if err != nil {
			return nil, err
		}
		if !x509.NewCertPool().AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it: pass the CA certificate that signed the server's certificate", e.TLS.CAFile)
		}
	}
	return t, nil
}

// unwrapPath drops the *PathError's repetition of the path.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// DataConverter is the SDK's default converter, wrapped with the payload
// codec when PayloadKeyFile is set. Code that decodes payloads it read
// from history itself (not through the client) should use this one.
func (e Endpoints) DataConverter() (converter.DataConverter, error) {
	if e.PayloadKeyFile == "" {
		return converter.GetDefaultDataConverter(), nil
	}
	c, err := codec.LoadFile(e.PayloadKeyFile)
	if err != nil {
		return nil, err
	}
	return c.DataConverter(), nil
}

// Temporal dials the server and checks it answers within 10 seconds.
func Temporal(ctx context.Context, e Endpoints, logger tlog.Logger) (client.Client, error) {
	opts, err := e.ClientOptions()
	if err != nil {
		return nil, err
	}
	if e.TLS.Enabled != nil && !*e.TLS.Enabled && opts.Credentials != nil && logger != nil {
		logger.Warn("Temporal API key sent without TLS (TLS explicitly disabled)", "temporal", e.Temporal)
	}
	// One trace follows a round from the starter through workflows and
	// activities; spans go to the global OpenTelemetry provider (a no-op
	// until one is configured).
	tracer, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{})
	if err != nil {
		return nil, fmt.Errorf("tracing interceptor: %w", err)
	}
	opts.Logger = logger
	opts.Interceptors = append(opts.Interceptors, interceptor.ClientInterceptor(tracer))
	// The SDK's own metrics (task slots, schedule-to-start latency, polls)
	// go to the same provider; a failing instrument is logged, not fatal
	// (the handler's default is to panic).
	opts.MetricsHandler = temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		OnError: func(err error) { logger.Warn("Temporal SDK metric not recorded", "error", err) }})
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, dialError(e, err)
	}
	return c, nil
}

// dialError says what to fix: TLS trouble names the CA and certificate
// files, anything else points at the dev stack and --temporal.
func dialError(e Endpoints, err error) error {
	msg := err.Error()
	ca := "the system's trusted CAs"
	if e.TLS.CAFile != "" {
		ca = "the CA in --tls-ca " + e.TLS.CAFile
	}
	tlsOn := e.tlsEnabled()
	hint := ""
	switch {
	case !tlsOn && (strings.Contains(msg, "frame too large") || strings.Contains(msg, "server preface")):
		hint = "the server seems to require TLS: pass --tls (and --tls-ca for a private CA), or set TEMPORAL_TLS=true"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		hint = "TLS: the server does not speak TLS: drop --tls (TEMPORAL_TLS=false)"
	case strings.Contains(msg, "signed by unknown authority"):
		hint = "TLS: the server's certificate is not signed by " + ca + ": pass the CA that signed it with --tls-ca"
	case strings.Contains(msg, "certificate is valid for") || strings.Contains(msg, "doesn't contain any IP SANs"):
		hint = "TLS: the server's certificate does not name this address: pass --tls-server-name with a name it has"
	case strings.Contains(msg, "certificate required") && e.TLS.CertFile == "":
		hint = "TLS: the server requires a client certificate (mTLS): pass --tls-cert and --tls-key"
	case strings.Contains(msg, "certificate required"):
		// Go's client sends a certificate only if the server accepts its issuer.
		hint = "TLS: the server requires a client certificate signed by a CA it trusts, and --tls-cert " + e.TLS.CertFile + " is not"
	case strings.Contains(msg, "bad certificate") || strings.Contains(msg, "unknown certificate authority") || strings.Contains(msg, "unknown certificate"):
		hint = "TLS: the server rejected the client certificate --tls-cert " + e.TLS.CertFile + ": it is not signed by a CA the server trusts"
	case tlsOn && (strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF")):
		// With TLS 1.3 the server checks the client certificate after the
		// client's side of the handshake is done: a rejection shows as a
		// closed connection, not as an alert.
		if e.TLS.CertFile == "" {
			hint = "TLS: the server closed the connection after the handshake: it may require a client certificate (mTLS): pass --tls-cert and --tls-key"
		} else {
			hint = "TLS: the server closed the connection after the handshake: it may reject the client certificate --tls-cert " + e.TLS.CertFile + " (not signed by a CA it trusts)"
		}
	case strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:") || strings.Contains(msg, "handshake"):
		hint = "TLS handshake failed (server verified against " + ca + ")"
	case strings.Contains(msg, "Unauthenticated") || strings.Contains(msg, "PermissionDenied") || strings.Contains(msg, "Request unauthorized"):
		hint = "the server rejected the credentials: check TEMPORAL_API_KEY / --api-key-file, the client certificate and --namespace " + e.Namespace
	}
	if hint != "" {
		return fmt.Errorf("Temporal at %s: %s: %w", e.Temporal, hint, err)
	}
	return fmt.Errorf("Temporal at %s is not reachable (start the dev stack with `go tool task up`, or pass --temporal host:port): %w", e.Temporal, err)
}

// Store opens the bucket and checks, before any work is scheduled, that it
// exists and (unless e.ReadOnly) takes writes and deletes.
func Store(ctx context.Context, e Endpoints) (*store.Store, error) {
	s, err := store.New(ctx, e.S3)
	if err != nil {
		return nil, err
	}
	if err := s.Check(ctx); err != nil {
		return nil, bucketError(e.S3, err)
	}
	if !e.ReadOnly {
		if err := s.CheckWritable(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Both connects to Temporal and opens the bucket, the pair most of the
// starter's commands need; the caller closes the client.
func Both(ctx context.Context, e Endpoints, logger tlog.Logger) (client.Client, *store.Store, error) {
	c, err := Temporal(ctx, e, logger)
	if err != nil {
		return nil, nil, err
	}
	s, err := Store(ctx, e)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, s, nil
}

// WorkflowURL is workflow id's page in the Temporal UI: ROUNDHOUSE_UI, by
// default the dev server's http://127.0.0.1:8233.
func (e Endpoints) WorkflowURL(id string) string {
	ui := os.Getenv("ROUNDHOUSE_UI")
	if ui == "" {
		ui = "http://127.0.0.1:8233"
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimRight(ui, "/"), e.Namespace, id)
}

// bucketError replaces Check's "not reachable" when the server did answer:
// 404 is a missing bucket, 403 credentials that may not use it.
func bucketError(c store.Config, err error) error {
	var re *awshttp.ResponseError
	if !errors.As(err, &re) {
		return err
	}
	cause := errors.Unwrap(err)
	if cause == nil {
		cause = err
	}
	where := c.Endpoint
	if where == "" {
		where = "AWS"
	}
	switch re.HTTPStatusCode() {
	case 404:
		return fmt.Errorf("S3 bucket %q does not exist at %s: create it, or pass --bucket / ROUNDHOUSE_BUCKET: %w", c.Bucket, where, cause)
	case 301, 400:
		return fmt.Errorf("S3 bucket %q at %s: the request was refused (often a bucket in another region: set AWS_REGION): %w", c.Bucket, where, cause)
	case 401, 403:
		return fmt.Errorf("S3 bucket %q at %s: access denied: check the credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID, the instance or pod role) and the bucket policy: %w", c.Bucket, where, cause)
	}
	return err
}

// secretEnv are the variables that carry Roundhouse's own credentials.
var secretEnv = []string{"TEMPORAL_API_KEY", "TEMPORAL_TLS_CLIENT_KEY_DATA", "TEMPORAL_CODEC_AUTH",
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}

// UnsetSecrets removes Roundhouse's credentials from this process's
// environment once its clients hold them: harness commands (episodes,
// services, the trainer) inherit the environment and get no keys of ours.
func UnsetSecrets() {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(secretEnv, k) || strings.HasPrefix(k, "TEMPORAL_GRPC_META_") {
			os.Unsetenv(k)
		}
	}
}

// ScrubEnv drops Roundhouse's credentials (Temporal API key, inline client
// key, gRPC metadata, static S3 keys) from an environment, for processes
// that should not hold them, such as harness commands (os.Environ() of a
// worker otherwise hands them its keys).
func ScrubEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(secretEnv, k) || strings.HasPrefix(k, "TEMPORAL_GRPC_META_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
