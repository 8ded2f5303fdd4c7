// Package routers starts real routing daemons (BIRD 2, FRR) inside network
// namespaces for tests, and reads back the routes they learned.
//
// Everything here needs root and is meant for tests gated by
// netnstest.SkipUnlessEnabled: namespaces come from netnstest, daemons are
// killed by their PID in t.Cleanup, and every wait is bounded. It imports
// nothing of vipd's but netnstest, so bgp's tests and the labs share it.
package routers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
)

// Route is one path a router holds for a prefix.
type Route struct {
	// Prefix is the destination.
	Prefix netip.Prefix
	// NextHops are the addresses traffic is forwarded to.
	NextHops []netip.Addr
	// Communities are standard communities as "asn:value", in the order the
	// router shows them (well-known names are translated to numbers).
	Communities []string
	// Best is true for the path the router selected.
	Best bool
	// Stale is true for a path kept while its speaker restarts (BGP
	// graceful restart, RFC 4724).
	Stale bool
}

// HasCommunity reports whether r carries community c ("asn:value").
func (r Route) HasCommunity(c string) bool { return slices.Contains(r.Communities, c) }

// Router is a running routing daemon that can be asked for its routes.
type Router interface {
	// Routes returns the paths the router holds for exactly prefix (none if
	// it has no route).
	Routes(prefix netip.Prefix) ([]Route, error)
}

// daemon is one routing process started under `ip netns exec`.
type daemon struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error // set before done is closed
}

// start runs argv inside ns with output captured, and kills it by PID in
// t.Cleanup. `ip netns exec` execs the program, so the PID is the daemon's.
func start(t testing.TB, ns, name string, argv ...string) *daemon {
	t.Helper()
	d := &daemon{name: name, out: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	d.cmd.Stdout = d.out
	d.cmd.Stderr = d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s in %s: %v", name, ns, err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, d.out.String())
		}
	})
	return d
}

func (d *daemon) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Kill()
	select {
	case <-d.done:
	case <-time.After(5 * time.Second):
	}
}

// exited returns an error if the daemon has exited.
func (d *daemon) exited() error {
	select {
	case <-d.done:
		return fmt.Errorf("%s exited: %v: %s", d.name, d.err, strings.TrimSpace(d.out.String()))
	default:
		return nil
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// KernelNextHops returns the next hops of the kernel route for exactly prefix
// in namespace ns (empty if there is none), from `ip -j route`.
func KernelNextHops(ns string, prefix netip.Prefix) ([]netip.Addr, error) {
	cmd := "route"
	if prefix.Addr().Is6() {
		cmd = "-6 route"
	}
	args := append([]string{"-j", "-n", ns}, strings.Fields(cmd)...)
	args = append(args, "show", "exact", prefix.String())
	out, err := netnstest.Run("ip", args...)
	if err != nil {
		return nil, err
	}
	var routes []struct {
		Gateway  string `json:"gateway"`
		Nexthops []struct {
			Gateway string `json:"gateway"`
		} `json:"nexthops"`
	}
	if strings.TrimSpace(out) == "" {
		return nil, nil
	}
	if err := json.Unmarshal([]byte(out), &routes); err != nil {
		return nil, fmt.Errorf("parse ip route output %q: %w", out, err)
	}
	var nhs []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			nhs = append(nhs, a)
		}
	}
	for _, r := range routes {
		add(r.Gateway)
		for _, nh := range r.Nexthops {
			add(nh.Gateway)
		}
	}
	return nhs, nil
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
