package agent

import (
	"slices"
	"strings"
	"testing"
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
