// Command httpd is the lab's stand-in for an apiserver: every path answers
// 200 with the node name (so a prober sees who served it), /readyz included.
// It exits on SIGTERM/SIGINT.
//
// /readyz can be made to flap, for health-check tests: its answers follow a
// pattern, one letter per request, repeated: 'u' answers 200, 'd' answers
// 503 ("ud": every other request fails; "udd": two of every three). The
// pattern is set with -readyz or at run time with
//
//	PUT /-/readyz?pattern=udd   (204; an empty pattern: always 200)
//
// which starts it from its first letter. GET /-/readyz reports the pattern
// and how many /readyz requests were answered and failed since it was set:
// "pattern=udd served=12 failed=8". Other paths are not affected, so a
// client probing the VIP is always answered.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	name := flag.String("name", "", "node name to answer with (required)")
	listen := flag.String("listen", ":6443", "listen address")
	readyz := flag.String("readyz", "", "pattern of /readyz answers, 'u' 200 and 'd' 503, repeated (empty: always 200)")
	flag.Parse()
	if *name == "" {
		fmt.Fprintln(os.Stderr, "httpd: -name is required")
		os.Exit(2)
	}
	rp := &readyzPattern{}
	if err := rp.set(*readyz); err != nil {
		fmt.Fprintln(os.Stderr, "httpd:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv := &http.Server{
		Addr:              *listen,
		ReadHeaderTimeout: 5 * time.Second,
		Handler:           handler(*name, rp),
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

// handler answers every path with name, /readyz following rp, and
// /-/readyz controls rp.
func handler(name string, rp *readyzPattern) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		switch r.URL.Path {
		case "/-/readyz":
			switch r.Method {
			case http.MethodPut:
				if err := rp.set(r.URL.Query().Get("pattern")); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			case http.MethodGet:
				fmt.Fprintln(w, rp.String())
			default:
				http.Error(w, "GET or PUT", http.StatusMethodNotAllowed)
			}
			return
		case "/readyz":
			if !rp.next() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}
		fmt.Fprintln(w, name)
	})
}

// readyzPattern is the sequence of /readyz answers.
type readyzPattern struct {
	mu      sync.Mutex
	pattern string
	served  int
	failed  int
}

// set replaces the pattern and starts it again from its first letter.
func (p *readyzPattern) set(s string) error {
	if strings.Trim(s, "ud") != "" {
		return fmt.Errorf("readyz pattern %q: only 'u' (200) and 'd' (503) allowed", s)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pattern, p.served, p.failed = s, 0, 0
	return nil
}

// next reports whether the next /readyz request answers 200, and counts it.
func (p *readyzPattern) next() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok := p.pattern == "" || p.pattern[p.served%len(p.pattern)] == 'u'
	p.served++
	if !ok {
		p.failed++
	}
	return ok
}

// String is what GET /-/readyz answers.
func (p *readyzPattern) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("pattern=%s served=%d failed=%d", p.pattern, p.served, p.failed)
}
