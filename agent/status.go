package agent

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lease"
)

// statusSnapshot is what the loop publishes after every pass for the API:
// an immutable copy, so `vipctl status` never waits on the loop (and works
// while it is busy), and never makes the loop wait on the API.
type statusSnapshot struct {
	node      string
	version   string
	address   string // this node's membership address
	withdrawn bool
	quorum    lease.Quorum
	members   []memberInfo
	view      []Member
	vips      []vipSnapshot
	fence     *apipb.FenceStatus
	// nodeReasons are the Node's withdraw reasons; kube the Node watch
	// (nil: off); warnings what an operator should know.
	nodeReasons []string
	kube        *apipb.KubernetesStatus
	warnings    []string
}

// vipSnapshot is one VIP in a statusSnapshot.
type vipSnapshot struct {
	name, address, mode string
	owner, reason       string
	election            ElectionVIP
	held, healthy       bool
	healthDetail        string
	healthSince         time.Time
}

// publishSnapshot stores the status of this pass for the API.
func (a *Agent) publishSnapshot(members []memberInfo, view []Member, q lease.Quorum) {
	c := a.st.cfg
	s := &statusSnapshot{
		node:      a.self,
		version:   a.opts.Version,
		address:   net.JoinHostPort(c.Cluster.BindAddr().String(), strconv.Itoa(c.Cluster.BindPort)),
		withdrawn: a.st.withdrawn,
		quorum:    q,
		members:   members,
		view:      view,
		fence:     fenceStatus(a.st.lease, a.now()),
		kube:      a.st.node.status(),
	}
	s.nodeReasons = slices.Clone(a.st.node.reasons)
	if w := a.st.node.warning(); w != "" {
		s.warnings = append(s.warnings, w)
	}
	if w := priorityWarning(view, a.st.cfg); w != "" {
		s.warnings = append(s.warnings, w)
	}
	for _, name := range a.vipNames() {
		v := a.st.vips[name]
		s.vips = append(s.vips, vipSnapshot{
			name: name, address: v.cfg.Addr().String(), mode: v.cfg.Mode,
			owner: v.owner, reason: v.reason, election: a.electionVIP(v),
			held: v.held, healthy: v.healthy, healthDetail: v.healthDetail, healthSince: v.healthSince,
		})
	}
	a.snapshot.Store(s)
}

// priorityWarning says, when priorities, preempt delays or groups are
// configured here or published by a member but do not count (a member
// runs a release that does not know them), which members hold them off.
func priorityWarning(view []Member, c *config.Config) string {
	if priorityAware(view) {
		return ""
	}
	used := false
	for _, v := range c.VIPs {
		used = used || v.Priority != config.DefaultPriority || v.PreemptDelayDuration() > 0 || v.Group != ""
	}
	var old []string
	for _, m := range view {
		for _, vm := range m.Meta.VIPs {
			used = used || vm.Priority != 0
		}
		if m.State.Usable() && m.Meta.Valid && !m.Meta.PriorityAware {
			old = append(old, sanitize(m.Name))
		}
	}
	if !used {
		return ""
	}
	sort.Strings(old)
	return fmt.Sprintf("priorities, preempt delays and groups are not in effect: %s run%s a release without them (a rolling upgrade?); every node elects by rank alone until all run this one",
		strings.Join(old, ", "), map[bool]string{true: "s", false: ""}[len(old) == 1])
}

// fenceStatus is the fence as `vipctl status` shows it.
func fenceStatus(s lease.State, now time.Time) *apipb.FenceStatus {
	fs := &apipb.FenceStatus{ReleaseAfterMs: s.Timers().Release.Milliseconds(), EvidenceAgeMs: -1}
	switch {
	case !s.Required():
		fs.State = "off"
	case s.CanHold():
		fs.State = "held"
	default:
		fs.State = "expired"
	}
	if !s.Evidence().IsZero() {
		fs.EvidenceAgeMs = now.Sub(s.Evidence()).Milliseconds()
	}
	return fs
}

