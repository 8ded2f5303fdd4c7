package apipb

import "time"

// The JSON output of `vipctl status --json` and `vipctl events --json` is a
// stable interface (documented in docs/operations.md); it is built from
// these types, not from the protobuf messages, so the API can evolve
// without breaking scripts. Tools that read it (the lab harness) decode
// into the same types.

// StatusJSON is `vipctl status --json`.
type StatusJSON struct {
	Node      string        `json:"node"`
	Version   string        `json:"version"`
	Withdrawn bool          `json:"withdrawn"`
	Healthy   bool          `json:"healthy"`
	Quorum    bool          `json:"quorum"`
	Members   []MemberJSON  `json:"members"`
	VIPs      []VIPJSON     `json:"vips"`
	BGPPeers  []BGPPeerJSON `json:"bgp_peers"`
	// KnownMembers and AliveMembers are the quorum base and how many of it
	// this node sees alive, itself included (0 and 0: not reported).
	KnownMembers int32     `json:"known_members"`
	AliveMembers int32     `json:"alive_members"`
	Fence        FenceJSON `json:"fence"`
	// NodeWithdrawReasons are why this node's Kubernetes Node withdraws it
	// ([] when it does not).
	NodeWithdrawReasons []string `json:"node_withdraw_reasons"`
	// Kubernetes is the watch of this node's Node; null when it is off.
	Kubernetes *KubernetesJSON `json:"kubernetes"`
	// Warnings are conditions worth an operator's attention, in words.
	Warnings []string `json:"warnings"`
}

// KubernetesJSON is the watch of this node's Kubernetes Node.
type KubernetesJSON struct {
	// Explicit: enabled = true is configured.
	Explicit   bool   `json:"explicit"`
	Node       string `json:"node"`
	Server     string `json:"server"`
	Kubeconfig string `json:"kubeconfig"`
	// Reachable: the last read of the Node succeeded; Error says why not;
	// Since is when Reachable last changed.
	Reachable  bool       `json:"reachable"`
	Error      string     `json:"error"`
	Since      *time.Time `json:"since"`
	Registered bool       `json:"registered"`
	// VerdictSince is when the Node's withdraw last changed (null: never).
	VerdictSince *time.Time `json:"verdict_since"`
}

// FenceJSON is this node's lease on holding VIPs.
type FenceJSON struct {
	// State is "off" (quorum not required), "held" or "expired"; "" when
	// not reported.
	State string `json:"state"`
	// EvidenceAgeMs is the time since a majority last confirmed seeing this
	// node, -1 for never.
	EvidenceAgeMs  int64 `json:"evidence_age_ms"`
	ReleaseAfterMs int64 `json:"release_after_ms"`
}

// MemberJSON is one cluster member.
type MemberJSON struct {
	Name      string `json:"name"`
	Address   string `json:"address"`
	State     string `json:"state"`
	Withdrawn bool   `json:"withdrawn"`
	Healthy   bool   `json:"healthy"`
	Self      bool   `json:"self"`
	// NodeWithdrawn: its Kubernetes Node withdraws it.
	NodeWithdrawn bool `json:"node_withdrawn"`
}

// VIPJSON is one VIP.
type VIPJSON struct {
	Name    string   `json:"name"`
	Address string   `json:"address"`
	Mode    string   `json:"mode"`
	Owner   string   `json:"owner"`
	Held    bool     `json:"held"`
	Holders []string `json:"holders"`
	Healthy bool     `json:"healthy"`
	Reason  string   `json:"reason"`
	// HealthDetail is this node's last health verdict in words.
	HealthDetail string `json:"health_detail"`
	// Eligibility has one entry per member: whether it may own the VIP
	// now, and why not.
	Eligibility []EligibilityJSON `json:"eligibility"`
}

// EligibilityJSON is one member's eligibility for a VIP.
type EligibilityJSON struct {
	Node     string `json:"node"`
	Eligible bool   `json:"eligible"`
	// Reason is why the node is not eligible ("" when it is): withdrawn,
	// withdrawn by its Node, unhealthy, interface down, leaving, dead, left, no quorum, metadata
	// unreadable.
	Reason string `json:"reason"`
	// Since is when the node's state last changed; nil when unknown.
	Since *time.Time `json:"since"`
	// Priority is the node's priority for the VIP (0: not reported);
	// Order its place in the election's order, from 1 (0: not
	// eligible); Waiting: it waits out its preempt delay.
	Priority int32 `json:"priority"`
	Order    int32 `json:"order"`
	Waiting  bool  `json:"waiting"`
}

