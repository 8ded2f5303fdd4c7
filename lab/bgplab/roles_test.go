package bgplab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// httpdMain is the lab HTTP server (role httpd): it listens on
// $BGPLAB_LISTEN and answers every request 200 with "$BGPLAB_NAME\n", so a
// prober sees which node served it. It stops on SIGTERM.
func httpdMain() int {
	name, listen := os.Getenv("BGPLAB_NAME"), os.Getenv("BGPLAB_LISTEN")
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpd:", err)
		return 1
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Connection", "close")
			fmt.Fprintln(w, name)
		}),
		ReadHeaderTimeout: 2 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "httpd:", err)
		return 1
	}
	return 0
}

// probeMain is the lab prober (role probe): every $BGPLAB_INTERVAL it
// starts a TCP connect + HTTP GET of $BGPLAB_TARGET (no keep-alive, 200ms
// timeout), at most $BGPLAB_COUNT probes and for at most $BGPLAB_DURATION,
// and prints one line per probe: "UNIX_MS ok SERVER" or "UNIX_MS fail
// DETAIL". SIGTERM stops it after the probes in flight.
func probeMain() int {
	target := os.Getenv("BGPLAB_TARGET")
	interval, err1 := time.ParseDuration(os.Getenv("BGPLAB_INTERVAL"))
	duration, err2 := time.ParseDuration(os.Getenv("BGPLAB_DURATION"))
	count, err3 := strconv.Atoi(os.Getenv("BGPLAB_COUNT"))
	if err1 != nil || err2 != nil || err3 != nil || interval <= 0 || duration <= 0 || count <= 0 {
		fmt.Fprintln(os.Stderr, "probe: need BGPLAB_TARGET, BGPLAB_INTERVAL, BGPLAB_DURATION, BGPLAB_COUNT")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	const timeout = 200 * time.Millisecond
	client := &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:             nil,
			DisableKeepAlives: true,
			DialContext:       (&net.Dialer{Timeout: timeout}).DialContext,
		},
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; i < count; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
			if ctx.Err() != nil {
				break
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			line := probe(client, target)
			mu.Lock()
			out.WriteString(line)
			out.Flush()
			mu.Unlock()
		}()
	}
	wg.Wait()
	return 0
}

// probe does one GET and formats its result line.
func probe(client *http.Client, target string) string {
	start := time.Now()
	resp, err := client.Get("http://" + target + "/")
	if err != nil {
		return fmt.Sprintf("%d fail %s\n", start.UnixMilli(), oneLine(err.Error()))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
	if err != nil {
		return fmt.Sprintf("%d fail read: %s\n", start.UnixMilli(), oneLine(err.Error()))
	}
	f := strings.Fields(string(body))
	if resp.StatusCode != http.StatusOK || len(f) == 0 {
		return fmt.Sprintf("%d fail status %d body %q\n", start.UnixMilli(), resp.StatusCode, body)
	}
	return fmt.Sprintf("%d ok %s\n", start.UnixMilli(), f[0])
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// parseProbe parses one line of probeMain's output.
func parseProbe(line string) (probeResult, error) {
	f := strings.SplitN(strings.TrimSpace(line), " ", 3)
	if len(f) < 3 {
		return probeResult{}, fmt.Errorf("probe line %q: want UNIX_MS ok|fail DETAIL", line)
	}
	ms, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return probeResult{}, fmt.Errorf("probe line %q: %w", line, err)
	}
	r := probeResult{start: time.UnixMilli(ms)}
	switch f[1] {
	case "ok":
		r.ok, r.server = true, f[2]
	case "fail":
		r.detail = f[2]
	default:
		return probeResult{}, fmt.Errorf("probe line %q: want ok or fail, got %q", line, f[1])
	}
	return r, nil
}
