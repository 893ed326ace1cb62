// Command minimal-model serves the toy policy over OpenAI Chat Completions
// the way vLLM does (see package server):
//
//	minimal-model --weights harnesses/minimal/weights/w0/policy.json --listen 127.0.0.1:18100 --served-name toy
//
// It prints "minimal-model listening on http://HOST:PORT" once it accepts
// connections (port 0 picks a free one) and stops cleanly on SIGINT/SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/policy"
	"github.com/roundhouse-rl/roundhouse/harnesses/minimal/server"
)

func main() {
	weights := flag.String("weights", "", "policy.json to serve (required)")
	listen := flag.String("listen", "127.0.0.1:18100", "HOST:PORT to listen on")
	name := flag.String("served-name", "toy", "model name clients must ask for")
	flag.Parse()
	if err := run(*weights, *listen, *name); err != nil {
		log.Fatalf("minimal-model: %v", err)
	}
}

func run(weights, listen, name string) error {
	if weights == "" {
		return errors.New("--weights is required")
	}
	p, err := policy.Load(weights)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           server.New(p, name, weights).Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      120 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Printf("minimal-model listening on http://%s\n", ln.Addr())
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
