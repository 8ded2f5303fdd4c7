package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestRiseFall(t *testing.T) {
	rf := riseFall{rise: 2, fall: 3}
	steps := []struct {
		ok      bool
		healthy bool
		changed bool
	}{
		{true, false, false}, // starts unhealthy; one success is not enough
		{true, true, true},   // rise reached
		{false, true, false}, // one failure
		{true, true, false},  // success resets the failure run
		{false, true, false},
		{false, true, false},
		{false, false, true}, // fall reached
		{true, false, false},
		{false, false, false}, // failure resets the success run
		{true, false, false},
		{true, true, true},
	}
	for i, st := range steps {
		changed := rf.observe(st.ok)
		if rf.healthy != st.healthy || changed != st.changed {
			t.Fatalf("step %d (ok=%v): healthy=%v changed=%v, want %v %v", i, st.ok, rf.healthy, changed, st.healthy, st.changed)
		}
	}
}

func TestHTTPProbe(t *testing.T) {
	var code atomic.Int32
	code.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(code.Load()))
	}))
	defer srv.Close()
	probe, err := newProbe(&HealthConfig{URL: srv.URL + "/readyz"})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe(context.Background()); err != nil {
		t.Errorf("200: %v", err)
	}
	code.Store(503)
	if err := probe(context.Background()); err == nil {
		t.Errorf("503 passed")
	}
	code.Store(302) // redirects are not followed, and not healthy
	if err := probe(context.Background()); err == nil {
		t.Errorf("302 passed")
	}
	srv.Close()
	if err := probe(context.Background()); err == nil {
		t.Errorf("closed server passed")
	}
}

// TestHTTPProbeKeepsConnection: checks reuse one connection (a handshake
// per interval was most of an idle node's CPU), and a check after the server
// dropped it dials again and passes.
func TestHTTPProbeKeepsConnection(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	probe, err := newProbe(&HealthConfig{URL: srv.URL + "/readyz", interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := probe(context.Background()); err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 checks opened %d connections, want 1", n)
	}
	srv.CloseClientConnections()
	if err := probe(context.Background()); err != nil {
		t.Fatalf("check after the server closed the connection: %v", err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("after the server closed the connection: %d connections in all, want 2", n)
	}
}

func TestCommandProbe(t *testing.T) {
	ok, _ := newProbe(&HealthConfig{Command: []string{"true"}})
	bad, _ := newProbe(&HealthConfig{Command: []string{"sh", "-c", "echo broken; exit 3"}})
	if err := ok(context.Background()); err != nil {
		t.Errorf("true: %v", err)
	}
	if err := bad(context.Background()); err == nil {
		t.Errorf("exit 3 passed")
	}
}

// TestSharedHealthCheck: one checker reports to every VIP that shares it.
func TestSharedHealthCheck(t *testing.T) {
	var calls atomic.Int32
	var fail atomic.Bool
	probe := func(context.Context) error {
		calls.Add(1)
		if fail.Load() {
			return errors.New("down")
		}
		return nil
	}
	h := &HealthConfig{Rise: 1, Fall: 1, interval: 5 * time.Millisecond, timeout: time.Second}
	out := make(chan healthResult, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		checkRun{id: 1, vips: []string{"a", "b"}, cfg: h, probe: probe, out: out,
			log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics(nil), now: time.Now}.run(ctx)
		close(done)
	}()
	got := map[string]bool{}
	for len(got) < 2 {
		r := <-out
		if !r.Healthy {
			continue
		}
		got[r.VIP] = true
	}
	fail.Store(true)
	down := map[string]bool{}
	deadline := time.After(5 * time.Second)
	for len(down) < 2 {
		select {
		case r := <-out:
			if !r.Healthy {
				down[r.VIP] = true
			}
		case <-deadline:
			t.Fatalf("unhealthy verdicts for %v only", down)
		}
	}
	cancel()
	<-done
	if calls.Load() == 0 {
		t.Fatal("probe never ran")
	}
}
