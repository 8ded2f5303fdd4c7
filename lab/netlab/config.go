package netlab

import (
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
	path := filepath.Join(h.Dir, "vipd.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		l.t.Fatalf("netlab: %v", err)
	}
	p, err := l.Start(h, "vipd "+h.Name, filepath.Join(h.Dir, "vipd.log"), nil, l.Tools.Vipd, "--config", path)
	if err != nil {
		l.t.Fatalf("netlab: %v", err)
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
		l.t.Fatalf("netlab: vipd on %s exited at start: %v (log %s)", h.Name, p.ExitErr(), p.Log)
	}
	if !ok {
		l.t.Fatalf("netlab: vipd on %s: API not answering after 10s: %s", h.Name, detail)
	}
	return v
}
