package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// The two families vipd originates, in GoBGP's native form (paths, RIB
// listings) and its API form (peer configuration).
var (
	familyIPv4 = bgp.RF_IPv4_UC
	familyIPv6 = bgp.RF_IPv6_UC

	apiFamilyIPv4 = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	apiFamilyIPv6 = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}

	// globalFamilies are the same two as api.Global.Families numbers
	// them (GoBGP's AfiSafiType order: 0 ipv4-unicast, 1 ipv6-unicast).
	globalFamilies = []uint32{0, 1}
)

// hostPrefix returns addr as a host route (/32 or /128), rejecting addresses
// that cannot be a VIP.
func hostPrefix(addr netip.Addr) (netip.Prefix, error) {
	if !addr.IsValid() {
		return netip.Prefix{}, fmt.Errorf("invalid address")
	}
	if addr.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("address %s: zones are not routable", addr)
	}
	addr = addr.Unmap()
	if addr.IsUnspecified() || addr.IsMulticast() || addr.IsLoopback() || addr.IsLinkLocalUnicast() {
		return netip.Prefix{}, fmt.Errorf("address %s: not a routable unicast address", addr)
	}
	return netip.PrefixFrom(addr, addr.BitLen()), nil
}

// buildPath builds the locally originated path for a host route to addr with
// next hop self (the unspecified address, which GoBGP replaces per peer with
// the session's local address) and the given communities. Per-peer
// communities are not part of the path: an export policy adds them.
func buildPath(addr netip.Addr, communities []uint32) (*apiutil.Path, error) {
	pfx, err := hostPrefix(addr)
	if err != nil {
		return nil, err
	}
	nlri, err := bgp.NewIPAddrPrefix(pfx)
	if err != nil {
		return nil, fmt.Errorf("encode nlri %s: %w", pfx, err)
	}
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	family := familyIPv4
	if pfx.Addr().Is4() {
		nh, err := bgp.NewPathAttributeNextHop(netip.IPv4Unspecified())
		if err != nil {
			return nil, fmt.Errorf("encode next hop: %w", err)
		}
		attrs = append(attrs, nh)
	} else {
		family = familyIPv6
		mp, err := bgp.NewPathAttributeMpReachNLRI(family, []bgp.PathNLRI{{NLRI: nlri}}, netip.IPv6Unspecified())
		if err != nil {
			return nil, fmt.Errorf("encode mp_reach: %w", err)
		}
		attrs = append(attrs, mp)
	}
	if len(communities) > 0 {
		c := slices.Clone(communities)
		slices.Sort(c)
		c = slices.Compact(c)
		attrs = append(attrs, bgp.NewPathAttributeCommunities(c))
	}
	return &apiutil.Path{Family: family, Nlri: nlri, Attrs: attrs}, nil
}

// exportPolicyName is the global export policy: it adds each peer's
// communities to what is sent to that peer and passes only the VIP host
// routes originated here.
const exportPolicyName = "vipd-export"

// exportPolicy builds the policy request for the export side. Statements,
// in order:
//
//   - one per peer with communities or path attributes (Peer.Attrs):
//     neighbor set of that peer, add the communities, set the attributes,
//     and go on (no route action);
//   - one per VIP with path attributes (vipAttrs): that VIP's exact host
//     prefix, set the attributes (replacing a peer's), and go on;
//   - one per address family with VIPs: the VIPs' exact host prefixes,
//     originated locally, ACCEPT.
//
// The assignment's default is REJECT (exportAssignment), so with no
// statement matching nothing is sent: the RFC 8212 default for every
// session, eBGP or iBGP. GoBGP only supports per-neighbor policies for
// route-server clients, so the per-peer selection is a neighbor-set
// condition in a global policy. The policy always exists (possibly without
// statements) so that its assignment (made once at start) stays valid;
// SetPolicies keeps assignments and replaces definitions. GoBGP drops a
// LOCAL_PREF set here on the way to an eBGP peer (after the policy).
func exportPolicy(peers []Peer, vips []netip.Addr, vipAttrs map[netip.Addr]Attrs) (*api.SetPoliciesRequest, error) {
	req := &api.SetPoliciesRequest{}
	pol := &api.Policy{Name: exportPolicyName}
	for _, p := range peers {
		if len(p.Communities) == 0 && p.Attrs.IsZero() {
			continue
		}
		actions := &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_UNSPECIFIED}
		if len(p.Communities) > 0 {
			comms := make([]string, 0, len(p.Communities))
			for _, s := range p.Communities {
				c, err := ParseCommunity(s)
				if err != nil {
					return nil, fmt.Errorf("peer %s: %w", p.Address, err)
				}
				comms = append(comms, FormatCommunity(c))
			}
			actions.Community = &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD, Communities: comms}
		}
		p.Attrs.actions(actions)
		name := "peer-" + p.Address.String()
		req.DefinedSets = append(req.DefinedSets, &api.DefinedSet{
			DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR,
			Name:        name,
			List:        []string{netip.PrefixFrom(p.Address, p.Address.BitLen()).String()},
		})
		pol.Statements = append(pol.Statements, &api.Statement{
			Name: name,
			Conditions: &api.Conditions{
				NeighborSet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: name},
			},
			Actions: actions,
		})
	}
	sets, stmts, err := vipAttrsStatements(vipAttrs)
	if err != nil {
		return nil, err
	}
	req.DefinedSets = append(req.DefinedSets, sets...)
	pol.Statements = append(pol.Statements, stmts...)
	for _, fam := range []struct {
		name string
		is4  bool
	}{{"vips-ipv4", true}, {"vips-ipv6", false}} {
		var prefixes []*api.Prefix
		for _, a := range vips {
			pfx, err := hostPrefix(a)
			if err != nil {
				return nil, err
			}
			if pfx.Addr().Is4() != fam.is4 {
				continue
			}
			prefixes = append(prefixes, &api.Prefix{IpPrefix: pfx.String(), MaskLengthMin: uint32(pfx.Bits()), MaskLengthMax: uint32(pfx.Bits())})
		}
		if len(prefixes) == 0 {
			continue
		}
		req.DefinedSets = append(req.DefinedSets, &api.DefinedSet{
			DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX,
			Name:        fam.name,
			Prefixes:    prefixes,
		})
		pol.Statements = append(pol.Statements, &api.Statement{
			Name: fam.name,
			Conditions: &api.Conditions{
				PrefixSet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: fam.name},
				RouteType: api.Conditions_ROUTE_TYPE_LOCAL,
			},
			Actions: &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
		})
	}
	req.Policies = []*api.Policy{pol, importPolicy()}
	return req, nil
}

