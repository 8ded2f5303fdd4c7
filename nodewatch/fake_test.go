package nodewatch

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/nodewatch/nodewatchtest"
)

// newPKI makes a kubeadm-shaped PKI for node in a temporary directory.
func newPKI(t *testing.T, node string) *nodewatchtest.PKI {
	t.Helper()
	pki, err := nodewatchtest.NewPKI(t.TempDir(), node)
	if err != nil {
		t.Fatal(err)
	}
	return pki
}

// newFakeAPI starts a fake apiserver for node, stopped when the test ends.
func newFakeAPI(t *testing.T, pki *nodewatchtest.PKI, node string) *nodewatchtest.Server {
	t.Helper()
	api, err := nodewatchtest.NewServer(pki, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Stop)
	return api
}

// fakeCluster is a PKI for node cp-1 and a fake apiserver for its Node
// (not registered yet).
func fakeCluster(t *testing.T) (*nodewatchtest.PKI, *nodewatchtest.Server) {
	t.Helper()
	pki := newPKI(t, "cp-1")
	return pki, newFakeAPI(t, pki, "cp-1")
}

// kubeletConf writes a kubeadm-like kubelet.conf for server and returns its
// path.
func kubeletConf(t *testing.T, pki *nodewatchtest.PKI, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubelet.conf")
	if err := pki.WriteKubeconfig(path, server); err != nil {
		t.Fatal(err)
	}
	return path
}

// stateLog records what a Watcher reports and lets a test wait for a state.
type stateLog struct {
	mu     sync.Mutex
	states []State
	signal chan struct{}
	// w is the watcher reporting (runWatcher's).
	w *Watcher
}

func newStateLog() *stateLog { return &stateLog{signal: make(chan struct{}, 1)} }

func (l *stateLog) notify(s State) {
	l.mu.Lock()
	l.states = append(l.states, s)
	l.mu.Unlock()
	select {
	case l.signal <- struct{}{}:
	default:
	}
}

func (l *stateLog) last() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.states) == 0 {
		return State{}
	}
	return l.states[len(l.states)-1]
}

// all returns every state reported so far.
func (l *stateLog) all() []State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]State(nil), l.states...)
}

// waitFor waits (10 s at most) until the last state reported satisfies ok.
func (l *stateLog) waitFor(t *testing.T, what string, ok func(State) bool) State {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if s := l.last(); ok(s) {
			return s
		}
		select {
		case <-l.signal:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; last state %+v", what, l.last())
		}
	}
}

// logBuffer is a slog handler's output a test can read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log lines at level (INFO, WARN, DEBUG) holding s.
func (b *logBuffer) lines(level, s string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, "level="+level) && strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// runWatcher runs a watcher for cfg (with short timeouts unless set) until
// the test ends, and returns its state log and log output.
func runWatcher(t *testing.T, cfg Config) (*stateLog, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	setDefault(&cfg.MinBackoff, 20*time.Millisecond)
	setDefault(&cfg.MaxBackoff, 100*time.Millisecond)
	setDefault(&cfg.RequestTimeout, 2*time.Second)
	setDefault(&cfg.WatchTimeout, 5*time.Second)
	states := newStateLog()
	states.w = New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		states.w.Run(ctx, states.notify)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	return states, logs
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
