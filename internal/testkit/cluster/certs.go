package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Certs are the cluster's certificate files, made at start: one CA signs
// every certificate, and the frontend requires a client certificate it
// signed (mTLS), as does every service of the others.
type Certs struct {
	CA string
	// Internode is the services' own certificate, server and client: each
	// presents it to the others, and the system worker to the frontend.
	Internode, InternodeKey string
	// Frontend is what the frontend presents to clients.
	Frontend, FrontendKey string
	// Client is the certificate of Roundhouse's workers, starter and the
	// UI server.
	Client, ClientKey string
	// Stranger is a client certificate from another CA: the frontend must
	// refuse it (the bad-input case "a wrong certificate").
	Stranger, StrangerKey string
}

// ServerName is the name every server certificate carries and clients
// check.
const ServerName = "temporal.roundhouse.internal"

// MakeCerts writes a fresh CA and the certificates into dir; ips are the
// addresses the services listen on, also in the server certificates.
func MakeCerts(dir string, ips []string) (Certs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Certs{}, fmt.Errorf("certificates folder: %w", err)
	}
	c := Certs{CA: filepath.Join(dir, "ca.pem")}
	ca, caKey, err := newCA("Roundhouse rehearsal CA", c.CA)
	if err != nil {
		return Certs{}, err
	}
	var addrs []net.IP
	for _, ip := range ips {
		if a := net.ParseIP(ip); a != nil {
			addrs = append(addrs, a)
		}
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, l := range []struct {
		name      string
		cert, key *string
		usage     []x509.ExtKeyUsage
		server    bool
	}{
		{"internode", &c.Internode, &c.InternodeKey, both, true},
		{"frontend", &c.Frontend, &c.FrontendKey, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, true},
		{"client", &c.Client, &c.ClientKey, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, false},
	} {
		*l.cert, *l.key = filepath.Join(dir, l.name+".pem"), filepath.Join(dir, l.name+"-key.pem")
		var names []string
		var ipSANs []net.IP
		if l.server {
			names, ipSANs = []string{ServerName, "localhost"}, addrs
		}
		if err := leaf(l.name, names, ipSANs, l.usage, ca, caKey, *l.cert, *l.key); err != nil {
			return Certs{}, err
		}
	}
	other, otherKey, err := newCA("another CA", filepath.Join(dir, "stranger-ca.pem"))
	if err != nil {
		return Certs{}, err
	}
	c.Stranger, c.StrangerKey = filepath.Join(dir, "stranger.pem"), filepath.Join(dir, "stranger-key.pem")
	if err := leaf("stranger", nil, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, other, otherKey, c.Stranger, c.StrangerKey); err != nil {
		return Certs{}, err
	}
	return c, nil
}

func newCA(name, path string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return ca, key, writePEM(path, "CERTIFICATE", der)
}

func leaf(name string, dns []string, ips []net.IP, usage []x509.ExtKeyUsage, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("%s key: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(0, 3, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage, DNSNames: dns, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("%s certificate: %w", name, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("%s key: %w", name, err)
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyPath, "EC PRIVATE KEY", kder)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
