package bgp

import (
	"maps"
	"net/netip"
	"slices"

	api "github.com/osrg/gobgp/v4/api"
)

// Attrs are optional path attributes of the routes the speaker sends. They
// are set on export (the paths in the RIB do not carry them), by the
// policy exportPolicy builds.
type Attrs struct {
	// MED is the MULTI_EXIT_DISC (RFC 4271 section 5.1.4): of the routes
	// to a VIP that a router learned from the same neighboring AS, it
	// prefers the one with the lowest. Optional and non-transitive: the
	// router does not pass it on to another AS. Nil sends none, which FRR
	// and BIRD compare as 0 (the best) by default.
	MED *uint32
	// LocalPref is the LOCAL_PREF (RFC 4271 section 5.1.5): a router
	// prefers the route with the highest. It is sent to iBGP peers only
	// (an eBGP peer neither receives nor may be sent it), so Validate
	// refuses it on an eBGP peer. Nil sends GoBGP's default, 100. At
	// least 1: GoBGP's policy actions cannot set 0.
	LocalPref *uint32
}

// IsZero reports whether a sets no attribute.
func (a Attrs) IsZero() bool { return a.MED == nil && a.LocalPref == nil }

// Equal reports whether a and b set the same attributes.
func (a Attrs) Equal(b Attrs) bool {
	eq := func(x, y *uint32) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return eq(a.MED, b.MED) && eq(a.LocalPref, b.LocalPref)
}

// validate reports the problems of a peer's a to add; ibgp is whether the
// peer is in this speaker's AS.
func (a Attrs) validate(ibgp bool, add func(field, format string, args ...any)) {
	if a.LocalPref == nil {
		return
	}
	switch {
	case *a.LocalPref == 0:
		add("local_pref", "local_pref 0: must be at least 1 (GoBGP cannot set 0; 1 is the least preferred)")
	case !ibgp:
		add("local_pref", "local_pref %d: LOCAL_PREF is only sent to iBGP peers (RFC 4271 section 5.1.5) and this peer is eBGP (another AS): set med, or local_pref on the router's import", *a.LocalPref)
	}
}

// validateVIPAttrs reports the problems of c.VIPAttrs to add, at the
// index of the VIP in c.VIPs.
func (c Config) validateVIPAttrs(add func(field string, index int, format string, args ...any)) {
	anyIBGP := false
	for _, p := range c.Peers {
		anyIBGP = anyIBGP || p.ASN == c.ASN
	}
	for _, a := range sortedAddrs(c.VIPAttrs) {
		i := -1
		for j, v := range c.VIPs {
			if v.Unmap() == a.Unmap() {
				i = j
				break
			}
		}
		if i < 0 {
			add("vip_attrs", -1, "vip_attrs %s: not one of the VIPs", a)
			continue
		}
		at := c.VIPAttrs[a]
		if at.LocalPref == nil {
			continue
		}
		switch {
		case *at.LocalPref == 0:
			add("vip.local_pref", i, "vip %s: local_pref 0: must be at least 1 (GoBGP cannot set 0; 1 is the least preferred)", a)
		case !anyIBGP:
			add("vip.local_pref", i, "vip %s: local_pref %d: no iBGP peer (LOCAL_PREF is only sent to peers of this AS, RFC 4271 section 5.1.5)", a, *at.LocalPref)
		}
	}
}

// sortedAddrs returns m's keys in order.
func sortedAddrs(m map[netip.Addr]Attrs) []netip.Addr {
	return slices.SortedFunc(maps.Keys(m), netip.Addr.Compare)
}

// actions adds a's attributes to acts (replacing what an earlier statement
// set).
func (a Attrs) actions(acts *api.Actions) {
	if a.MED != nil {
		acts.Med = &api.MedAction{Type: api.MedAction_TYPE_REPLACE, Value: int64(*a.MED)}
	}
	if a.LocalPref != nil {
		acts.LocalPref = &api.LocalPrefAction{Value: *a.LocalPref}
	}
}

// vipAttrsStatements returns, for each VIP of attrs that sets an
// attribute, a prefix set of its host route and a statement that sets
// the attributes on it and goes on (no route action). They come after the
// peers' statements in the export policy, so a VIP's attribute replaces
// the peer's.
func vipAttrsStatements(attrs map[netip.Addr]Attrs) ([]*api.DefinedSet, []*api.Statement, error) {
	var sets []*api.DefinedSet
	var stmts []*api.Statement
	for _, a := range sortedAddrs(attrs) {
		at := attrs[a]
		if at.IsZero() {
			continue
		}
		pfx, err := hostPrefix(a)
		if err != nil {
			return nil, nil, err
		}
		name := "vip-" + pfx.Addr().String()
		sets = append(sets, &api.DefinedSet{
			DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX,
			Name:        name,
			Prefixes:    []*api.Prefix{{IpPrefix: pfx.String(), MaskLengthMin: uint32(pfx.Bits()), MaskLengthMax: uint32(pfx.Bits())}},
		})
		acts := &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_UNSPECIFIED}
		at.actions(acts)
		stmts = append(stmts, &api.Statement{
			Name:       name,
			Conditions: &api.Conditions{PrefixSet: &api.MatchSet{Type: api.MatchSet_TYPE_ANY, Name: name}},
			Actions:    acts,
		})
	}
	return sets, stmts, nil
}

// cloneVIPAttrs copies m with its keys unmapped.
func cloneVIPAttrs(m map[netip.Addr]Attrs) map[netip.Addr]Attrs {
	if m == nil {
		return nil
	}
	out := make(map[netip.Addr]Attrs, len(m))
	for a, at := range m {
		out[a.Unmap()] = at
	}
	return out
}

// vipAttrsEqual reports whether a and b set the same attributes on the
// same VIPs.
func vipAttrsEqual(a, b map[netip.Addr]Attrs) bool {
	return maps.EqualFunc(a, b, Attrs.Equal)
}