// response builds the API's status answer (without BGP peers, which the API
// server adds outside the loop).
func (s *statusSnapshot) response() *apipb.StatusResponse {
	resp := &apipb.StatusResponse{
		Node: s.node, Withdrawn: s.withdrawn, Quorum: s.quorum.OK, Version: s.version, Healthy: true,
		KnownMembers: int32(s.quorum.Known), AliveMembers: int32(s.quorum.Alive),
		Fence: s.fence, NodeWithdrawReasons: s.nodeReasons, Kubernetes: s.kube, Warnings: s.warnings,
	}
	byName := map[string]memberInfo{}
	for _, m := range s.members {
		byName[m.Name] = m
	}
	for _, mb := range s.view {
		addr := byName[mb.Name].Address
		if mb.Name == s.node {
			addr = s.address
		}
		healthy := mb.Meta.Valid
		for _, v := range s.vips {
			if !mb.Meta.VIP(config.VIPKey(v.name)).Healthy {
				healthy = false
			}
		}
		resp.Members = append(resp.Members, &apipb.MemberStatus{
			Name: sanitize(mb.Name), Address: addr, State: mb.State.String(),
			Withdrawn: mb.Meta.Withdrawn, Healthy: healthy, Self: mb.Name == s.node, NodeWithdrawn: mb.Meta.NodeWithdrawn,
		})
	}
	sort.Slice(resp.Members, func(i, j int) bool { return resp.Members[i].Name < resp.Members[j].Name })
	for _, v := range s.vips {
		vs := &apipb.VIPStatus{
			Name: v.name, Address: v.address, Mode: v.mode,
			Owner: sanitize(v.owner), Held: v.held, Healthy: v.healthy, Reason: v.reason,
			HealthDetail: v.healthText(),
		}
		if !v.healthy {
			resp.Healthy = false
		}
		for _, m := range s.view {
			if m.State <= StateSuspect && m.Meta.VIP(config.VIPKey(v.name)).Held {
				vs.Holders = append(vs.Holders, sanitize(m.Name))
			}
		}
		sort.Strings(vs.Holders)
		vs.Eligibility = s.eligibility(v)
		resp.Vips = append(resp.Vips, vs)
	}
	return resp
}

// healthText is the VIP's health in words, with the time of the last change.
func (v vipSnapshot) healthText() string {
	if v.healthDetail == "" {
		if v.healthy {
			return "healthy"
		}
		return "unhealthy (no check result yet)"
	}
	if v.healthSince.IsZero() {
		return v.healthDetail
	}
	verdict, detail, _ := strings.Cut(v.healthDetail, ": ")
	s := verdict + " since " + v.healthSince.Format(time.TimeOnly)
	if detail != "" {
		s += ": " + detail
	}
	return s
}

// eligibility lists every member with whether it may own v now and, when
// it may not, why: the same rules as Elect, said in words.
func (s *statusSnapshot) eligibility(v vipSnapshot) []*apipb.NodeEligibility {
	res := Elect(s.view, v.election)
	since := map[string]time.Time{}
	for _, m := range s.members {
		since[m.Name] = m.Since
	}
	var out []*apipb.NodeEligibility
	for _, m := range s.view {
		vm := m.Meta.VIP(config.VIPKey(v.name))
		e := &apipb.NodeEligibility{Node: sanitize(m.Name), Eligible: slices.Contains(res.Eligible, m.Name),
			Priority: int32(vm.priority()), Order: int32(slices.Index(res.Eligible, m.Name) + 1), Waiting: vm.Waiting && res.Priorities}
		if m.Name == s.node {
			since[m.Name] = v.healthSince
			if e.Eligible && !s.quorum.OK {
				e.Eligible, e.Order = false, 0
				e.Reason = fmt.Sprintf("no quorum (%d of %d known members alive)", s.quorum.Alive, s.quorum.Known)
			}
		}
		if !e.Eligible && e.Reason == "" {
			e.Reason = res.WhyNot(m, v.election)
		}
		if t := since[m.Name]; !t.IsZero() {
			e.SinceUnixNano = t.UnixNano()
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// reasons describes, for a refused or timed-out withdraw, why the other
// nodes cannot take vip: "cp-2: unhealthy (since 12:03:10); cp-3: withdrawn".
func (s *statusSnapshot) reasons(vip string) string {
	for _, v := range s.vips {
		if v.name != vip {
			continue
		}
		var parts []string
		for _, e := range s.eligibility(v) {
			if e.Node == sanitize(s.node) {
				continue
			}
			p := e.Node + ": "
			if e.Eligible {
				p += "eligible"
			} else {
				p += e.Reason
				if e.SinceUnixNano != 0 {
					p += " since " + time.Unix(0, e.SinceUnixNano).Format(time.TimeOnly)
				}
			}
			parts = append(parts, p)
		}
		if len(parts) == 0 {
			return "no other member known"
		}
		return strings.Join(parts, "; ")
	}
	return ""
}

// sanitize makes a name received from the network safe to print: control
// and non-printing characters (newlines, escape sequences) are shown as Go
// escapes.
func sanitize(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			q := strconv.QuoteToASCII(s)
			return q[1 : len(q)-1]
		}
	}
	return s
}
