package netlab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// MembershipPort is vipd's cluster.bind_port in every lab configuration
// (vipd's default): memberlist's UDP and TCP port, which also carries the
// lease's heartbeats.
const MembershipPort = 7946

// Direction says which of a host's packets a filter drops.
type Direction string

// The directions of DropTraffic.
const (
	// Both drops what the host receives and what it sends.
	Both Direction = "both"
	// In drops only what the host receives: it still speaks, hears nothing.
	In Direction = "in"
	// Out drops only what the host sends: it hears, nobody hears it.
	Out Direction = "out"
)

// MembershipMatches are the nft matches of vipd's membership traffic: UDP
// and TCP with MembershipPort as source or destination port.
func MembershipMatches() []string {
	return []string{
		fmt.Sprintf("meta l4proto { tcp, udp } th dport %d", MembershipPort),
		fmt.Sprintf("meta l4proto { tcp, udp } th sport %d", MembershipPort),
	}
}

// VRRPMatches is the nft match of VRRP (IP protocol 112), keepalived's
// membership traffic.
func VRRPMatches() []string { return []string{"meta l4proto vrrp"} }

// DropTraffic adds the nftables table "inet <table>" to h's namespace: it
// drops the packets h receives (input hook) and/or sends (output hook),
// by dir, that match any of matches; everything else passes (clients still
// reach h). The table goes with the namespace; RemoveTable undoes it
// earlier.
func (l *Lab) DropTraffic(h *Host, table string, dir Direction, matches []string) error {
	rs, err := dropRuleset(table, dir, matches)
	if err != nil {
		return fmt.Errorf("drop traffic on %s: %w", h.Name, err)
	}
	return l.nft(h, table, rs)
}

// dropRuleset renders DropTraffic's table.
func dropRuleset(table string, dir Direction, matches []string) (string, error) {
	if len(matches) == 0 {
		return "", fmt.Errorf("table %s: no matches", table)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", table)
	chain := func(name, hook string) {
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook %s priority raw; policy accept;\n", name, hook)
		for _, m := range matches {
			fmt.Fprintf(&b, "\t\t%s drop\n", m)
		}
		b.WriteString("\t}\n")
	}
	switch dir {
	case Both:
		chain("in", "input")
		chain("out", "output")
	case In:
		chain("in", "input")
	case Out:
		chain("out", "output")
	default:
		return "", fmt.Errorf("table %s: direction %q, want both, in or out", table, dir)
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// DropIngressPercent adds the nftables table "netdev <table>" to h's
// namespace: it drops pct percent of every packet arriving on h.Iface(),
// chosen at random (ARP included), at the ingress hook before anything
// else sees them. RemoveTable undoes it.
func (l *Lab) DropIngressPercent(h *Host, table string, pct int) error {
	if pct < 0 || pct > 100 {
		return fmt.Errorf("drop ingress on %s: %d%%, want 0-100", h.Name, pct)
	}
	return l.nft(h, table, fmt.Sprintf("table netdev %s {\n\tchain in {\n\t\ttype filter hook ingress device %q priority -500; policy accept;\n\t\tnumgen random mod 100 < %d drop\n\t}\n}\n",
		table, h.Iface(), pct))
}

// RemoveTable deletes the nftables table family/table ("inet", "netdev")
// from h's namespace.
func (l *Lab) RemoveTable(h *Host, family, table string) error {
	_, err := l.Exec(h, "nft", "delete", "table", family, table)
	return err
}

// nft loads a ruleset file into h's namespace (kept in h.Dir for the
// record).
func (l *Lab) nft(h *Host, table, ruleset string) error {
	path := filepath.Join(h.Dir, "nft-"+table+".conf")
	if err := os.WriteFile(path, []byte(ruleset), 0o644); err != nil {
		return err
	}
	if _, err := l.Exec(h, "nft", "-f", path); err != nil {
		return fmt.Errorf("nft on %s: %w", h.Name, err)
	}
	return nil
}

// StartBurners starts n CPU burners (lab/netlab/cmd/burn: a plain busy
// loop each), every one ending by itself after d and killed by PID at
// teardown at the latest. They run in the client namespace (the first
// node's without one); a namespace does not limit CPU.
func (l *Lab) StartBurners(n int, d time.Duration) ([]*Proc, error) {
	h := l.Client
	if h == nil {
		h = l.Nodes[0]
	}
	var ps []*Proc
	for i := 0; i < n; i++ {
		p, err := l.Start(h, fmt.Sprintf("burn %d", i), filepath.Join(h.Dir, "burn.log"), nil, l.Tools.Burn, "-for", d.String())
		if err != nil {
			for _, q := range ps {
				q.Kill()
			}
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// SetReadyz sets the pattern of h's lab HTTP server's /readyz answers
// ('u' 200, 'd' 503, repeated; "" always 200): see lab/netlab/cmd/httpd.
func (l *Lab) SetReadyz(h *Host, pattern string) error {
	_, err := l.Exec(h, "curl", "-sS", "--fail", "--max-time", "2", "-X", "PUT",
		fmt.Sprintf("http://127.0.0.1:%d/-/readyz?pattern=%s", HTTPPort, pattern))
	return err
}

// Readyz returns what h's lab HTTP server says of its /readyz pattern:
// "pattern=udd served=12 failed=8".
func (l *Lab) Readyz(h *Host) (string, error) {
	out, err := l.Exec(h, "curl", "-sS", "--fail", "--max-time", "2", fmt.Sprintf("http://127.0.0.1:%d/-/readyz", HTTPPort))
	return strings.TrimSpace(out), err
}