// exportAssignment applies the export policy to every peer and rejects
// whatever it does not accept.
func exportAssignment() *api.SetPolicyAssignmentRequest {
	return &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name:          "global",
		Direction:     api.PolicyDirection_POLICY_DIRECTION_EXPORT,
		Policies:      []*api.Policy{{Name: exportPolicyName}},
		DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
	}}
}

// importPolicyName is the global import policy: it lets only the paths
// this speaker originates into the global RIB (GoBGP applies the global
// import policy to them too).
const importPolicyName = "vipd-import"

// importPolicy accepts locally originated paths; importAssignment rejects
// the rest.
func importPolicy() *api.Policy {
	return &api.Policy{Name: importPolicyName, Statements: []*api.Statement{{
		Name:       "local-only",
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
	}}}
}

// importAssignment rejects every route received: vipd installs no routes
// and needs none, and nothing received can reach the global RIB and from
// there another peer.
func importAssignment() *api.SetPolicyAssignmentRequest {
	return &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name:          "global",
		Direction:     api.PolicyDirection_POLICY_DIRECTION_IMPORT,
		Policies:      []*api.Policy{{Name: importPolicyName}},
		DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
	}}
}

// peerSession is what a peer's GoBGP configuration needs besides the Peer.
type peerSession struct {
	// adminDown creates the peer administratively down (held by BFD).
	adminDown bool
	// gr is the speaker's graceful restart configuration.
	gr GracefulRestart
	// restarting sets the Restart State and Forwarding State bits of the
	// Graceful Restart capability (Resume): the router keeps the stale
	// routes until this speaker's End-of-RIB, and GoBGP sends its routes
	// and End-of-RIB once it has the router's End-of-RIB.
	restarting bool
}

// apiPeer converts p to GoBGP's peer configuration.
func apiPeer(p Peer, s peerSession) *api.Peer {
	family := apiFamilyIPv4
	if p.Address.Is6() {
		family = apiFamilyIPv6
	}
	afi := &api.AfiSafi{
		Config: &api.AfiSafiConfig{Family: family, Enabled: true},
		PrefixLimits: &api.PrefixLimit{
			Family:               family,
			MaxPrefixes:          p.maxPrefixes(),
			ShutdownThresholdPct: prefixWarnPct,
		},
	}
	peer := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Address.String(),
			PeerAsn:         p.ASN,
			AuthPassword:    p.Password,
			AdminDown:       s.adminDown,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:           connectRetrySeconds,
			HoldTime:               uint64(p.holdTime() / time.Second),
			KeepaliveInterval:      uint64(p.keepalive() / time.Second),
			IdleHoldTimeAfterReset: idleHoldSeconds,
		}},
		AfiSafis: []*api.AfiSafi{afi},
	}
	p.applyHops(peer)
	if g := s.gr; g.Enabled() {
		restart := uint32(g.RestartTime / time.Second)
		peer.GracefulRestart = &api.GracefulRestart{
			Enabled:     true,
			RestartTime: restart,
			// How long a resumed speaker waits for the routers'
			// End-of-RIB before it sends its own routes anyway: the
			// routers keep the stale ones that long at least.
			DeferralTime:     restart,
			LocalRestarting:  s.restarting,
			LonglivedEnabled: g.LongLivedStaleTime > 0,
		}
		afi.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		if g.LongLivedStaleTime > 0 {
			afi.LongLivedGracefulRestart = &api.LongLivedGracefulRestart{Config: &api.LongLivedGracefulRestartConfig{
				Enabled: true, RestartTime: uint32(g.LongLivedStaleTime / time.Second),
			}}
		}
	}
	return peer
}

// Session retry timers. GoBGP's defaults (120s connect retry, 30s idle hold)
// are long for a VIP that should be reachable again soon after a router
// restarts.
const (
	connectRetrySeconds = 5
	idleHoldSeconds     = 5
)

// prefixWarnPct is the share of MaxPrefixes at which GoBGP logs a warning.
const prefixWarnPct = 80
