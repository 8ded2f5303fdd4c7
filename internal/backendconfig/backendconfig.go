// Package backendconfig is where vipd's configuration (agent/config) meets
// its backends: it turns the configuration's typed sections into what the
// backends are built with (bgp.Config, l2.Config), and gives the
// configuration the backends' own rules (Rules), which config places at
// the keys they are about. So agent/config imports no backend, and a rule
// stays in the backend that uses it: a file vipd --check accepts is one
// the speaker and the announcers start with.
package backendconfig

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/bgp"
	"github.com/vipd/vipd/l2"
)

// Rules returns the backends' rules for config.BackendRules.Load: the l2
// announcers' refresh interval rule (l2.ValidRefreshInterval) and the BGP
// speaker's (bgp.Config.Validate, on Speaker's conversion).
func Rules() config.BackendRules {
	return config.BackendRules{L2RefreshInterval: l2.ValidRefreshInterval, BGP: checkSpeaker}
}

// checkSpeaker returns what bgp.Config.Validate refuses in s, each with
// the field and index the bgp package names it by.
func checkSpeaker(s config.BGPSpeaker) []config.FieldError {
	var out []config.FieldError
	for _, err := range Speaker(s).Validate() {
		fe := config.FieldError{Index: -1, Err: err}
		var be *bgp.FieldError
		if errors.As(err, &be) {
			fe.Field, fe.Index = be.Field, be.Index
		}
		out = append(out, fe)
	}
	return out
}

// Speaker returns the BGP speaker's configuration for s
// (config.Config.Speaker); Logger is left for the caller. Every field of
// s reaches it.
func Speaker(s config.BGPSpeaker) bgp.Config {
	c := bgp.Config{
		ASN: s.ASN, RouterID: s.RouterID, ListenPort: s.ListenPort,
		VIPs:            slices.Clone(s.VIPs),
		GracefulRestart: bgp.GracefulRestart{RestartTime: s.GracefulRestartTime, LongLivedStaleTime: s.LongLivedStaleTime},
	}
	for _, p := range s.Peers {
		c.Peers = append(c.Peers, bgp.Peer{
			Address: p.Address, ASN: p.ASN, Password: p.Password,
			HoldTime: p.HoldTime, Keepalive: p.Keepalive,
			Communities: slices.Clone(p.Communities), MaxPrefixes: p.MaxPrefixes,
			BFD:          bgp.BFD{Enabled: p.BFD, MinInterval: p.BFDMinInterval, Multiplier: p.BFDMultiplier},
			LocalAddress: p.LocalAddress, EBGPMultihop: p.EBGPMultihop, TTLSecurityHops: p.TTLSecurityHops,
			Attrs: attrs(p.Attrs),
		})
	}
	if s.VIPAttrs != nil {
		c.VIPAttrs = make(map[netip.Addr]bgp.Attrs, len(s.VIPAttrs))
		for a, at := range s.VIPAttrs {
			c.VIPAttrs[a] = attrs(at)
		}
	}
	return c
}

func attrs(a config.BGPAttrs) bgp.Attrs { return bgp.Attrs{MED: a.MED, LocalPref: a.LocalPref} }

// L2 returns the configuration of the l2 announcer a VIP is carried by
// (config.VIPConfig.L2); Logger is left for the caller.
func L2(a config.L2Announcer) l2.Config {
	return l2.Config{Interface: a.Interface, Quiet: a.Quiet, RefreshInterval: a.RefreshInterval}
}
