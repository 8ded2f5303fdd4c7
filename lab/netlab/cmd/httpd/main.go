// Command httpd is the lab's stand-in for an apiserver: every path answers
// 200 with the node name (so a prober sees who served it), /readyz included.
// It exits on SIGTERM/SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	name := flag.String("name", "", "node name to answer with (required)")
	listen := flag.String("listen", ":6443", "listen address")
	flag.Parse()
	if *name == "" {
		fmt.Fprintln(os.Stderr, "httpd: -name is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv := &http.Server{
		Addr:              *listen,
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintln(w, *name)
		}),
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "httpd:", err)
		os.Exit(1)
	}
}
