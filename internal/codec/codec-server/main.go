// Command codec-server decrypts Roundhouse's encrypted payloads for the
// Temporal UI and CLI (the codec-server protocol), with the key file the
// workers use:
//
//	ROUNDHOUSE_PAYLOAD_KEY_FILE=key go run ./internal/codec/codec-server
//
// then set the UI's codec endpoint to http://127.0.0.1:8234 (UI: Settings →
// Codec Server), or pass `--codec-endpoint http://127.0.0.1:8234` to the
// temporal CLI. It binds loopback: whoever reaches it can decrypt.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/roundhouse-rl/roundhouse/internal/codec"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8234", "host:port to serve on (loopback unless you add authentication in front)")
	origin := flag.String("ui-origin", "http://127.0.0.1:8233", "origin of the Temporal UI allowed to call this server from the browser")
	keyFile := flag.String("key-file", os.Getenv(codec.EnvKeyFile), "the payload key file (env "+codec.EnvKeyFile+")")
	flag.Parse()
	if err := run(*listen, *origin, *keyFile); err != nil {
		slog.Error("codec-server", "error", err)
		os.Exit(1)
	}
}

func run(listen, origin, keyFile string) error {
	if keyFile == "" {
		return errors.New("no key: pass --key-file or set " + codec.EnvKeyFile)
	}
	c, err := codec.LoadFile(keyFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: codec.Handler(c, origin), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	slog.Info("codec-server", "listen", ln.Addr().String(), "key_id", c.KeyID(), "ui_origin", origin)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
