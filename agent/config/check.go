package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/user"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/vipd/vipd/internal/childcaps"
	"github.com/vipd/vipd/internal/ifname"
)

type validator struct {
	rules    BackendRules
	path     string
	keys     *keyIndex
	problems []Problem
	// placed are the key paths problems were recorded at.
	placed map[string]bool
	// generic is the file decoded without types (nil in CheckHost).
	generic map[string]any
}

func (v *validator) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	sort.SliceStable(v.problems, func(i, j int) bool {
		a, b := v.problems[i], v.problems[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	ps := v.problems
	if n := len(ps) - MaxProblems; n > 0 {
		ps = append(ps[:MaxProblems:MaxProblems], Problem{Path: v.path, Msg: fmt.Sprintf("and %d more problems", n)})
	}
	return &ConfigError{Problems: ps}
}

// at records a problem about the key at path ("vip[0].address").
func (v *validator) at(path, format string, args ...any) {
	if v.placed == nil {
		v.placed = map[string]bool{}
	}
	v.placed[path] = true
	p, _ := v.keys.lookup(path)
	v.problems = append(v.problems, Problem{v.path, p.Line, p.Col, fmt.Sprintf(format, args...)})
}

func (v *validator) unknownKey(k toml.Key) {
	plain := strings.Join(k, ".")
	msg := fmt.Sprintf("unknown key %q", plain)
	if s := suggest(plain); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	places := v.keys.plain[plain]
	if len(places) == 0 {
		v.at("", "%s", msg)
		return
	}
	for _, path := range places {
		v.at(path, "%s", msg)
	}
}

// checkTypes checks the generically decoded table data against the fields
// of struct type t (by their toml tags), recursing into tables and arrays.
// Keys with no field are left to MetaData.Undecoded.
func (v *validator) checkTypes(data map[string]any, t reflect.Type, prefix string) {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("toml"), ","); tag != "" && tag != "-" {
			fields[tag] = f.Type
		}
	}
	for _, key := range slices.Sorted(maps.Keys(data)) {
		ft, ok := fields[key]
		if !ok {
			continue
		}
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		v.checkValue(data[key], ft, path)
	}
}

