package netlab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What the labs read of a running vipd and of the client's probes, shared
// by the lab packages instead of a copy in each.

// EditedVipdConfig is h's configuration (VipdConfig with o) with edits
// applied (EditConfig); an edit that matches nothing fails t.
func (l *Lab) EditedVipdConfig(t testing.TB, h *Host, o VipdOptions, edits ...string) string {
	t.Helper()
	cfg, err := EditConfig(l.VipdConfig(h, o), edits...)
	if err != nil {
		t.Fatalf("configuration of %s: %v", h.Name, err)
	}
	return cfg
}

// MustVipdLog is VipdLog that fails t when the log cannot be read.
func (h *Host) MustVipdLog(t testing.TB) string {
	t.Helper()
	s, err := h.VipdLog()
	if err != nil {
		t.Fatalf("vipd log of %s: %v", h.Name, err)
	}
	return s
}

// StopCleanly sends SIGTERM to h's vipd, waits up to timeout for it to
// exit, and fails t unless it exited with status 0.
func (l *Lab) StopCleanly(t testing.TB, h *Host, timeout time.Duration) {
	t.Helper()
	if err := l.StopVipd(h, syscall.SIGTERM, timeout); err != nil {
		t.Fatalf("stop vipd on %s: %v", h.Name, err)
	}
	if err := l.Vipd(h).ExitErr(); err != nil {
		t.Errorf("vipd on %s exit after SIGTERM: %v, want 0", h.Name, err)
	}
}

// Metrics fetches h's /metrics (api.metrics_address 127.0.0.1:port) from
// inside its namespace.
func (l *Lab) Metrics(h *Host, port int) (string, error) {
	return l.Exec(h, "curl", "-sS", "--max-time", "2", fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
}

// Metric returns the sum of the samples of name in a /metrics text whose
// labels include every label in want ("k=v"), and whether there was any.
func Metric(text, name string, want ...string) (float64, bool) {
	sum, found := 0.0, false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		// The value is the last field: label values may contain spaces.
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

// ProbesBetween returns the probes of ps that started in [from, to) (zero
// to: no end).
func ProbesBetween(ps []Probe, from, to time.Time) []Probe {
	var out []Probe
	for _, p := range ps {
		if !p.Start.Before(from) && (to.IsZero() || p.Start.Before(to)) {
			out = append(out, p)
		}
	}
	return out
}

// Served counts the failed probes of ps and the answers per node.
func Served(ps []Probe) (failed int, by map[string]int) {
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

// VipdEvent is one line of `vipctl events --json`.
type VipdEvent struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	VIP     string    `json:"vip"`
	Node    string    `json:"node"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
}

// ParseVipdEvents reads the output of `vipctl events --json`, oldest first.
func ParseVipdEvents(out string) ([]VipdEvent, error) {
	var es []VipdEvent
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var e VipdEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		es = append(es, e)
	}
	sort.SliceStable(es, func(i, j int) bool { return es[i].Time.Before(es[j].Time) })
	return es, nil
}

// VipdEvents returns h's recent events of kind (every kind when ""),
// oldest first; it fails t when vipctl does.
func (l *Lab) VipdEvents(t testing.TB, h *Host, kind string) []VipdEvent {
	t.Helper()
	out, err := l.Vipctl(h, "events", "--json")
	if err != nil {
		t.Fatalf("vipctl events on %s: %v", h.Name, err)
	}
	all, err := ParseVipdEvents(out)
	if err != nil {
		t.Fatalf("vipctl events --json on %s: %v", h.Name, err)
	}
	var es []VipdEvent
	for _, e := range all {
		if kind == "" || e.Kind == kind {
			es = append(es, e)
		}
	}
	return es
}

// VipdEventsSince returns the events of es at or after since.
func VipdEventsSince(es []VipdEvent, since time.Time) []VipdEvent {
	var out []VipdEvent
	for _, e := range es {
		if !e.Time.Before(since) {
			out = append(out, e)
		}
	}
	return out
}
