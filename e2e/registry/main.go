// Command registry is a small local OCI (Docker v2) registry for the e2e local
// cluster: go-containerregistry's pkg/registry with blobs kept on disk and
// manifests in memory. It listens on loopback only.
//
// Usage:
//
//	registry [--listen 127.0.0.1:0] [--blobs DIR] [--addr-file FILE] [--quiet]
//
// Once listening it writes the bound host:port to --addr-file (atomically, via a
// rename) so a parent process can learn a kernel-chosen port. SIGTERM or SIGINT
// shut it down cleanly (in-flight requests get a few seconds) and remove the
// addr file. Manifests do not survive a restart; blobs under --blobs do, so a
// re-push after a restart uploads only manifests.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "loopback `host:port` to listen on (port 0: any free port)")
	blobs := flag.String("blobs", "", "`dir`ectory for blobs on disk (default: in memory)")
	addrFile := flag.String("addr-file", "", "write the bound host:port to this `file` once listening")
	quiet := flag.Bool("quiet", false, "do not log each request")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "registry: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}

	logger := log.New(os.Stderr, "registry: ", log.LstdFlags)
	if err := run(logger, *listen, *blobs, *addrFile, *quiet); err != nil {
		logger.Printf("error: %v", err)
		os.Exit(1)
	}
}

// checkLoopback refuses listen addresses that are not loopback IPs (or "localhost").
func checkLoopback(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--listen %q: %w", addr, err)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("--listen %q: only loopback addresses are allowed (e.g. 127.0.0.1:0)", addr)
	}
	return net.JoinHostPort(ip.String(), port), nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func run(logger *log.Logger, listen, blobs, addrFile string, quiet bool) error {
	addr, err := checkLoopback(listen)
	if err != nil {
		return err
	}

	reqLog := logger
	if quiet {
		reqLog = log.New(io.Discard, "", 0)
	}
	opts := []registry.Option{registry.Logger(reqLog)}
	if blobs != "" {
		// The disk handler creates its temp files directly in dir, so it must exist.
		if err := os.MkdirAll(blobs, 0o755); err != nil {
			return fmt.Errorf("--blobs: %w", err)
		}
		opts = append(opts, registry.WithBlobHandler(registry.NewDiskBlobHandler(blobs)))
	}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	bound := ln.Addr().String()

	srv := &http.Server{
		Handler:           registry.New(opts...),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          logger,
	}

	if addrFile != "" {
		if err := writeFileAtomic(addrFile, []byte(bound+"\n")); err != nil {
			ln.Close()
			return fmt.Errorf("--addr-file: %w", err)
		}
		defer os.Remove(addrFile)
	}
	where := "memory"
	if blobs != "" {
		where = blobs
	}
	logger.Printf("listening on %s (blobs: %s, manifests: memory)", bound, where)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Printf("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Printf("stopped")
	return nil
}
