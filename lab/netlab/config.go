package netlab

import (
	"fmt"
	"os"
	"path/filepath"
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
	path := filepath.Join(h.Dir, "vipd.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return nil, err
	}
	p, err := l.Start(h, "vipd "+h.Name, filepath.Join(h.Dir, "vipd.log"), nil, l.Tools.Vipd, "--config", path)
	if err != nil {
		return nil, err
	}
	v := &Vipd{Proc: p, Host: h, Config: path}
	l.mu.Lock()
	l.vipds[h.Name] = v
	l.mu.Unlock()
	ok, detail := Eventually(10*time.Second, 50*time.Millisecond, func() (bool, string) {
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
		return nil, fmt.Errorf("vipd on %s: API not answering after 10s: %s", h.Name, detail)
	}
	return v, nil
}
