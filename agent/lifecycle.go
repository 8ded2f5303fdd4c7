package agent

import (
	"net/netip"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lifecycle"
)

// The lifecycle's inputs, as the agent gathers them from its view: the
// members as one VIP's lifecycle sees them, and the election's answer.
// What it decides is executed by handoff.go, chain.go and clients.go.

// peersOf is view as vip's lifecycle sees it, with the members'
// membership addresses from addrs (those known).
func peersOf(view []Member, vip string, addrs map[string]netip.AddrPort) []lifecycle.Peer {
	k := config.VIPKey(vip)
	out := make([]lifecycle.Peer, 0, len(view))
	for _, m := range view {
		vm := m.Meta.VIP(k)
		p := lifecycle.Peer{Name: m.Name, State: peerState(m.State),
			Held: vm.Held, Forwarding: vm.Forwarding, Lingering: vm.Lingering, EndLinger: vm.EndLinger,
			Departing: m.Meta.Withdrawn || m.Meta.Leaving || m.Meta.NodeWithdrawn}
		if ap, ok := addrs[m.Name]; ok {
			p.Addr = ap.Addr().Unmap()
		}
		out = append(out, p)
	}
	return out
}

// peerState is s for the lifecycle.
func peerState(s MemberState) lifecycle.State {
	switch s {
	case StateSuspect:
		return lifecycle.Suspect
	case StateDead:
		return lifecycle.Dead
	case StateLeft:
		return lifecycle.Left
	}
	return lifecycle.Alive
}

// electionOf is res for the lifecycle.
func electionOf(res Result) lifecycle.Election {
	return lifecycle.Election{Owner: res.Owner, Reason: res.Reason, Bootstrap: res.Bootstrap, Eligible: res.Eligible}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
