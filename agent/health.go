package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// healthResult is one VIP's health verdict after rise/fall smoothing.
type healthResult struct {
	VIP     string
	Healthy bool
	Err     error         // last check error, nil when it passed
	Latency time.Duration // of the last check
}

// probeFunc runs one check; nil means healthy.
type probeFunc func(ctx context.Context) error

// riseFall smooths check outcomes: rise successes in a row make a node
// healthy, fall failures in a row make it unhealthy. It starts unhealthy, so
// a node does not claim a VIP before its service answered.
type riseFall struct {
	rise, fall int
	healthy    bool
	okRun      int
	failRun    int
}

// observe records one outcome and reports whether the verdict changed.
func (r *riseFall) observe(ok bool) (changed bool) {
	if ok {
		r.okRun++
		r.failRun = 0
		if !r.healthy && r.okRun >= r.rise {
			r.healthy = true
			return true
		}
		return false
	}
	r.failRun++
	r.okRun = 0
	if r.healthy && r.failRun >= r.fall {
		r.healthy = false
		return true
	}
	return false
}

// newProbe builds the check for a health configuration.
func newProbe(h *HealthConfig) (probeFunc, error) {
	if len(h.Command) > 0 {
		argv := append([]string(nil), h.Command...)
		return func(ctx context.Context) error {
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("health command %s: %w: %s", argv[0], err, truncate(string(out), 200))
			}
			return nil
		}, nil
	}
	tlsConf := &tls.Config{InsecureSkipVerify: h.InsecureSkipVerify} //nolint:gosec // opt-in, documented
	if h.CAFile != "" {
		pem, err := os.ReadFile(h.CAFile)
		if err != nil {
			return nil, fmt.Errorf("health ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("health ca_file %s: no PEM certificates", h.CAFile)
		}
		tlsConf.RootCAs = pool
	}
	// Checks reuse one kept-alive connection: a TCP and TLS handshake
	// every interval was most of an idle node's CPU. A server that dies
	// or restarts closes it, and the next check dials afresh.
	client := &http.Client{
		Transport: &http.Transport{
			TLSClientConfig:     tlsConf,
			Proxy:               nil,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     max(3*h.interval, 30*time.Second),
		},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	url := h.URL
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("health %s: %w", url, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("health %s: %w", url, err)
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Errorf("health %s: status %d", url, resp.StatusCode)
		}
		return nil
	}, nil
}

// key identifies a check: VIPs whose checks have the same key share one
// checker.
func (h *HealthConfig) key() string {
	return fmt.Sprintf("%q %q %s %s %d %d %q %v", h.URL, h.Command, h.interval, h.timeout, h.Rise, h.Fall, h.CAFile, h.InsecureSkipVerify)
}

// runHealth runs one check every interval until ctx ends and sends each
// verdict change (and the first verdict) to out, once for each of vips.
func runHealth(ctx context.Context, vips []string, h *HealthConfig, probe probeFunc, out chan<- healthResult, lg *slog.Logger, m *metrics) {
	vip := strings.Join(vips, ",")
	rf := riseFall{rise: h.Rise, fall: h.Fall}
	t := time.NewTicker(h.interval)
	defer t.Stop()
	first := true
	for {
		cctx, cancel := context.WithTimeout(ctx, h.timeout)
		start := time.Now()
		err := probe(cctx)
		lat := time.Since(start)
		cancel()
		if ctx.Err() != nil {
			return
		}
		result := "ok"
		if err != nil {
			result = "fail"
		}
		for _, name := range vips {
			m.healthLatency.WithLabelValues(name).Observe(lat.Seconds())
			m.healthChecks.WithLabelValues(name, result).Inc()
		}
		changed := rf.observe(err == nil)
		if err != nil {
			lg.Debug("health check failed", "vip", vip, "err", err)
		}
		if changed || first {
			first = false
			for _, name := range vips {
				select {
				case out <- healthResult{VIP: name, Healthy: rf.healthy, Err: err, Latency: lat}:
				case <-ctx.Done():
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
