package agent

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/membership"
	"github.com/vipd/vipd/internal/testkit"
)

func TestRejoinTargets(t *testing.T) {
	cached := []CachedPeer{{"cp-1", "192.0.2.11:7946"}, {"cp-2", "192.0.2.12:7946"}, {"cp-3", "192.0.2.13:7946"}}
	tests := []struct {
		name       string
		configured []string
		members    []memberInfo
		want       string
	}{
		{"all alive: nothing to join", nil, []memberInfo{
			{Name: "cp-2", Address: "192.0.2.12:7946", State: StateAlive},
			{Name: "cp-3", Address: "192.0.2.13:7946", State: StateAlive}}, ""},
		{"dead peer is rejoined at its cached address", nil, []memberInfo{
			{Name: "cp-2", Address: "192.0.2.12:7946", State: StateDead},
			{Name: "cp-3", Address: "192.0.2.13:7946", State: StateAlive}}, "192.0.2.12:7946"},
		{"cut off node: every cached peer", nil, nil, "192.0.2.12:7946,192.0.2.13:7946"},
		{"suspect counts as alive", nil, []memberInfo{
			{Name: "cp-2", Address: "192.0.2.12:7946", State: StateSuspect},
			{Name: "cp-3", Address: "192.0.2.13:7946", State: StateAlive}}, ""},
		{"configured peer not yet seen", []string{"192.0.2.14:7946", "192.0.2.12:7946"}, []memberInfo{
			{Name: "cp-2", Address: "192.0.2.12:7946", State: StateAlive},
			{Name: "cp-3", Address: "192.0.2.13:7946", State: StateAlive}}, "192.0.2.14:7946"},
		{"left peer in cache is still tried", nil, []memberInfo{
			{Name: "cp-2", Address: "192.0.2.12:7946", State: StateLeft},
			{Name: "cp-3", Address: "192.0.2.13:7946", State: StateAlive}}, "192.0.2.12:7946"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(rejoinTargets("cp-1", cached, tt.configured, tt.members), ",")
			if got != tt.want {
				t.Errorf("rejoinTargets = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNextPeerCache(t *testing.T) {
	cached := []CachedPeer{{"cp-2", "192.0.2.12:7946"}, {"cp-4", "192.0.2.14:7946"}}
	members := []memberInfo{
		{Name: "cp-1", Address: "192.0.2.11:7946", State: StateAlive}, // self
		{Name: "cp-2", Address: "192.0.2.22:7946", State: StateAlive}, // moved
		{Name: "cp-3", Address: "192.0.2.13:7946", State: StateDead},  // dead: keep
		{Name: "cp-4", Address: "192.0.2.14:7946", State: StateLeft},  // left: keep (quorum base)
	}
	got := nextPeerCache("cp-1", cached, members)
	want := []CachedPeer{{"cp-2", "192.0.2.22:7946"}, {"cp-3", "192.0.2.13:7946"}, {"cp-4", "192.0.2.14:7946"}}
	if !slices.Equal(got, want) {
		t.Errorf("nextPeerCache = %v, want %v", got, want)
	}
}

// TestClusterRejoinsUnderNewAddress: a node stops without a leave (a
// restart in place) and its next process comes back under another address
// (cluster.bind_address changed). memberlist refuses the name at the new
// address until the old entry has been dead for DeadNodeReclaimTime; the
// node must be back on its peers soon after that, not whenever the next
// periodic state exchange happens to come (10 s with fast timers).
func TestClusterRejoinsUnderNewAddress(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	for n := range c.nodes {
		c.nodes[n].cfg = c.config(n, `allowed_networks = ["127.0.0.0/8"]`)
	}
	owner := c.startSteady()
	x, y := "a", "b"
	for _, n := range []string{"a", "b", "c"} {
		if n != owner {
			x = n
			break
		}
	}
	for _, n := range []string{"a", "b", "c"} {
		if n != x {
			y = n
			break
		}
	}
	c.nodes[x].restart.Store(true)
	c.stop(x)
	// The next process: another address and port.
	port := testkit.FreePort(t)
	text, err := os.ReadFile(c.nodes[x].cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.Replace(strings.Replace(string(text), `bind_address = "127.0.0.1"`, `bind_address = "127.0.0.2"`, 1),
		fmt.Sprintf("bind_port = %d", c.nodes[x].port), fmt.Sprintf("bind_port = %d", port), 1)
	if err := os.WriteFile(c.nodes[x].cfg.Path, []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.nodes[x].cfg, err = config.Load(c.nodes[x].cfg.Path); err != nil {
		t.Fatal(err)
	}
	c.start(x)
	newAddr := fmt.Sprintf("127.0.0.2:%d", port)
	// The peers take the old process for dead first (no leave).
	cl := c.client(y)
	var dead time.Time
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		st, err := cl.Status(context.Background(), &apipb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range st.Members {
			if m.Name != x {
				continue
			}
			if dead.IsZero() && m.State == StateDead.String() {
				dead = time.Now()
			}
			if m.State == StateAlive.String() && m.Address == newAddr {
				if dead.IsZero() {
					t.Logf("%s back at %s on %s before it was seen dead", x, newAddr, y)
					return
				}
				took := time.Since(dead)
				t.Logf("%s back at %s on %s %v after %s took its old process for dead", x, newAddr, y, took.Round(100*time.Millisecond), y)
				if limit := membership.DeadNodeReclaimTime + 2*time.Second; took > limit {
					t.Errorf("%s re-admitted %v after its old process was dead, want within %v (the reclaim time and a few rejoins)", x, took, limit)
				}
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never seen alive at %s on %s (dead since %v)", x, newAddr, y, dead)
}
