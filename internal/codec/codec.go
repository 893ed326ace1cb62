// Package codec encrypts Temporal payloads (workflow inputs, results,
// activity arguments, heartbeats, signals, queries) with AES-256-GCM, so the
// Temporal server and anyone who reads its history see only ciphertext.
//
// It is a converter.PayloadCodec: connect.Temporal wraps the client's data
// converter with it when ROUNDHOUSE_PAYLOAD_KEY_FILE is set, and the worker
// and starter then encrypt and decrypt transparently. Payloads without the
// encryption marker pass through undecoded, so turning encryption on does not
// break workflows whose history already holds plain payloads.
package codec

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

const (
	// Encoding is the metadata "encoding" of an encrypted payload; the
	// Temporal UI shows it for payloads it cannot decode.
	Encoding = "binary/encrypted"
	// MetadataKeyID names the key that encrypted the payload, so a payload
	// finds its key after rotation.
	MetadataKeyID = "encryption-key-id"
	// EnvKeyFile is the environment variable that holds the key file's path.
	EnvKeyFile = "ROUNDHOUSE_PAYLOAD_KEY_FILE"
	keySize    = 32 // AES-256
)

// Codec encrypts with its first key and decrypts with any of its keys.
type Codec struct {
	encrypt *key
	keys    map[string]*key
	source  string // where the keys came from, for error messages
}

type key struct {
	id   string
	aead cipher.AEAD
}

var _ converter.PayloadCodec = (*Codec)(nil)

// KeyID is a key's public name: the first 8 bytes of its SHA-256, in hex.
// It identifies the key without revealing anything about it.
func KeyID(k []byte) string {
	sum := sha256.Sum256(k)
	return hex.EncodeToString(sum[:8])
}

// New builds a codec from 32-byte keys; keys[0] encrypts, all decrypt.
func New(keys ...[]byte) (*Codec, error) {
	if len(keys) == 0 {
		return nil, errors.New("payload codec: no key")
	}
	c := &Codec{keys: make(map[string]*key), source: "the configured keys"}
	for i, k := range keys {
		if len(k) != keySize {
			return nil, fmt.Errorf("payload codec: key %d is %d bytes, want %d (AES-256)", i+1, len(k), keySize)
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, fmt.Errorf("payload codec: key %d: %w", i+1, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("payload codec: key %d: %w", i+1, err)
		}
		kk := &key{id: KeyID(k), aead: aead}
		if i == 0 {
			c.encrypt = kk
		}
		c.keys[kk.id] = kk
	}
	return c, nil
}

// LoadFile reads a key file: either exactly 32 raw bytes, or text with one
// base64 key (of 32 bytes) per line, '#' comments and blank lines ignored.
// The first key encrypts; later ones only decrypt, which is how keys rotate:
// put the new key first and keep the old one until no open workflow's
// history holds payloads it encrypted.
func LoadFile(path string) (*Codec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: pass a file of 32 random bytes, e.g. `head -c 32 /dev/urandom | base64 > key`", EnvKeyFile, path, err)
	}
	keys, err := parseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", EnvKeyFile, path, err)
	}
	c, err := New(keys...)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", EnvKeyFile, path, err)
	}
	c.source = EnvKeyFile + " " + path
	return c, nil
}

func parseKeys(b []byte) ([][]byte, error) {
	// A raw key is binary; 32 bytes of base64 text would decode to 24.
	if len(b) == keySize {
		if _, err := base64.StdEncoding.DecodeString(string(b)); err != nil {
			return [][]byte{b}, nil
		}
	}
	var keys [][]byte
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			k, err = base64.RawStdEncoding.DecodeString(line)
		}
		if err != nil {
			// Never echo the line: it may be a key with a typo.
			return nil, fmt.Errorf("line %d is not base64 (want one base64 key of 32 bytes per line, or 32 raw bytes)", i+1)
		}
		if len(k) != keySize {
			return nil, fmt.Errorf("line %d decodes to %d bytes, want %d (AES-256)", i+1, len(k), keySize)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no key in the file")
	}
	return keys, nil
}

// KeyID is the id of the key that encrypts.
func (c *Codec) KeyID() string { return c.encrypt.id }

// Encode encrypts each payload, whole (metadata included, so its encoding
// is hidden too), under a fresh random nonce; the key id is authenticated
// as additional data.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return payloads, fmt.Errorf("payload codec: encode: %w", err)
		}
		k := c.encrypt
		nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(plain)+k.aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return payloads, fmt.Errorf("payload codec: nonce: %w", err)
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				converter.MetadataEncoding: []byte(Encoding),
				MetadataKeyID:              []byte(k.id),
			},
			Data: k.aead.Seal(nonce, nonce, plain, []byte(k.id)),
		}
	}
	return out, nil
}

// Decode decrypts payloads this codec encrypted and passes any other
// through unchanged.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if !bytes.Equal(p.GetMetadata()[converter.MetadataEncoding], []byte(Encoding)) {
			out[i] = p
			continue
		}
		id := string(p.GetMetadata()[MetadataKeyID])
		k := c.keys[id]
		if k == nil {
			return payloads, fmt.Errorf("payload codec: payload was encrypted with key %q, which is not in %s (it holds %s): add that key to the file (keys after the first only decrypt)", id, c.source, c.ids())
		}
		ns := k.aead.NonceSize()
		if len(p.Data) < ns+k.aead.Overhead() {
			return payloads, fmt.Errorf("payload codec: encrypted payload (key %q) is truncated: %d bytes", id, len(p.Data))
		}
		plain, err := k.aead.Open(nil, p.Data[:ns], p.Data[ns:], []byte(id))
		if err != nil {
			return payloads, fmt.Errorf("payload codec: decrypt with key %q failed: the payload is corrupt or was altered: %w", id, err)
		}
		var dp commonpb.Payload
		if err := proto.Unmarshal(plain, &dp); err != nil {
			return payloads, fmt.Errorf("payload codec: decrypted payload (key %q) is not a payload: %w", id, err)
		}
		out[i] = &dp
	}
	return out, nil
}

func (c *Codec) ids() string {
	ids := make([]string, 0, len(c.keys))
	ids = append(ids, fmt.Sprintf("%q", c.encrypt.id))
	for id := range c.keys {
		if id != c.encrypt.id {
			ids = append(ids, fmt.Sprintf("%q", id))
		}
	}
	return strings.Join(ids, ", ")
}

// DataConverter wraps the SDK's default converter with c.
func (c *Codec) DataConverter() converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}