// checkValue checks one value against the field type ft.
func (v *validator) checkValue(val any, ft reflect.Type, path string) {
	for ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	bad := func(want string) {
		v.at(path, "%s: must be %s, got %s", stripIndexes(path), want, tomlKind(val))
	}
	switch ft.Kind() {
	case reflect.String:
		if _, ok := val.(string); !ok {
			bad("a string")
		}
	case reflect.Bool:
		if _, ok := val.(bool); !ok {
			bad("true or false")
		}
	case reflect.Int, reflect.Int64, reflect.Uint32:
		n, ok := val.(int64)
		switch {
		case !ok:
			bad("an integer")
		case ft.Kind() == reflect.Uint32 && (n < 0 || n > math.MaxUint32):
			v.at(path, "%s: %d is out of range (0 to %d)", stripIndexes(path), n, uint32(math.MaxUint32))
		}
	case reflect.Slice:
		var items []any
		switch a := val.(type) {
		case []any:
			items = a
		case []map[string]any:
			for _, m := range a {
				items = append(items, m)
			}
		default:
			if ft.Elem().Kind() == reflect.Struct {
				bad("an array of tables ([[" + stripIndexes(path) + "]])")
			} else {
				bad("an array")
			}
			return
		}
		for i, it := range items {
			v.checkValue(it, ft.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Struct:
		m, ok := val.(map[string]any)
		if !ok {
			bad("a table")
			return
		}
		v.checkTypes(m, ft, path)
	}
}

// tomlKind names a generically decoded TOML value, with the value when short.
func tomlKind(val any) string {
	switch x := val.(type) {
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return fmt.Sprintf("a string (%q)", x)
	case int64:
		return fmt.Sprintf("an integer (%d)", x)
	case float64:
		return fmt.Sprintf("a float (%v)", x)
	case bool:
		return fmt.Sprintf("a boolean (%v)", x)
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", val)
}

// durationAtLeast is duration with a lower bound: intervals that are too
// short would burn CPU or flap.
func (v *validator) durationAtLeast(path, s string, least time.Duration) time.Duration {
	d, ok := v.duration(path, s)
	if ok && d < least {
		v.at(path, "%s must be at least %s, got %q", path[strings.LastIndex(path, ".")+1:], least, s)
		return 0
	}
	return d
}

// duration parses a positive duration; empty (a key whose default is the
// backend's) gives zero. ok is false after a problem.
func (v *validator) duration(path, s string) (d time.Duration, ok bool) {
	if s == "" {
		return 0, true
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		v.at(path, "invalid duration %q (use a Go duration such as \"500ms\", \"30s\")", s)
		return 0, false
	}
	if d <= 0 {
		v.at(path, "duration must be positive, got %q", s)
		return 0, false
	}
	return d, true
}

func (v *validator) check(c *Config) {
	if c.NodeName == "" {
		v.at("node_name", "node_name is empty and the hostname is unknown")
	} else if !ValidNodeName(c.NodeName) {
		v.at("node_name", "node_name %q: use letters, digits, '-', '_' and '.' (at most 253, starting with a letter or digit)", c.NodeName)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		v.at("log_level", "log_level must be debug, info, warn or error, got %q", c.LogLevel)
	}
	if !strings.HasPrefix(c.StateDir, "/") {
		v.at("state_dir", "state_dir must be an absolute path, got %q", c.StateDir)
	}
	if !strings.HasPrefix(c.API.Socket, "/") {
		v.at("api.socket", "api.socket must be an absolute path, got %q", c.API.Socket)
	}
	if m := c.API.MetricsAddress; m != "" {
		ap, err := netip.ParseAddrPort(m)
		if err != nil {
			v.at("api.metrics_address", "metrics_address must be ip:port, got %q", m)
		} else if !ap.Addr().IsLoopback() {
			v.at("api.metrics_address", "metrics_address must be a loopback address, got %q", m)
		}
	}
	v.checkCluster(&c.Cluster)
	v.checkConnections(&c.Connections)
	v.checkL2(&c.L2)
	v.checkVIPs(c)
	v.checkVIPAttrs(c)
	c.L2.setVIPs(c.VIPs)
	if c.BGP != nil {
		v.checkBGP(c)
	}
	v.checkKubernetes(c)
	v.checkHooks(&c.Hooks)
}

func (v *validator) checkHooks(h *HooksConfig) {
	if len(h.Command) > 0 && h.Command[0] == "" {
		v.at("hooks.command", "hooks command has an empty program name")
	}
	h.timeout = v.durationAtLeast("hooks.timeout", h.Timeout, 100*time.Millisecond)
	h.uid, h.gid = -1, -1
	if h.User != "" {
		uid, gid, err := lookupUser(h.User)
		if err != nil {
			v.at("hooks.user", "hooks user %q: %v", h.User, err)
		} else {
			h.uid, h.gid = uid, gid
		}
	}
	h.caps = nil
	for i, name := range h.Capabilities {
		c, ok := childcaps.ByName(name)
		switch {
		case !ok:
			v.at("hooks.capabilities", "capabilities[%d]: %q is not a capability (CAP_NET_ADMIN, CAP_NET_RAW ...)", i, name)
		case slices.Contains(childcaps.Dropped, c):
			v.at("hooks.capabilities", "capabilities[%d]: a hook never keeps %s (it reads any file)", i, name)
		case slices.Contains(h.caps, c):
			v.at("hooks.capabilities", "capabilities[%d]: %s is listed twice", i, name)
		default:
			h.caps = append(h.caps, c)
		}
	}
	if len(h.Command) == 0 && (h.User != "" || len(h.Capabilities) > 0) {
		v.at("hooks", "hooks.user and hooks.capabilities need hooks.command")
	}
}

// lookupUser resolves a user name or numeric uid to its uid and primary
// group.
func lookupUser(name string) (uid, gid int, err error) {
	u, err := user.Lookup(name)
	if err != nil {
		var uerr error
		if u, uerr = user.LookupId(name); uerr != nil {
			return 0, 0, fmt.Errorf("no such user")
		}
	}
	uid, err = strconv.Atoi(u.Uid)
	if err != nil {
		return 0, 0, fmt.Errorf("uid %q: %w", u.Uid, err)
	}
	gid, err = strconv.Atoi(u.Gid)
	if err != nil {
		return 0, 0, fmt.Errorf("gid %q: %w", u.Gid, err)
	}
	return uid, gid, nil
}

func (v *validator) checkCluster(cl *ClusterConfig) {
	if cl.BindAddress == "" {
		v.at("cluster", "cluster.bind_address is required")
	} else if a, err := netip.ParseAddr(cl.BindAddress); err != nil || a.Zone() != "" {
		v.at("cluster.bind_address", "cluster.bind_address: invalid address %q%s", cl.BindAddress, prefixHint(cl.BindAddress))
	} else if a = a.Unmap(); a.IsUnspecified() || a.IsMulticast() {
		v.at("cluster.bind_address", "bind_address %s is not an address other nodes can reach: use this node's address on the cluster network (it is also what peers are told to call)", a)
	} else {
		cl.bindAddr = a
	}
	cl.allowed = nil
	for i, n := range cl.AllowedNetworks {
		p, err := parseNetwork(n)
		if err != nil {
			v.at("cluster.allowed_networks", "allowed_networks[%d]: %v", i, err)
			continue
		}
		cl.allowed = append(cl.allowed, p)
	}
	if cl.BindPort < 1 || cl.BindPort > 65535 {
		v.at("cluster.bind_port", "bind_port must be 1-65535, got %d", cl.BindPort)
	}
	cl.peerAddrs = nil
	seen := map[string]bool{}
	for i, p := range cl.Peers {
		hp, err := peerAddress(p, cl.BindPort)
		if err != nil {
			v.at("cluster.peers", "peers[%d]: %v", i, err)
			continue
		}
		if !seen[hp] {
			seen[hp] = true
			cl.peerAddrs = append(cl.peerAddrs, hp)
		}
	}
	cl.rejoinInterval = v.durationAtLeast("cluster.rejoin_interval", cl.RejoinInterval, time.Second)
	cl.handoffTimeout = v.durationAtLeast("cluster.handoff_timeout", cl.HandoffTimeout, 100*time.Millisecond)
	cl.restartGrace = 0
	if cl.RestartGrace != "0s" && cl.RestartGrace != "0" {
		if d, ok := v.duration("cluster.restart_grace", cl.RestartGrace); ok {
			if d < MinRestartGrace || d > MaxRestartGrace {
				v.at("cluster.restart_grace", "restart_grace must be 0s (off) or %s-%s, got %q", MinRestartGrace, MaxRestartGrace, cl.RestartGrace)
			} else {
				cl.restartGrace = d
			}
		}
	}
	switch cl.FailureDetection {
	case FailureDetectionLAN, FailureDetectionFast:
	default:
		v.at("cluster.failure_detection", "failure_detection must be %q or %q, got %q", FailureDetectionLAN, FailureDetectionFast, cl.FailureDetection)
	}
	if cl.KeyFile != "" {
		if !strings.HasPrefix(cl.KeyFile, "/") {
			v.at("cluster.key_file", "key_file must be an absolute path, got %q", cl.KeyFile)
		} else if _, err := ReadKeys(cl.KeyFile); err != nil {
			v.at("cluster.key_file", "%v", err)
		}
	}
}

func (v *validator) checkConnections(cc *ConnectionsConfig) {
	seen := map[int]bool{}
	for i, p := range cc.Ports {
		switch {
		case p < 1 || p > 65535:
			v.at("connections.ports", "ports[%d] must be 1-65535, got %d", i, p)
		case seen[p]:
			v.at("connections.ports", "ports[%d]: %d is listed twice", i, p)
		}
		seen[p] = true
	}
	if cc.PokeRate < 1 || cc.PokeRate > 1000000 {
		v.at("connections.poke_rate", "poke_rate must be 1-1000000, got %d", cc.PokeRate)
	}
	cc.pokeTimeout = v.durationAtLeast("connections.poke_timeout", cc.PokeTimeout, 100*time.Millisecond)
	if d, err := time.ParseDuration(cc.LingerMax); err != nil {
		v.at("connections.linger_max", "invalid duration %q (use a Go duration such as \"10m\", or \"0s\")", cc.LingerMax)
	} else if d < 0 || d > 24*time.Hour {
		v.at("connections.linger_max", "linger_max must be 0s to 24h, got %q", cc.LingerMax)
	} else {
		cc.lingerMax = d
	}
}

// parseNetwork reads "192.0.2.0/24" or a single address ("192.0.2.11",
// taken as /32 or /128).
func parseNetwork(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("invalid network %q (want CIDR such as \"192.0.2.0/24\" or an address)", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// peerAddress normalises "ip", "ip:port", "[v6]:port", "host" or
// "host:port" to host:port.
func peerAddress(s string, defPort int) (string, error) {
	if s == "" {
		return "", errors.New("empty address")
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a, uint16(defPort)).String(), nil
	}
	host, port := s, strconv.Itoa(defPort)
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("invalid port in %q", s)
		}
	} else if strings.Count(s, ":") > 0 {
		return "", fmt.Errorf("invalid address %q", s)
	}
	if _, err := netip.ParseAddr(host); err != nil && !validHostname(host) {
		return "", fmt.Errorf("invalid address %q", s)
	}
	return net.JoinHostPort(host, port), nil
}

// ValidInterface reports whether name can name a network interface, by the
// kernel's rule (package ifname), which the l2 announcers check too.
func ValidInterface(name string) bool { return ifname.Valid(name) }

// VIPKey is the 32-bit key a VIP is known by in the metadata the members
// exchange: FNV-32a of its name. Two names with one key could not be told
// apart there, so Parse refuses them.
func VIPKey(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32()
}

// ValidNodeName reports whether s can name a node: what a hostname or a
// Kubernetes node name can be (letters, digits, '-', '_', '.', starting with
// a letter or digit, at most 253). Names received from the network are held
// to the same rule, so none can carry control characters into logs and
// vipctl's output.
func ValidNodeName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case i > 0 && (r == '-' || r == '_' || r == '.'):
		default:
			return false
		}
	}
	return true
}

