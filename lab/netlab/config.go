package netlab

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// StartVipdConfig is StartVipd with the configuration file's text given as
// is, for tests that need what VipdOptions cannot express (an empty peer
// list, another state_dir, [api] keys). Start from VipdConfig and edit it.
// It waits (bounded) until the API answers; failures stop the test.
func (l *Lab) StartVipdConfig(h *Host, config string) *Vipd {
	l.t.Helper()
	v, err := l.TryStartVipdConfig(h, config)
	if err != nil {
		l.t.Fatalf("netlab: %v", err)
	}
	return v
}

// TryStartVipdConfig is StartVipdConfig returning its failure instead of
// stopping the test, for callers that record it and go on (a benchmark
// trial).
func (l *Lab) TryStartVipdConfig(h *Host, config string) (*Vipd, error) {
	return l.tryStartVipd(h, l.Tools.Vipd, config)
}

// StartVipdWith is StartVipdConfig running the vipd binary at bin instead
// of Tools.Vipd: another release's, for a lab that mixes versions.
func (l *Lab) StartVipdWith(h *Host, bin, config string) *Vipd {
	l.t.Helper()
	v, err := l.tryStartVipd(h, bin, config)
	if err != nil {
		l.t.Fatalf("netlab: %v", err)
	}
	return v
}

func (l *Lab) tryStartVipd(h *Host, bin, config string) (*Vipd, error) {
	v, err := l.startVipd(h, bin, config)
	if err != nil {
		return nil, err
	}
	p := v.Proc
	within := Scaled(10 * time.Second)
	ok, detail := Eventually(within, 50*time.Millisecond, func() (bool, string) {
		if !p.Running() {
			return true, ""
		}
		if _, err := l.Status(h); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if !p.Running() {
		return nil, fmt.Errorf("vipd on %s exited at start: %v (log %s)", h.Name, p.ExitErr(), p.Log)
	}
	if !ok {
		return nil, fmt.Errorf("vipd on %s: API not answering after %v: %s", h.Name, within, detail)
	}
	return v, nil
}

// StartVipdNoWait writes config as h's configuration file and starts vipd
// in h's namespace, with env ("KEY=value") added to its environment, and
// returns at once: for tests of what vipd does before its API answers (a
// bind address not configured yet). It becomes h's vipd (Lab.Vipd).
func (l *Lab) StartVipdNoWait(h *Host, config string, env ...string) (*Vipd, error) {
	return l.startVipd(h, l.Tools.Vipd, config, env...)
}

func (l *Lab) startVipd(h *Host, bin, config string, env ...string) (*Vipd, error) {
	path := filepath.Join(h.Dir, "vipd.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return nil, err
	}
	argv := []string{bin, "--config", path}
	if len(env) > 0 {
		argv = append(append([]string{"env"}, env...), argv...)
	}
	p, err := l.Start(h, "vipd "+h.Name, filepath.Join(h.Dir, "vipd.log"), nil, argv...)
	if err != nil {
		return nil, err
	}
	v := &Vipd{Proc: p, Host: h, Config: path}
	l.mu.Lock()
	l.vipds[h.Name] = v
	l.mu.Unlock()
	return v, nil
}

// EditConfig applies edits to a vipd configuration's text: pairs of a
// regular expression and its replacement (regexp.ReplaceAllString). An
// edit that matches nothing is an error, so it cannot silently do nothing.
func EditConfig(config string, edits ...string) (string, error) {
	if len(edits)%2 != 0 {
		return "", fmt.Errorf("edit config: %d arguments, want pairs of pattern and replacement", len(edits))
	}
	for i := 0; i < len(edits); i += 2 {
		re, err := regexp.Compile(edits[i])
		if err != nil {
			return "", fmt.Errorf("edit config: %w", err)
		}
		if !re.MatchString(config) {
			return "", fmt.Errorf("edit config: %q matches nothing in:\n%s", edits[i], config)
		}
		config = re.ReplaceAllString(config, edits[i+1])
	}
	return config, nil
}

// VipdLog returns h's vipd log (every run, appended) so far.
func (h *Host) VipdLog() (string, error) {
	b, err := os.ReadFile(filepath.Join(h.Dir, "vipd.log"))
	return string(b), err
}

// LogLines returns the non-empty lines of log that contain every one of
// words.
func LogLines(log string, words ...string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		all := line != ""
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			out = append(out, line)
		}
	}
	return out
}

// CachedPeer is one entry of a node's state_dir/peers.json.
type CachedPeer struct {
	Name    string `json:"name"`
	Address string `json:"address"`
}

// PeerCache reads h's state_dir/peers.json.
func (h *Host) PeerCache() ([]CachedPeer, error) {
	b, err := os.ReadFile(filepath.Join(h.StateDir(), "peers.json"))
	if err != nil {
		return nil, err
	}
	var f struct {
		Peers []CachedPeer `json:"peers"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("peers.json of %s: %w: %q", h.Name, err, b)
	}
	return f.Peers, nil
}

// LogLinesBetween returns the lines of log, slog's text lines (starting
// "time=RFC3339Nano"), stamped in [from, to] (a zero bound is open) that
// contain any of words.
func LogLinesBetween(log string, from, to time.Time, words ...string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		ts, _, ok := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if !ok || !strings.HasPrefix(line, "time=") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || at.Before(from) || (!to.IsZero() && at.After(to)) {
			continue
		}
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// VipdLogBetween is LogLinesBetween over h's vipd log; a log that cannot
// be read fails t.
func (h *Host) VipdLogBetween(t testing.TB, from, to time.Time, words ...string) []string {
	t.Helper()
	return LogLinesBetween(h.MustVipdLog(t), from, to, words...)
}