// BGPPeerJSON is one BGP session.
type BGPPeerJSON struct {
	Address       string `json:"address"`
	ASN           uint32 `json:"asn"`
	State         string `json:"state"`
	UptimeSeconds int64  `json:"uptime_seconds"`
	Received      uint64 `json:"received"`
	Advertised    uint64 `json:"advertised"`
	Accepted      uint64 `json:"accepted"`
	MaxPrefixes   uint32 `json:"max_prefixes"`
	// BFDState is "" when BFD is off, else down, init, up or admin_down.
	BFDState      string `json:"bfd_state"`
	BFDDiagnostic string `json:"bfd_diagnostic"`
}

// EventJSON is one line of `vipctl events --json`.
type EventJSON struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	VIP     string    `json:"vip,omitempty"`
	Node    string    `json:"node,omitempty"`
	From    string    `json:"from,omitempty"`
	To      string    `json:"to,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
}

// ToJSON converts a status answer to its stable JSON form.
func (st *StatusResponse) ToJSON() StatusJSON {
	out := StatusJSON{
		Node: st.GetNode(), Version: st.GetVersion(), Withdrawn: st.GetWithdrawn(),
		Healthy: st.GetHealthy(), Quorum: st.GetQuorum(),
		Members: []MemberJSON{}, VIPs: []VIPJSON{}, BGPPeers: []BGPPeerJSON{},
		KnownMembers: st.GetKnownMembers(), AliveMembers: st.GetAliveMembers(),
		NodeWithdrawReasons: append([]string{}, st.GetNodeWithdrawReasons()...), Warnings: append([]string{}, st.GetWarnings()...),
	}
	if k := st.GetKubernetes(); k.GetEnabled() {
		out.Kubernetes = &KubernetesJSON{Explicit: k.GetExplicit(), Node: k.GetNode(), Server: k.GetServer(), Kubeconfig: k.GetKubeconfig(),
			Reachable: k.GetReachable(), Error: k.GetError(), Since: unixTime(k.GetSinceUnixNano()), Registered: k.GetRegistered(),
			VerdictSince: unixTime(k.GetVerdictSinceUnixNano())}
	}
	if f := st.GetFence(); f != nil {
		out.Fence = FenceJSON{f.GetState(), f.GetEvidenceAgeMs(), f.GetReleaseAfterMs()}
	}
	for _, m := range st.GetMembers() {
		out.Members = append(out.Members, MemberJSON{m.GetName(), m.GetAddress(), m.GetState(), m.GetWithdrawn(), m.GetHealthy(), m.GetSelf(), m.GetNodeWithdrawn()})
	}
	for _, v := range st.GetVips() {
		holders := v.GetHolders()
		if holders == nil {
			holders = []string{}
		}
		elig := []EligibilityJSON{}
		for _, e := range v.GetEligibility() {
			ej := EligibilityJSON{Node: e.GetNode(), Eligible: e.GetEligible(), Reason: e.GetReason(), Since: unixTime(e.GetSinceUnixNano()),
				Priority: e.GetPriority(), Order: e.GetOrder(), Waiting: e.GetWaiting()}
			elig = append(elig, ej)
		}
		out.VIPs = append(out.VIPs, VIPJSON{v.GetName(), v.GetAddress(), v.GetMode(), v.GetOwner(), v.GetHeld(), holders,
			v.GetHealthy(), v.GetReason(), v.GetHealthDetail(), elig})
	}
	for _, p := range st.GetBgpPeers() {
		out.BGPPeers = append(out.BGPPeers, BGPPeerJSON{p.GetAddress(), p.GetAsn(), p.GetState(), p.GetUptimeSeconds(),
			p.GetReceived(), p.GetAdvertised(), p.GetAccepted(), p.GetMaxPrefixes(), p.GetBfdState(), p.GetBfdDiagnostic()})
	}
	return out
}

// unixTime is n (Unix nanoseconds) in UTC, nil for 0 (unknown).
func unixTime(n int64) *time.Time {
	if n <= 0 {
		return nil
	}
	t := time.Unix(0, n).UTC()
	return &t
}

// ToJSON converts an event to its stable JSON form.
func (e *Event) ToJSON() EventJSON {
	return EventJSON{time.Unix(0, e.GetUnixNano()).UTC(), e.GetKind(), e.GetVip(), e.GetNode(), e.GetFrom(), e.GetTo(), e.GetReason(), e.GetMessage()}
}

// Member returns the member called name, or false.
func (s StatusJSON) Member(name string) (MemberJSON, bool) {
	for _, m := range s.Members {
		if m.Name == name {
			return m, true
		}
	}
	return MemberJSON{}, false
}

// VIP returns the VIP called name, or false.
func (s StatusJSON) VIP(name string) (VIPJSON, bool) {
	for _, v := range s.VIPs {
		if v.Name == name {
			return v, true
		}
	}
	return VIPJSON{}, false
}
