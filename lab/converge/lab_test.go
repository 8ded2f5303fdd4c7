package converge

import (
	"fmt"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

const (
	// probeInterval is the client's probe interval and sampleEvery the
	// holder sampling interval.
	probeInterval = 20 * time.Millisecond
	sampleEvery   = 20 * time.Millisecond
	// servedRun is how many probes in a row answered by one node count as
	// "the VIP answers again".
	servedRun = 25
	// metricsPort is api.metrics_address's port inside every node
	// namespace.
	metricsPort = 9470
)

// withMetrics is the config edit that serves /metrics on metricsPort.
var withMetrics = []string{`(?m)^(socket = .*)$`, fmt.Sprintf("$1\nmetrics_address = \"127.0.0.1:%d\"", metricsPort)}

// ip runs ip(8) with args inside h's namespace.
func ip(h *netlab.Host, args ...string) error {
	_, err := netlab.Run("ip", append([]string{"-n", h.NS}, args...)...)
	return err
}

// waitLog waits up to timeout for a line containing every one of words in
// h's log after offset from, and returns it.
func waitLog(t *testing.T, h *netlab.Host, from int, timeout time.Duration, words ...string) (string, bool) {
	t.Helper()
	var found string
	ok, _ := netlab.Eventually(timeout, 20*time.Millisecond, func() (bool, string) {
		ls := netlab.LogLines(h.MustVipdLog(t)[from:], words...)
		if len(ls) == 0 {
			return false, ""
		}
		found = ls[0]
		return true, ""
	})
	return found, ok
}

// answeredAgain returns the time from since to the first answered probe
// after the last failed probe of ps (0 when no probe failed).
func answeredAgain(ps []netlab.Probe, since time.Time) time.Duration {
	lastFail := -1
	for i, p := range ps {
		if !p.OK {
			lastFail = i
		}
	}
	if lastFail < 0 {
		return 0
	}
	for _, p := range ps[lastFail+1:] {
		if p.OK {
			return p.Start.Sub(since)
		}
	}
	return -1
}

// metricOf scrapes h and returns one metric (0 when absent).
func metricOf(t *testing.T, l *netlab.Lab, h *netlab.Host, name string, labels ...string) float64 {
	t.Helper()
	text, err := l.Metrics(h, metricsPort)
	if err != nil {
		t.Fatalf("scrape %s: %v", h.Name, err)
	}
	v, _ := netlab.Metric(text, name, labels...)
	return v
}
