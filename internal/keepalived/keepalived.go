// Package keepalived reads a keepalived.conf of the shapes the kubeadm HA
// guide uses (vrrp_instance, vrrp_script, unicast peers,
// virtual_ipaddress) and writes the vipd.toml that does the same, with a
// note for everything vipd has no equivalent for: `vipd
// convert-keepalived`. docs/keepalived.md explains each mapping.
package keepalived

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Node is one statement of a keepalived.conf: its words, the line it is
// on, and, for a block ("vrrp_instance VI_1 { ... }"), the statements in
// it.
type Node struct {
	Words    []string
	Line     int
	Children []*Node
	Block    bool
}

// Conf is a parsed keepalived.conf: its top-level statements.
type Conf struct {
	Nodes []*Node
}

// Parse reads keepalived.conf text: statements one a line, words split on
// blanks ("quoted" words kept whole), blocks in braces, comments from "!"
// or "#" to the end of the line.
func Parse(text string) (*Conf, error) {
	root := &Node{Block: true}
	stack := []*Node{root}
	for i, line := range strings.Split(text, "\n") {
		words, err := splitWords(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		for len(words) > 0 {
			top := stack[len(stack)-1]
			j := 0
			for j < len(words) && words[j] != "{" && words[j] != "}" {
				j++
			}
			if j > 0 {
				n := &Node{Words: words[:j], Line: i + 1}
				if j < len(words) && words[j] == "{" {
					n.Block = true
					j++
					top.Children = append(top.Children, n)
					stack = append(stack, n)
				} else {
					top.Children = append(top.Children, n)
				}
				words = words[j:]
				continue
			}
			switch words[0] {
			case "{": // a brace alone opens an anonymous block: keep its content
				n := &Node{Line: i + 1, Block: true}
				top.Children = append(top.Children, n)
				stack = append(stack, n)
			case "}":
				if len(stack) == 1 {
					return nil, fmt.Errorf("line %d: } without {", i+1)
				}
				stack = stack[:len(stack)-1]
			}
			words = words[1:]
		}
	}
	if len(stack) > 1 {
		open := stack[len(stack)-1]
		return nil, fmt.Errorf("line %d: %s: no closing }", open.Line, strings.Join(open.Words, " "))
	}
	return &Conf{Nodes: root.Children}, nil
}

// splitWords splits a line into words, braces on their own, quotes kept
// together, comments dropped.
func splitWords(line string) ([]string, error) {
	var words []string
	for i := 0; i < len(line); {
		switch c := line[i]; {
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '!' || c == '#':
			return words, nil
		case c == '{' || c == '}':
			words = append(words, string(c))
			i++
		case c == '"':
			end := strings.IndexByte(line[i+1:], '"')
			if end < 0 {
				return nil, errors.New("unterminated quote")
			}
			words = append(words, line[i+1:i+1+end])
			i += end + 2
		default:
			j := i
			for j < len(line) && !strings.ContainsRune(" \t\r{}!#\"", rune(line[j])) {
				j++
			}
			words = append(words, line[i:j])
			i = j
		}
	}
	return words, nil
}

// vip is one converted VIP.
type vip struct {
	name, address, iface string
	health               *script
	// notify are the instance's notify scripts by the vipd state they run
	// at (master, backup, fault): keepalived command lines.
	notify map[string]string
	// priority is the instance's priority (0: not written); preempt and
	// preemptDelay ("": none) its preemption; group the instance's name
	// when it has more than one address (they move together).
	priority     int
	preempt      bool
	preemptDelay string
	group        string
}

// script is a converted vrrp_script.
type script struct {
	argv       []string
	interval   string
	rise, fall int
}

// Convert writes the vipd.toml that does what conf does, and the notes:
// one line for each setting it could not carry over, with what to do
// instead.
func Convert(conf *Conf) (out string, notes []string) {
	note := func(n *Node, format string, args ...any) {
		notes = append(notes, fmt.Sprintf("line %d: ", n.Line)+fmt.Sprintf(format, args...))
	}
	scripts := map[string]*script{}
	for _, n := range conf.Nodes {
		if len(n.Words) == 2 && n.Words[0] == "vrrp_script" && n.Block {
			scripts[n.Words[1]] = convertScript(n, note)
		}
	}
	var (
		vips          []vip
		bindAddr      string
		peers         []string
		sawInstance   bool
		ifaceOfVRRP   string
		usedScriptFor = map[string]bool{}
	)
	for _, n := range conf.Nodes {
		switch key(n) {
		case "vrrp_script":
		case "global_defs":
			for _, c := range n.Children {
				note(c, "global_defs %s: not needed (vipd names a node by node_name, the hostname by default)", strings.Join(c.Words, " "))
			}
		case "vrrp_instance":
			sawInstance = true
			iface, preempt, priority, delay := "", true, 0, ""
			var delayNode *Node
			notify, generic := map[string]string{}, ""
			var health *script
			var addrs []*Node
			for _, c := range n.Children {
				switch key(c) {
				case "interface":
					iface = arg(c)
					ifaceOfVRRP = iface
				case "state":
					note(c, "state %s: vipd has no initial MASTER/BACKUP; the nodes elect the owner by priority, then rank (a hash of node and VIP names)", arg(c))
				case "priority":
					p, err := strconv.Atoi(arg(c))
					if err != nil || p < 1 || p > 255 {
						note(c, "priority %s: not 1-255; not carried over (vip.priority)", arg(c))
						break
					}
					priority = p
					note(c, "priority %d: carried over as vip.priority, this node's own as in keepalived; it counts once every node runs a vipd that knows priorities", p)
				case "virtual_router_id":
					note(c, "virtual_router_id %s: not needed (vipd's membership is its own protocol on cluster.bind_port, 7946)", arg(c))
				case "advert_int":
					note(c, "advert_int %s: vipd's lease detects a lost owner in 0.4 s (cluster.failure_detection = \"fast\"; \"lan\": 1.6 s)", arg(c))
				case "authentication":
					note(c, "authentication: set cluster.key_file to a key every node shares (head -c 32 /dev/urandom | base64 > /etc/vipd/cluster.key; chown vipd, chmod 0600): it encrypts and authenticates membership, which VRRP's password did not")
				case "unicast_src_ip":
					bindAddr = arg(c)
				case "unicast_peer":
					for _, p := range c.Children {
						peers = append(peers, arg0(p))
					}
				case "virtual_ipaddress":
					addrs = append(addrs, c.Children...)
				case "track_script":
					for _, s := range c.Children {
						name := arg0(s)
						sc, ok := scripts[name]
						switch {
						case !ok:
							note(s, "track_script %s: no vrrp_script of that name", name)
						case health != nil:
							note(s, "track_script %s: vipd takes one health check per VIP; combine the scripts into one command", name)
						default:
							health = sc
							usedScriptFor[name] = true
						}
						if len(s.Words) > 1 {
							note(s, "track_script %s %s: weights are not carried over (a failing check makes the node ineligible; vipd does not lower its priority)", name, strings.Join(s.Words[1:], " "))
						}
					}
				case "track_interface":
					note(c, "track_interface: vipd watches the VIP's own interface (a node whose interface is down is not eligible); others are not tracked")
				case "nopreempt":
					preempt = false
				case "preempt_delay":
					delay, delayNode = arg(c), c
				case "notify_master", "notify_backup", "notify_fault":
					st := strings.TrimPrefix(key(c), "notify_")
					notify[st] = arg(c)
					note(c, "%s %s: carried over as [hooks] command, run by /bin/sh when the VIP's state on this node becomes %s (keepalived ran it without a shell): check the quoting", key(c), arg(c), st)
				case "notify":
					generic = arg(c)
					note(c, "notify %s: carried over as [hooks] command, run by /bin/sh with keepalived's arguments (INSTANCE %s STATE PRIORITY) at each change of the VIP's state on this node (the VIPD_ variables say more): check the quoting", arg(c), arg(n))
				case "notify_stop":
					note(c, "notify_stop %s: not carried over: vipd has no stop state; at a stop it releases the VIP and runs the hook for backup", arg(c))
				default:
					note(c, "%s: (no vipd equivalent)", strings.Join(c.Words, " "))
				}
			}
			if generic != "" {
				// keepalived runs both the generic script and the state's,
				// with the instance's priority (100 when not written).
				prio := cmp.Or(priority, 100)
				for _, st := range []string{"master", "backup", "fault"} {
					line := fmt.Sprintf("%s INSTANCE %s %s %d", generic, arg(n), strings.ToUpper(st), prio)
					if own := notify[st]; own != "" {
						line = own + "; " + line
					}
					notify[st] = line
				}
			}
			for _, a := range addrs {
				v, ok := convertAddress(a, iface, note)
				if !ok {
					continue
				}
				v.name = "apiserver"
				if len(vips) > 0 {
					v.name = fmt.Sprintf("apiserver-%d", len(vips)+1)
				}
				v.health = health
				v.notify = notify
				v.priority, v.preempt = priority, preempt
				if preempt && delay != "" {
					v.preemptDelay = convertDelay(delayNode, delay, note)
				}
				if len(addrs) > 1 {
					v.group = strings.Join(n.Words[1:], " ")
				}
				vips = append(vips, v)
			}
			if delayNode != nil && !preempt {
				note(delayNode, "preempt_delay %s: ignored with nopreempt, as keepalived does", delay)
			}
			if preempt {
				note(n, "vrrp_instance %s preempts (keepalived's default): carried over as preempt = true, so a recovered node of higher priority takes the VIP back; vipd's default (preempt = false) keeps it where it is, one move fewer", strings.Join(n.Words[1:], " "))
			}
			if len(addrs) > 1 {
				note(n, "vrrp_instance %s has %d addresses: they move together, as one group (vip.group)", strings.Join(n.Words[1:], " "), len(addrs))
			}
		case "virtual_server", "virtual_server_group":
			note(n, "%s: vipd does not load-balance (keep HAProxy, or point clients at the VIP's apiserver directly; docs/keepalived.md)", strings.Join(n.Words, " "))
		default:
			note(n, "%s: (no vipd equivalent)", strings.Join(n.Words, " "))
		}
	}
	for name := range scripts {
		if !usedScriptFor[name] {
			notes = append(notes, fmt.Sprintf("vrrp_script %s: tracked by no vrrp_instance", name))
		}
	}
	if !sawInstance {
		notes = append(notes, "no vrrp_instance: nothing to convert")
	}
	if bindAddr == "" {
		at := "on " + ifaceOfVRRP
		if ifaceOfVRRP == "" {
			at = "on the cluster network"
		}
		notes = append(notes, fmt.Sprintf("cluster.bind_address: set it to this node's address %s (keepalived used multicast; vipd needs the address it listens on for membership)", at))
	}
	if len(peers) == 0 {
		notes = append(notes, "cluster.peers: list the other control-plane nodes' addresses (keepalived found them by multicast; vipd joins them)")
	}
	return render(bindAddr, peers, vips), notes
}

// convertScript reads a vrrp_script block.
func convertScript(n *Node, note func(*Node, string, ...any)) *script {
	s := &script{interval: "1s"} // keepalived's default interval
	for _, c := range n.Children {
		switch key(c) {
		case "script":
			s.argv = strings.Fields(arg(c))
			if strings.ContainsAny(arg(c), "<>|&;$`*") {
				note(c, "script %q: vipd runs a health command without a shell (argv split on blanks); wrap it: [\"/bin/sh\", \"-c\", ...]", arg(c))
			}
		case "interval":
			s.interval = arg(c) + "s"
		case "rise":
			s.rise, _ = strconv.Atoi(arg(c))
		case "fall":
			s.fall, _ = strconv.Atoi(arg(c))
		case "weight":
			note(c, "vrrp_script %s weight %s: vipd has no priorities; a failing check makes the node ineligible for the VIP", arg0(&Node{Words: n.Words[1:]}), arg(c))
		case "timeout":
			note(c, "vrrp_script timeout %s: set vip.health.timeout = \"%ss\" if the default (500ms) is too short", arg(c), arg(c))
		case "user":
			note(c, "vrrp_script user %s: vipd runs health commands as its own user (vipd under systemd)", strings.Join(c.Words[1:], " "))
		default:
			note(c, "vrrp_script %s: no vipd equivalent", strings.Join(c.Words, " "))
		}
	}
	return s
}

// convertAddress reads one virtual_ipaddress line: "ADDR[/LEN] [dev IF]
// [label L] ...".
func convertAddress(n *Node, iface string, note func(*Node, string, ...any)) (vip, bool) {
	if len(n.Words) == 0 {
		return vip{}, false
	}
	s := n.Words[0]
	if p, err := netip.ParsePrefix(s); err == nil {
		s = p.Addr().String() // vipd takes the interface's prefix length
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		note(n, "virtual_ipaddress %s: not an address", n.Words[0])
		return vip{}, false
	}
	for i := 1; i+1 < len(n.Words); i += 2 {
		switch n.Words[i] {
		case "dev":
			iface = n.Words[i+1]
		case "label":
			note(n, "virtual_ipaddress label %s: (vipd adds the address without a label)", n.Words[i+1])
		default:
			note(n, "virtual_ipaddress %s %s: no vipd equivalent", n.Words[i], n.Words[i+1])
		}
	}
	return vip{address: a.String(), iface: iface}, true
}

// convertDelay is keepalived's preempt_delay (seconds, 0-1000) as a
// vip.preempt_delay; "" after a note when it is not a number of seconds.
func convertDelay(n *Node, s string, note func(*Node, string, ...any)) string {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1000 {
		note(n, "preempt_delay %s: not 0-1000 seconds; not carried over", s)
		return ""
	}
	d := time.Duration(f * float64(time.Second)).Round(time.Millisecond)
	note(n, "preempt_delay %s: carried over as vip.preempt_delay = %q", s, d)
	return d.String()
}

// render writes the vipd.toml.
func render(bindAddr string, peers []string, vips []vip) string {
	var b strings.Builder
	b.WriteString("# Written by vipd convert-keepalived from a keepalived.conf: review it (the\n")
	b.WriteString("# notes on standard error say what was not carried over), then run\n")
	b.WriteString("# vipd --check --config FILE. Every key: vipd.toml.example.\n\n")
	b.WriteString("[cluster]\n")
	if bindAddr != "" {
		fmt.Fprintf(&b, "bind_address = %q\n", bindAddr)
	} else {
		b.WriteString("# bind_address = \"\"  # this node's address on the cluster network: required\n")
	}
	if len(peers) > 0 {
		q := make([]string, len(peers))
		for i, p := range peers {
			q[i] = strconv.Quote(p)
		}
		fmt.Fprintf(&b, "peers = [%s]\n", strings.Join(q, ", "))
	} else {
		b.WriteString("# peers = []  # the other control-plane nodes' addresses\n")
	}
	b.WriteString("# key_file = \"/etc/vipd/cluster.key\"  # strongly recommended: see the notes\n")
	for _, v := range vips {
		b.WriteString("\n[[vip]]\n")
		fmt.Fprintf(&b, "name = %q\naddress = %q\n", v.name, v.address)
		if v.iface != "" {
			fmt.Fprintf(&b, "interface = %q\n", v.iface)
		} else {
			b.WriteString("# interface = \"\"  # the LAN interface: required\n")
		}
		if v.priority != 0 {
			fmt.Fprintf(&b, "priority = %d\n", v.priority)
		}
		if v.preempt {
			b.WriteString("preempt = true\n")
		}
		if v.preemptDelay != "" && v.preemptDelay != "0s" {
			fmt.Fprintf(&b, "preempt_delay = %q\n", v.preemptDelay)
		}
		if v.group != "" {
			fmt.Fprintf(&b, "group = %q\n", v.group)
		}
		if h := v.health; h != nil && len(h.argv) > 0 {
			b.WriteString("[vip.health]\n")
			q := make([]string, len(h.argv))
			for i, a := range h.argv {
				q[i] = strconv.Quote(a)
			}
			fmt.Fprintf(&b, "command = [%s]\n", strings.Join(q, ", "))
			fmt.Fprintf(&b, "interval = %q\n", h.interval)
			if h.rise > 0 {
				fmt.Fprintf(&b, "rise = %d\n", h.rise)
			}
			if h.fall > 0 {
				fmt.Fprintf(&b, "fall = %d\n", h.fall)
			}
		}
	}
	if cmd := hookCommand(vips); cmd != "" {
		b.WriteString("\n# keepalived's notify scripts, run by /bin/sh at each change of a VIP's state on\n")
		b.WriteString("# this node (VIPD_VIP; VIPD_NEW_STATE: master, backup, fault): docs/keepalived.md.\n")
		b.WriteString("[hooks]\n")
		fmt.Fprintf(&b, "command = [\"/bin/sh\", \"-c\", %s]\n", strconv.Quote(cmd))
	}
	return b.String()
}

// hookCommand is the shell command that runs the VIPs' notify scripts for
// the state a hook is told ("" without any).
func hookCommand(vips []vip) string {
	var cases []string
	for _, v := range vips {
		for _, st := range []string{"master", "backup", "fault"} {
			if line := v.notify[st]; line != "" {
				cases = append(cases, fmt.Sprintf("%s:%s) %s ;;", v.name, st, line))
			}
		}
	}
	if len(cases) == 0 {
		return ""
	}
	return `case "$VIPD_VIP:$VIPD_NEW_STATE" in ` + strings.Join(cases, " ") + " esac"
}

func key(n *Node) string {
	if len(n.Words) == 0 {
		return ""
	}
	return n.Words[0]
}

// arg is a statement's first argument ("" without one).
func arg(n *Node) string {
	if len(n.Words) < 2 {
		return ""
	}
	return n.Words[1]
}

// arg0 is a statement's first word (a line of a list block).
func arg0(n *Node) string {
	if len(n.Words) == 0 {
		return ""
	}
	return n.Words[0]
}
