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
}

// MemberJSON is one cluster member.
type MemberJSON struct {
	Name      string `json:"name"`
	Address   string `json:"address"`
	State     string `json:"state"`
	Withdrawn bool   `json:"withdrawn"`
	Healthy   bool   `json:"healthy"`
	Self      bool   `json:"self"`
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
}

// BGPPeerJSON is one BGP session.
type BGPPeerJSON struct {
	Address       string `json:"address"`
	ASN           uint32 `json:"asn"`
	State         string `json:"state"`
	UptimeSeconds int64  `json:"uptime_seconds"`
	Received      uint64 `json:"received"`
	Advertised    uint64 `json:"advertised"`
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
	}
	for _, m := range st.GetMembers() {
		out.Members = append(out.Members, MemberJSON{m.GetName(), m.GetAddress(), m.GetState(), m.GetWithdrawn(), m.GetHealthy(), m.GetSelf()})
	}
	for _, v := range st.GetVips() {
		holders := v.GetHolders()
		if holders == nil {
			holders = []string{}
		}
		out.VIPs = append(out.VIPs, VIPJSON{v.GetName(), v.GetAddress(), v.GetMode(), v.GetOwner(), v.GetHeld(), holders, v.GetHealthy(), v.GetReason()})
	}
	for _, p := range st.GetBgpPeers() {
		out.BGPPeers = append(out.BGPPeers, BGPPeerJSON{p.GetAddress(), p.GetAsn(), p.GetState(), p.GetUptimeSeconds(), p.GetReceived(), p.GetAdvertised()})
	}
	return out
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
