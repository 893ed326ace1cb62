package connect

import (
	"flag"
	"strconv"
)

// AddFlags defines the security and addressing flags the worker and the
// starter share, with e's values (from FromEnv) as defaults: --namespace,
// --tls, --tls-cert, --tls-key, --tls-ca, --tls-server-name,
// --api-key-file, --payload-key-file and --s3-path-style. The starter adds
// them to its cobra flags with pflag's AddGoFlagSet.
func AddFlags(fs *flag.FlagSet, e *Endpoints) {
	fs.StringVar(&e.Namespace, "namespace", e.Namespace, "Temporal namespace (env ROUNDHOUSE_NAMESPACE, TEMPORAL_NAMESPACE)")
	fs.Var(optBool{&e.TLS.Enabled}, "tls", "TLS to Temporal; default: on when an API key, a client certificate or a CA is given (env TEMPORAL_TLS)")
	fs.StringVar(&e.TLS.CertFile, "tls-cert", e.TLS.CertFile, "client certificate PEM for mTLS, with --tls-key (env TEMPORAL_TLS_CLIENT_CERT_PATH)")
	fs.StringVar(&e.TLS.KeyFile, "tls-key", e.TLS.KeyFile, "client private key PEM for mTLS (env TEMPORAL_TLS_CLIENT_KEY_PATH)")
	fs.StringVar(&e.TLS.CAFile, "tls-ca", e.TLS.CAFile, "CA certificate PEM that signed the server's certificate, for a private CA (env TEMPORAL_TLS_SERVER_CA_CERT_PATH)")
	fs.StringVar(&e.TLS.ServerName, "tls-server-name", e.TLS.ServerName, "server name to verify the certificate against (env TEMPORAL_TLS_SERVER_NAME)")
	fs.StringVar(&e.APIKeyFile, "api-key-file", e.APIKeyFile, "file holding the Temporal API key; implies TLS (env TEMPORAL_API_KEY holds the key itself; no flag does, so it stays out of shell history and ps)")
	fs.StringVar(&e.PayloadKeyFile, "payload-key-file", e.PayloadKeyFile, "AES-256 key file that encrypts workflow payloads (env ROUNDHOUSE_PAYLOAD_KEY_FILE)")
	fs.Var(optBool{&e.S3.PathStyle}, "s3-path-style", "path-style S3 addressing (endpoint/bucket); default: on with --s3-endpoint, off for AWS (env ROUNDHOUSE_S3_PATH_STYLE)")
}

// optBool is a boolean flag whose unset state means "decide from the other
// settings": --tls, --tls=false, or nothing.
type optBool struct{ p **bool }

func (b optBool) String() string {
	if b.p == nil || *b.p == nil {
		return "auto"
	}
	return strconv.FormatBool(**b.p)
}

func (b optBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.p = &v
	return nil
}

// IsBoolFlag lets --tls stand alone (flag and pflag's AddGoFlagSet both
// honour it).
func (optBool) IsBoolFlag() bool { return true }

// Type makes pflag show it as a boolean flag.
func (optBool) Type() string { return "bool" }