// peerWithAddr returns the index of the configured peer whose address is a.
func peerWithAddr(peers []string, defPort int, a netip.Addr) (int, bool) {
	for i, p := range peers {
		hp, err := peerAddress(p, defPort)
		if err != nil {
			continue
		}
		host, _, _ := net.SplitHostPort(hp)
		if pa, err := netip.ParseAddr(host); err == nil && pa.Unmap() == a {
			return i, true
		}
	}
	return 0, false
}

// validHostname accepts DNS names, but not things that look like a mistyped
// IPv4 address ("192.0.2.300").
func validHostname(h string) bool {
	if h == "" || len(h) > 253 || strings.Trim(h, "0123456789.") == "" {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}

func (v *validator) checkVIPs(c *Config) {
	if len(c.VIPs) == 0 {
		v.at("", "no [[vip]] configured")
	}
	if len(c.VIPs) > MaxVIPs {
		v.at(fmt.Sprintf("vip[%d]", MaxVIPs), "at most %d VIPs are supported, got %d", MaxVIPs, len(c.VIPs))
	}
	names := map[string]int{}
	addrs := map[netip.Addr]int{}
	keys := map[uint32]int{}
	needBGP := false
	for i := range c.VIPs {
		vip := &c.VIPs[i]
		p := fmt.Sprintf("vip[%d]", i)
		switch {
		case vip.Name == "":
			v.at(p, "vip.name is required")
		case names[vip.Name] > 0:
			v.at(p+".name", "duplicate VIP name %q (first at vip[%d])", vip.Name, names[vip.Name]-1)
		default:
			names[vip.Name] = i + 1
			k := VIPKey(vip.Name)
			if j, dup := keys[k]; dup {
				v.at(p+".name", "VIP name %q collides with %q in metadata; rename one", vip.Name, c.VIPs[j].Name)
			}
			keys[k] = i
		}
		if vip.Address == "" {
			v.at(p, "vip.address is required")
		} else if a, err := netip.ParseAddr(vip.Address); err != nil || a.Zone() != "" {
			v.at(p+".address", "%s.address: invalid address %q%s", p, vip.Address, prefixHint(vip.Address))
		} else {
			a = a.Unmap()
			vip.addr = a
			if j, dup := addrs[a]; dup {
				v.at(p+".address", "address %s is also used by vip[%d]", a, j)
			}
			addrs[a] = i
			switch {
			case a.IsUnspecified() || a.IsMulticast() || a.IsLoopback():
				v.at(p+".address", "address %s cannot be a VIP", a)
			case a.IsLinkLocalUnicast() && vip.Mode == ModeL2:
				// (The bgp package refuses it for mode "bgp".)
				v.at(p+".address", "vip %q: address %s is link-local: it is reachable on one link only, and clients would need its zone; use a global or unique-local address", vip.Name, a)
			case a == c.Cluster.bindAddr:
				v.at(p+".address", "vip %q: address %s is this node's cluster.bind_address; a VIP needs an address no host uses", vip.Name, a)
			default:
				if j, ok := peerWithAddr(c.Cluster.Peers, c.Cluster.BindPort, a); ok {
					v.at(p+".address", "vip %q: address %s is the address of cluster.peers[%d]; a VIP needs an address no host uses", vip.Name, a, j)
				}
			}
		}
		switch vip.Mode {
		case ModeL2:
			if vip.Announce != AnnounceOwner {
				v.at(p+".announce", "announce = %q needs mode %q; l2 VIPs have one owner", vip.Announce, ModeBGP)
			}
		case ModeBGP:
			needBGP = true
			if vip.Announce != AnnounceOwner && vip.Announce != AnnounceAll {
				v.at(p+".announce", "announce must be %q or %q, got %q", AnnounceOwner, AnnounceAll, vip.Announce)
			}
		default:
			v.at(p+".mode", "mode must be %q or %q, got %q", ModeL2, ModeBGP, vip.Mode)
		}
		if vip.Mode == ModeL2 || vip.Mode == ModeBGP {
			// The interface's rule is the kernel's, which the daemon's
			// announcer for this VIP (quiet for bgp) checks too.
			if err := ifname.Check(vip.Interface); err != nil {
				at := p + ".interface"
				if vip.Interface == "" {
					at = p
				}
				v.at(at, "vip %q: %v (mode %q)", vip.Name, err, vip.Mode)
			}
		}
		if vip.Health != nil {
			v.checkHealth(p+".health", vip.Health)
		}
		v.checkPriority(p, vip)
	}
	v.checkGroups(c)
	for i, vip := range c.VIPs {
		h := vip.Health
		if h == nil || h.URL == "" {
			continue
		}
		u, err := url.Parse(h.URL)
		if err != nil {
			continue
		}
		a, err := netip.ParseAddr(u.Hostname())
		if err != nil {
			continue
		}
		if j, ok := addrs[a.Unmap()]; ok {
			what := "the VIP itself"
			if j != i {
				what = fmt.Sprintf("the address of vip %q", c.VIPs[j].Name)
			}
			v.at(fmt.Sprintf("vip[%d].health.url", i), "vip %q: health url %q is %s: the check would ask whichever node holds the VIP, not this one; check the local server (https://127.0.0.1:6443/readyz for an apiserver)", vip.Name, h.URL, what)
		}
	}
	if needBGP && c.BGP == nil {
		v.at("", "a VIP has mode \"bgp\" but there is no [bgp] section")
	}
}

// checkPriority checks a VIP's priority and preempt_delay.
func (v *validator) checkPriority(p string, vip *VIPConfig) {
	if vip.Priority < 1 || vip.Priority > 255 {
		v.at(p+".priority", "vip %q: priority must be 1-255, got %d", vip.Name, vip.Priority)
	}
	if vip.PreemptDelay == "" {
		return
	}
	d, err := time.ParseDuration(vip.PreemptDelay)
	switch {
	case err != nil:
		v.at(p+".preempt_delay", "invalid duration %q (use a Go duration such as \"30s\")", vip.PreemptDelay)
	case d < 0 || d > MaxPreemptDelay:
		v.at(p+".preempt_delay", "vip %q: preempt_delay must be 0-%s, got %q", vip.Name, MaxPreemptDelay, vip.PreemptDelay)
	case d > 0 && !vip.Preempt:
		v.at(p+".preempt_delay", "vip %q: preempt_delay needs preempt = true (without preempt no node takes the VIP from a holder)", vip.Name)
	default:
		vip.preemptDelay = d
	}
}

// checkGroups checks that the VIPs of each group can be elected as one,
// and that a node with priorities fits its metadata.
func (v *validator) checkGroups(c *Config) {
	first := map[string]int{}
	prio := false
	for i := range c.VIPs {
		vip := &c.VIPs[i]
		prio = prio || vip.Priority != DefaultPriority
		if vip.Group == "" {
			continue
		}
		p := fmt.Sprintf("vip[%d]", i)
		if vip.Announce == AnnounceAll {
			v.at(p+".group", "vip %q: announce = %q has no owner to share; a group needs announce = %q", vip.Name, AnnounceAll, AnnounceOwner)
		}
		j, seen := first[vip.Group]
		if !seen {
			first[vip.Group] = i
			continue
		}
		o := c.VIPs[j]
		switch {
		case vip.Preempt != o.Preempt:
			v.at(p+".preempt", "vip %q: group %q is elected as one: preempt must be the same as vip %q's", vip.Name, vip.Group, o.Name)
		case vip.preemptDelay != o.preemptDelay:
			v.at(p+".preempt_delay", "vip %q: group %q is elected as one: preempt_delay must be the same as vip %q's", vip.Name, vip.Group, o.Name)
		case vip.Priority != o.Priority:
			v.at(p+".priority", "vip %q: group %q is elected as one: priority must be the same as vip %q's", vip.Name, vip.Group, o.Name)
		}
	}
	if prio && len(c.VIPs) > MaxVIPsWithPriority {
		v.at("", "a VIP has a priority other than %d: at most %d VIPs fit the metadata then, got %d", DefaultPriority, MaxVIPsWithPriority, len(c.VIPs))
	}
}

// Groups maps each VIP group to the names of its VIPs, in file order.
func (c *Config) Groups() map[string][]string {
	out := map[string][]string{}
	for _, vip := range c.VIPs {
		if vip.Group != "" {
			out[vip.Group] = append(out[vip.Group], vip.Name)
		}
	}
	return out
}

// L2 returns what the l2 announcer that carries the VIP is built with: on
// its interface, advertised (and refreshed every l2.refresh_interval) for
// mode "l2", bound quietly for mode "bgp".
func (v VIPConfig) L2() L2Announcer {
	return L2Announcer{Interface: v.Interface, Quiet: v.Mode == ModeBGP, RefreshInterval: v.refresh}
}

func (v *validator) checkHealth(p string, h *HealthConfig) {
	switch {
	case h.URL == "" && len(h.Command) == 0:
		v.at(p, "health needs url or command")
	case h.URL != "" && len(h.Command) > 0:
		v.at(p, "health takes url or command, not both")
	case h.URL != "":
		u, err := url.Parse(h.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.at(p+".url", "health url must be http:// or https:// with a host, got %q", h.URL)
		} else if u.Scheme == "http" {
			for _, k := range []struct {
				key string
				set bool
			}{{"ca_file", h.CAFile != ""}, {"tls_server_name", h.TLSServerName != ""}, {"insecure_skip_verify", h.InsecureSkipVerify}} {
				if k.set {
					v.at(p+"."+k.key, "%s.%s applies to https:// URLs only, and this url is http://: use https:// or remove %s", stripIndexes(p), k.key, k.key)
				}
			}
		}
	case h.Command[0] == "":
		v.at(p+".command", "health command has an empty program name")
	}
	h.interval = v.durationAtLeast(p+".interval", h.Interval, 100*time.Millisecond)
	h.timeout = v.durationAtLeast(p+".timeout", h.Timeout, 10*time.Millisecond)
	if h.Rise < 1 {
		v.at(p+".rise", "rise must be at least 1, got %d", h.Rise)
	}
	if h.Fall < 1 {
		v.at(p+".fall", "fall must be at least 1, got %d", h.Fall)
	}
	if h.CAFile != "" && !strings.HasPrefix(h.CAFile, "/") {
		v.at(p+".ca_file", "ca_file must be an absolute path, got %q", h.CAFile)
	} else if h.CAFile != "" {
		// One that does not exist yet is fine: at cluster bootstrap vipd
		// starts before kubeadm writes the CA, and the check fails, saying
		// why, until it does. One that exists must be what it says.
		if _, err := os.Stat(h.CAFile); err == nil {
			if _, err := CertPool(h.CAFile); err != nil {
				v.at(p+".ca_file", "%v", err)
			}
		}
	}
}

// prefixHint explains an address written with a prefix length ("" for
// anything else).
func prefixHint(s string) string {
	if _, err := netip.ParsePrefix(s); err == nil {
		return ": write the address alone, no prefix here (an L2 VIP takes the prefix of the interface's own address on that network)"
	}
	return ""
}

// CertPool reads a PEM CA file (a health check's ca_file) into a pool.
// Its errors name the file and say what it should be.
func CertPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if errors.Is(err, syscall.EISDIR) {
		return nil, fmt.Errorf("ca_file %s: is a directory: name the CA certificate file (/etc/kubernetes/pki/ca.crt on kubeadm)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca_file %s: holds no PEM certificate (-----BEGIN CERTIFICATE-----): name the CA certificate the server's is signed by (/etc/kubernetes/pki/ca.crt on kubeadm)", path)
	}
	return pool, nil
}
