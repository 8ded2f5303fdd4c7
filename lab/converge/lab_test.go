package converge

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

const (
	// rejoinInterval is cluster.rejoin_interval in every test config.
	rejoinInterval = 5 * time.Second
	// settle bounds convergence after start and after every event.
	settle = 15 * time.Second
	// stopTimeout bounds a SIGTERM shutdown (handoff_timeout is 10s by
	// default).
	stopTimeout = 20 * time.Second
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

var opts = netlab.VipdOptions{RejoinInterval: rejoinInterval.String()}

// withMetrics is the config edit that serves /metrics on metricsPort.
var withMetrics = []string{`(?m)^(socket = .*)$`, fmt.Sprintf("$1\nmetrics_address = \"127.0.0.1:%d\"", metricsPort)}

// cluster starts a 3-node lab with the client namespace, the HTTP server on
// every node when http is set, and vipd with o and edits (see config) on
// every node; it waits until every node sees every other alive and exactly
// one holds the VIP, and returns the lab, the VIP and its holder.
func cluster(t *testing.T, o netlab.VipdOptions, http bool, edits ...string) (*netlab.Lab, netlab.VIP, *netlab.Host) {
	t.Helper()
	l := netlab.New(t, netlab.Options{})
	if http {
		l.StartHTTPAll()
	}
	for _, n := range l.Nodes {
		l.StartVipdConfig(n, config(t, l, n, o, edits...))
	}
	vip := l.DefaultVIPs()[0]
	if len(o.VIPs) > 0 {
		vip = o.VIPs[0]
	}
	holder, err := l.WaitSteady(vip, settle)
	if err != nil {
		t.Fatal(err)
	}
	return l, vip, holder
}

// config renders h's netlab configuration with o and applies edits (pairs
// of a regular expression and its replacement), failing the test when one
// matches nothing.
func config(t *testing.T, l *netlab.Lab, h *netlab.Host, o netlab.VipdOptions, edits ...string) string {
	t.Helper()
	cfg, err := netlab.EditConfig(l.VipdConfig(h, o), edits...)
	if err != nil {
		t.Fatalf("configuration of %s: %v", h.Name, err)
	}
	return cfg
}

// ip runs ip(8) with args inside h's namespace.
func ip(h *netlab.Host, args ...string) error {
	_, err := netlab.Run("ip", append([]string{"-n", h.NS}, args...)...)
	return err
}

// logOf returns h's vipd log so far.
func logOf(t *testing.T, h *netlab.Host) string {
	t.Helper()
	s, err := h.VipdLog()
	if err != nil {
		t.Fatalf("vipd log of %s: %v", h.Name, err)
	}
	return s
}

// waitLog waits up to timeout for a line containing every one of words in
// h's log after offset from, and returns it.
func waitLog(t *testing.T, h *netlab.Host, from int, timeout time.Duration, words ...string) (string, bool) {
	t.Helper()
	var found string
	ok, _ := netlab.Eventually(timeout, 20*time.Millisecond, func() (bool, string) {
		ls := netlab.LogLines(logOf(t, h)[from:], words...)
		if len(ls) == 0 {
			return false, ""
		}
		found = ls[0]
		return true, ""
	})
	return found, ok
}

// stop sends SIGTERM to h's vipd and waits for a clean exit.
func stop(t *testing.T, l *netlab.Lab, h *netlab.Host) {
	t.Helper()
	if err := l.StopVipd(h, syscall.SIGTERM, stopTimeout); err != nil {
		t.Fatalf("stop vipd on %s: %v", h.Name, err)
	}
	if err := l.Vipd(h).ExitErr(); err != nil {
		t.Errorf("vipd on %s exit after SIGTERM: %v, want 0", h.Name, err)
	}
}

// probeWindow returns the probes that started in [from, to) (zero to: no
// end).
func probeWindow(ps []netlab.Probe, from, to time.Time) []netlab.Probe {
	var out []netlab.Probe
	for _, p := range ps {
		if !p.Start.Before(from) && (to.IsZero() || p.Start.Before(to)) {
			out = append(out, p)
		}
	}
	return out
}

// served counts the failed probes of ps and the answers per node.
func served(ps []netlab.Probe) (failed int, by map[string]int) {
	by = map[string]int{}
	for _, p := range ps {
		if !p.OK {
			failed++
			continue
		}
		by[p.Server]++
	}
	return failed, by
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

// scrape fetches h's /metrics from inside its namespace.
func scrape(l *netlab.Lab, h *netlab.Host) (string, error) {
	return l.Exec(h, "curl", "-sS", "--max-time", "2", fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
}

// metric returns the sum of the samples of name whose labels include every
// label in want ("k=v"), and whether there was any.
func metric(text, name string, want ...string) (float64, bool) {
	sum, found := 0.0, false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		series, value := line[:i], line[i+1:]
		mname, labels, _ := strings.Cut(series, "{")
		if mname != name {
			continue
		}
		labels = strings.TrimSuffix(labels, "}")
		match := true
		for _, w := range want {
			k, v, _ := strings.Cut(w, "=")
			match = match && strings.Contains(","+labels+",", ","+k+"="+strconv.Quote(v)+",")
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		sum, found = sum+f, true
	}
	return sum, found
}

// metricOf scrapes h and returns one metric (0 when absent).
func metricOf(t *testing.T, l *netlab.Lab, h *netlab.Host, name string, labels ...string) float64 {
	t.Helper()
	text, err := scrape(l, h)
	if err != nil {
		t.Fatalf("scrape %s: %v", h.Name, err)
	}
	v, _ := metric(text, name, labels...)
	return v
}

// event is one line of `vipctl events --json`.
type event struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	VIP     string    `json:"vip"`
	Node    string    `json:"node"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
}

// events returns h's recent events of kind (every kind when "").
func events(t *testing.T, l *netlab.Lab, h *netlab.Host, kind string) []event {
	t.Helper()
	out, err := l.Vipctl(h, "events", "--json")
	if err != nil {
		t.Fatalf("vipctl events on %s: %v", h.Name, err)
	}
	var es []event
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("vipctl events --json on %s: %q: %v", h.Name, line, err)
		}
		if kind == "" || e.Kind == kind {
			es = append(es, e)
		}
	}
	return es
}

// eventsSince returns the events of es at or after since.
func eventsSince(es []event, since time.Time) []event {
	var out []event
	for _, e := range es {
		if !e.Time.Before(since) {
			out = append(out, e)
		}
	}
	return out
}
