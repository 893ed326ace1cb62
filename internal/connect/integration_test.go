package connect_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/roundhouse-rl/roundhouse/internal/codec"
	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/testkit/itest"
)

func echoWorkflow(_ workflow.Context, in string) (string, error) { return "echo: " + in, nil }

// End to end against the real Temporal dev server behind an mTLS front
// (the dev server itself cannot serve TLS): the client presents its
// certificate and verifies the server's against a private CA, a worker runs
// a workflow through it with payload encryption on, and the server's
// history holds only ciphertext. A client without the key cannot read it.
func TestMTLSAndEncryptedPayloadsAgainstTemporal(t *testing.T) {
	stack := itest.Start(t)
	cleanEnv(t)
	dir := t.TempDir()
	serverCA, clientCA := newCA(t, "server-ca"), newCA(t, "client-ca")
	certPEM, keyPEM := clientCA.leaf(t, "roundhouse-worker", false)
	front := startTLSFront(t, serverCA, clientCA, stack.Endpoints.Temporal)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	e := connect.Endpoints{Temporal: front.addr(), Namespace: "default", TLS: connect.TLS{
		CertFile: write(t, dir, "client.pem", certPEM), KeyFile: write(t, dir, "client.key", keyPEM),
		CAFile: write(t, dir, "ca.pem", serverCA.pem), ServerName: "temporal.test"},
		PayloadKeyFile: write(t, dir, "payload.key", []byte(base64.StdEncoding.EncodeToString(key)+"\n"))}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := connect.Temporal(ctx, e, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if names := front.clientNames(); !slices.Contains(names, "roundhouse-worker") {
		t.Fatalf("the front saw client certificates %v, want roundhouse-worker", names)
	}
	w := worker.New(c, "connect-test", worker.Options{})
	w.RegisterWorkflow(echoWorkflow)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const secret = "plan for the red cube"
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "connect-echo", TaskQueue: "connect-test",
		WorkflowExecutionTimeout: time.Minute}, echoWorkflow, secret)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := run.Get(ctx, &got); err != nil || got != "echo: "+secret {
		t.Fatalf("result %q, %v", got, err)
	}

	// What the server stored, read without TLS or key.
	plain, err := connect.Temporal(ctx, stack.Endpoints, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	it := plain.GetWorkflowHistory(ctx, "connect-echo", run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	payloads := 0
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range append(ev.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads(),
			ev.GetWorkflowExecutionCompletedEventAttributes().GetResult().GetPayloads()...) {
			payloads++
			if enc := string(p.GetMetadata()["encoding"]); enc != codec.Encoding {
				t.Errorf("history payload encoding %q, want %q", enc, codec.Encoding)
			}
			if bytes.Contains(p.GetData(), []byte("red cube")) {
				t.Error("history holds the plaintext")
			}
		}
	}
	if payloads != 2 {
		t.Fatalf("saw %d input/result payloads, want 2", payloads)
	}
	err = plain.GetWorkflow(ctx, "connect-echo", run.GetRunID()).Get(ctx, &got)
	t.Logf("without the key: %v", err)
	if err == nil {
		t.Fatal("a client without the key decoded the result")
	}
}

// The bucket checks at start-up: a writable bucket passes and leaves no
// probe behind; a missing bucket and wrong credentials fail with the fix.
func TestStoreChecksAgainstVersitygw(t *testing.T) {
	stack := itest.Start(t)
	ctx := context.Background()
	if _, err := connect.Store(ctx, stack.Endpoints); err != nil {
		t.Fatal(err)
	}
	left, err := stack.Store.List(ctx, ".roundhouse-probe/")
	if err != nil || len(left) != 0 {
		t.Fatalf("probe objects left: %v %v", left, err)
	}
	e := stack.Endpoints
	e.S3.Bucket = "no-such-bucket"
	_, err = connect.Store(ctx, e)
	t.Logf("missing bucket: %v", err)
	if err == nil || !strings.Contains(err.Error(), `"no-such-bucket" does not exist`) || !strings.Contains(err.Error(), "--bucket") {
		t.Errorf("missing bucket: %v", err)
	}
	e = stack.Endpoints
	e.S3.SecretKey = "wrong-secret"
	_, err = connect.Store(ctx, e)
	t.Logf("wrong secret: %v", err)
	if err == nil || !strings.Contains(err.Error(), "access denied") || strings.Contains(err.Error(), "wrong-secret") {
		t.Errorf("wrong secret: %v", err)
	}
}
