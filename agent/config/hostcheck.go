package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/vipd/vipd/nodewatch"
)

// HostEnv is what CheckHost reads from the host besides the configuration.
// The zero value reads the real host.
type HostEnv struct {
	// ServiceUser is the user vipd runs as under systemd (the unit's
	// User=). Secret files, state_dir and the socket directory are checked
	// for that user when CheckHost runs as root. [vipd]
	ServiceUser string
	// Interfaces lists the host's interfaces and their addresses.
	// [net.Interfaces]
	Interfaces func() ([]HostInterface, error)
	// Euid is the effective user id. [os.Geteuid]
	Euid func() int
	// CheckL2 returns, one line each, the host's settings that keep an L2
	// VIP at addr on iface from working (a sysctl and its value to set, a
	// VIP outside every prefix on iface). [none; cmd/vipd passes
	// l2.CheckHost]
	CheckL2 func(iface string, addr netip.Addr) ([]string, error)
	// DropInDirs are vipd.service's drop-in directories: one of their
	// *.conf files granting CAP_DAC_READ_SEARCH (KubeletCredentialsDropIn,
	// linked there) lets the service user read the kubelet's credentials.
	// [/etc/systemd/system/vipd.service.d, /run/systemd/system/vipd.service.d]
	DropInDirs []string
	// UnitFiles are where vipd.service may be installed; the first that
	// exists, with its drop-ins, names the paths the service may write
	// (StateDirectory=, RuntimeDirectory=, ReadWritePaths=).
	// [/etc/systemd/system/vipd.service, /usr/lib/systemd/system/vipd.service,
	// /lib/systemd/system/vipd.service]
	UnitFiles []string
}

// KubeletCredentialsDropIn is the packaged opt-in drop-in for vipd.service
// that adds CAP_DAC_READ_SEARCH, so that the Node watch can read the
// kubelet's root-only kubeconfig and client certificate.
const KubeletCredentialsDropIn = "/usr/share/vipd/systemd/kubelet-credentials.conf"

// KubeconfigAccessHint says how to let user (vipd's service user) read the
// kubelet's credentials: the drop-in, or credentials of its own.
func KubeconfigAccessHint(user string) string {
	return fmt.Sprintf("user %s cannot read it: link %s into /etc/systemd/system/vipd.service.d/, then systemctl daemon-reload and restart vipd; or give vipd a kubeconfig of its own (docs/configuration.md, Credentials under systemd)", user, KubeletCredentialsDropIn)
}

// HostInterface is one interface of the host.
type HostInterface struct {
	// Name is the interface's name ("eth0").
	Name string
	// Prefixes are its networks: its addresses with their prefix
	// lengths, masked (192.0.2.0/24 for 192.0.2.11/24).
	Prefixes []netip.Prefix
	// Addrs are its addresses (192.0.2.11).
	Addrs []netip.Addr
}

// CheckHost checks the configuration against this host: what `vipd --check`
// warns about and what stops `vipd` at start. Warnings are things that work
// but are unsafe or will surprise (no key_file; what env.CheckL2 finds for
// an L2 VIP: a sysctl that breaks it, a VIP outside the prefixes of its
// interface; a secret file, state_dir or socket directory the service
// user cannot use). Errors are what make the daemon unable to do its job
// here: an L2 interface that does not exist. --check reports both as
// warnings (it may run before the interface exists); start fails on errors.
func CheckHost(c *Config, env HostEnv) (warnings, errs []Problem) {
	if env.ServiceUser == "" {
		env.ServiceUser = "vipd"
	}
	if env.Interfaces == nil {
		env.Interfaces = hostInterfaces
	}
	if env.Euid == nil {
		env.Euid = os.Geteuid
	}
	if env.DropInDirs == nil {
		env.DropInDirs = []string{"/etc/systemd/system/vipd.service.d", "/run/systemd/system/vipd.service.d"}
	}
	if env.UnitFiles == nil {
		env.UnitFiles = []string{"/etc/systemd/system/vipd.service", "/usr/lib/systemd/system/vipd.service", "/lib/systemd/system/vipd.service"}
	}
	v := &validator{path: c.Path, keys: c.keys}
	if v.keys == nil {
		v.keys = indexKeys(nil)
		if data, err := os.ReadFile(c.Path); err == nil {
			v.keys = indexKeys(data)
		}
	}
	// errorAt records a problem as an error, not a warning.
	errorAt := func(path, format string, args ...any) {
		before := len(v.problems)
		v.at(path, format, args...)
		errs = append(errs, v.problems[before:]...)
		v.problems = v.problems[:before]
	}
	if len(c.Cluster.Peers) == 0 {
		v.at("cluster.peers", "cluster.peers is empty: at its first start this node joins nobody and, alone, elects itself, so two nodes started this way both hold the VIP (docs/security.md); list the other control-plane nodes' addresses")
	}
	if c.Cluster.KeyFile == "" {
		v.at("cluster", "cluster.key_file is not set: membership traffic is neither encrypted nor authenticated, and only cluster.allowed_networks (default: the configured peers) keeps other hosts from joining and swaying quorum; generate a key (head -c 32 /dev/urandom | base64), copy it to every node and set key_file")
	}
	ifaces, ierr := env.Interfaces()
	byName := map[string]HostInterface{}
	ownedBy := map[netip.Addr]string{} // this host's addresses, by interface
	// hostOnly are the addresses of the host that have a network of their
	// own (a prefix shorter than the address: 192.0.2.11/24), the way a
	// host's own address is configured. A full-length one (/32, /128) is
	// how vipd itself puts a VIP on the host: the address a vipd that
	// crashed left, or the one a restart in place hands to this process.
	hostOnly := map[netip.Addr]bool{}
	for _, ifi := range ifaces {
		byName[ifi.Name] = ifi
		for j, a := range ifi.Addrs {
			if _, ok := ownedBy[a]; !ok {
				ownedBy[a] = ifi.Name
			}
			if j < len(ifi.Prefixes) && ifi.Prefixes[j].Bits() < a.BitLen() {
				hostOnly[a] = true
			}
		}
	}
	if ierr == nil {
		for i, vip := range c.VIPs {
			ifn, ok := ownedBy[vip.addr]
			switch {
			case ok && hostOnly[vip.addr]:
				errorAt(fmt.Sprintf("vip[%d].address", i), "vip %q: address %s is this host's own address (on %s): a VIP needs an address no host uses (vipd removes a VIP's address from this host at start and whenever another node holds it)", vip.Name, vip.addr, ifn)
			case ok:
				v.at(fmt.Sprintf("vip[%d].address", i), "vip %q: address %s is already on this host (on %s, as a VIP is): vipd takes it over (a vipd that crashed or restarts in place left it); if another program put it there (keepalived), stop that program first, or two nodes answer for the VIP", vip.Name, vip.addr, ifn)
			}
		}
		if c.BGP != nil {
			for i, pr := range c.BGP.speaker.Peers {
				if ifn, ok := ownedBy[pr.Address]; ok {
					errorAt(fmt.Sprintf("bgp.peer[%d].address", i), "bgp.peer[%d].address %s is this host's own address (on %s): list the routers this node peers with, not the node", i, pr.Address, ifn)
				}
			}
			v.checkLocalAddresses(c.BGP.speaker.Peers, ownedBy)
		}
		if a := c.Cluster.bindAddr; a.IsValid() {
			if _, ok := ownedBy[a]; !ok {
				v.at("cluster.bind_address", "cluster.bind_address %s is not an address of this host (yet): vipd waits for it at start (systemctl status vipd shows \"activating\" and says so) and never joins if it is a typo; use this node's address on the cluster network (ip -br addr)", a)
			}
		}
	}
	for i, vip := range c.VIPs {
		if vip.Mode != ModeL2 || ierr != nil {
			continue
		}
		p := fmt.Sprintf("vip[%d].interface", i)
		ifi, ok := byName[vip.Interface]
		if !ok {
			errorAt(p, "vip %q: interface %q does not exist on this host (ip -br link lists the interfaces)", vip.Name, vip.Interface)
			continue
		}
		if env.CheckL2 == nil {
			continue
		}
		ws, err := env.CheckL2(ifi.Name, vip.addr)
		if err != nil {
			ws = []string{fmt.Sprintf("cannot read the host's settings: %v", err)}
		}
		for _, w := range ws {
			v.at(p, "vip %q: %s", vip.Name, w)
		}
	}
	kubeconfig := ""
	if k := c.Kubernetes; k.Enabled == nil && (k.Kubeconfig != "" || k.NodeName != "" || k.Server != "" || k.TLSServerName != "" || k.FollowExclusionLabel) {
		v.at("kubernetes", "[kubernetes] sets keys but not enabled = true, so the Node watch is off and a cordoned or deleted Node does not withdraw this node: add enabled = true")
	}
	if k := c.Kubernetes; k.On() {
		kubeconfig = nodewatch.FindKubeconfig(k.watch.Kubeconfigs)
		switch {
		case kubeconfig == "" && k.Explicit() && k.Kubeconfig != "":
			v.at("kubernetes.kubeconfig", "kubernetes.kubeconfig %s does not exist (yet): vipd waits for it, and until then a cordoned or deleted Node does not withdraw this node; check the path (kubeadm writes /etc/kubernetes/kubelet.conf at init or join)", k.Kubeconfig)
		case kubeconfig == "" && k.Explicit():
			v.at("kubernetes.enabled", "kubernetes.enabled is true but no kubeconfig is found (looked for %s): vipd waits for one, and until then a cordoned or deleted Node does not withdraw this node; set kubernetes.kubeconfig", strings.Join(k.watch.Kubeconfigs, ", "))
		case kubeconfig != "":
			if _, err := nodewatch.LoadKubeconfig(kubeconfig); err != nil && !errors.Is(err, fs.ErrPermission) {
				key := "kubernetes.kubeconfig"
				if k.Kubeconfig == "" {
					key = "kubernetes"
				}
				v.at(key, "kubernetes.kubeconfig %s: not a kubeconfig the Node watch can use (%v): the watch retries and until it can read one a cordoned or deleted Node does not withdraw this node; name the kubelet's kubeconfig", kubeconfig, err)
			}
		}
	}
	checkUnitPaths(v, c, env.UnitFiles, env.DropInDirs)
	checkHookUser(v, c, env.UnitFiles, env.DropInDirs)
	if env.Euid() == 0 {
		if u, err := user.Lookup(env.ServiceUser); err == nil {
			checkAccess(v, u, c)
			if kubeconfig != "" && !grantsReadSearch(env.DropInDirs) {
				checkKubeconfigAccess(v, u, c.Kubernetes, kubeconfig)
			}
		}
	}
	return v.problems, errs
}

// checkKubeconfigAccess warns when the service user cannot read the
// kubeconfig the Node watch uses, or the files it names: the kubelet's
// are root's, mode 0600.
func checkKubeconfigAccess(v *validator, u *user.User, k KubernetesConfig, path string) {
	uid, gids := userIDs(u)
	files := []string{path}
	if kc, err := nodewatch.LoadKubeconfig(path); err == nil {
		files = append(files, kc.CertFile, kc.KeyFile, kc.TokenFile)
	}
	key := "kubernetes.kubeconfig"
	if k.Kubeconfig == "" {
		key = "kubernetes"
	}
	for _, f := range files {
		if f != "" && !canAccess(f, uid, gids, 4) {
			v.at(key, "%s: the Node watch fails (and changes nothing) under systemd (User=%s): %s", f, u.Username, KubeconfigAccessHint(u.Username))
			return
		}
	}
}

// grantsReadSearch reports whether a *.conf drop-in in dirs (a link to
// KubeletCredentialsDropIn, or the admin's own) gives the service
// CAP_DAC_READ_SEARCH in AmbientCapabilities=.
func grantsReadSearch(dirs []string) bool {
	for _, e := range unitEntries(dropInFiles(dirs)) {
		if e[0] == "AmbientCapabilities" && slices.Contains(strings.Fields(e[1]), "CAP_DAC_READ_SEARCH") {
			return true
		}
	}
	return false
}

// dropInFiles lists the *.conf drop-ins in dirs, directory by directory.
func dropInFiles(dirs []string) []string {
	var files []string
	for _, d := range dirs {
		fs, _ := filepath.Glob(filepath.Join(d, "*.conf"))
		files = append(files, fs...)
	}
	return files
}

// unitEntries returns the Key=value settings of systemd unit files, in
// order, key and value trimmed; comments and unreadable files are passed
// over.
func unitEntries(files []string) [][2]string {
	var out [][2]string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, val, ok := strings.Cut(strings.TrimSpace(line), "=")
			if !ok || strings.HasPrefix(k, "#") {
				continue
			}
			out = append(out, [2]string{strings.TrimSpace(k), strings.TrimSpace(val)})
		}
	}
	return out
}

// checkAccess warns about files and directories the service user cannot
// use: --check as root reads them fine, and then the service fails.
func checkAccess(v *validator, u *user.User, c *Config) {
	uid, gids := userIDs(u)
	secret := func(key, path string) {
		if path != "" && !canAccess(path, uid, gids, 4) {
			v.at(key, "%s %s: user %s cannot read it, so vipd will not start under systemd (User=%s): chown %s %s (it must stay mode 0600)", key[strings.LastIndex(key, ".")+1:], path, u.Username, u.Username, u.Username, path)
		}
	}
	secret("cluster.key_file", c.Cluster.KeyFile)
	if c.BGP != nil {
		for i, p := range c.BGP.Peers {
			secret(fmt.Sprintf("bgp.peer[%d].password_file", i), p.PasswordFile)
		}
	}
	// systemd creates and hands the default directories to the service
	// user (StateDirectory=, RuntimeDirectory=); others are the admin's.
	dir := func(key, path, managed string) {
		if path == managed {
			return
		}
		if _, err := os.Stat(path); err == nil && !canAccess(path, uid, gids, 3) {
			v.at(key, "%s %s: user %s cannot write to it: chown %s %s", key[strings.LastIndex(key, ".")+1:], path, u.Username, u.Username, path)
		}
	}
	dir("state_dir", c.StateDir, DefaultStateDir)
	dir("api.socket", filepath.Dir(c.API.Socket), filepath.Dir(DefaultSocket))
}

// userIDs are u's uid and groups.
func userIDs(u *user.User) (uid int, gids map[int]bool) {
	uid, _ = strconv.Atoi(u.Uid)
	gids = map[int]bool{}
	if gs, err := u.GroupIds(); err == nil {
		for _, g := range gs {
			if n, err := strconv.Atoi(g); err == nil {
				gids[n] = true
			}
		}
	}
	if n, err := strconv.Atoi(u.Gid); err == nil {
		gids[n] = true
	}
	return uid, gids
}

// canAccess reports whether a user with uid and groups gids has the
// permission bits want (4 read, 2 write, 1 execute) on path, by its mode.
func canAccess(path string, uid int, gids map[int]bool, want os.FileMode) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case uid == 0:
		return true
	case int(st.Uid) == uid:
		return (perm>>6)&want == want
	case gids[int(st.Gid)]:
		return (perm>>3)&want == want
	}
	return perm&want == want
}

// hostInterfaces reads the host's interfaces and addresses.
func hostInterfaces() ([]HostInterface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	out := make([]HostInterface, 0, len(ifs))
	for _, ifi := range ifs {
		hi := HostInterface{Name: ifi.Name}
		addrs, err := ifi.Addrs()
		if err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok {
						ones, _ := n.Mask.Size()
						hi.Prefixes = append(hi.Prefixes, netip.PrefixFrom(ip.Unmap(), ones).Masked())
						hi.Addrs = append(hi.Addrs, ip.Unmap())
					}
				}
			}
		}
		out = append(out, hi)
	}
	return out, nil
}

// checkUnitPaths warns when state_dir or the API socket is outside the
// paths the installed vipd.service may write: under ProtectSystem=strict
// everything else is read-only, and the start fails there.
func checkUnitPaths(v *validator, c *Config, units, dropInDirs []string) {
	unit := installedUnit(units)
	if unit == "" {
		return // not installed as a service: nothing to compare with
	}
	strict := false
	var writable []string
	for _, e := range unitEntries(append([]string{unit}, dropInFiles(dropInDirs)...)) {
		switch k, val := e[0], e[1]; k {
		case "ProtectSystem":
			strict = val == "strict"
		case "StateDirectory":
			for _, d := range strings.Fields(val) {
				writable = append(writable, filepath.Join("/var/lib", d))
			}
		case "RuntimeDirectory":
			for _, d := range strings.Fields(val) {
				writable = append(writable, filepath.Join("/run", d), filepath.Join("/var/run", d))
			}
		case "ReadWritePaths":
			for _, d := range strings.Fields(val) {
				writable = append(writable, filepath.Clean(strings.TrimLeft(d, "-+")))
			}
		}
	}
	if !strict {
		return
	}
	under := func(p string) bool {
		for _, w := range writable {
			if p == w || strings.HasPrefix(p, w+"/") {
				return true
			}
		}
		return false
	}
	var shown []string
	for _, w := range writable {
		if !strings.HasPrefix(w, "/var/run/") {
			shown = append(shown, w)
		}
	}
	list := fmt.Sprintf("%s: %s", unit, strings.Join(shown, ", "))
	if p := filepath.Clean(c.StateDir); !under(p) {
		v.at("state_dir", "state_dir %s is outside the paths vipd.service may write (%s): under ProtectSystem=strict the start fails there; use the default or add ReadWritePaths=%s (systemctl edit vipd)", p, list, p)
	}
	if p := filepath.Dir(c.API.Socket); !under(p) {
		v.at("api.socket", "api.socket %s is outside the paths vipd.service may write (%s): under ProtectSystem=strict the start fails there; use the default or add ReadWritePaths=%s (systemctl edit vipd)", c.API.Socket, list, p)
	}
}

// checkHookUser warns when hooks.user names another user than the one
// vipd.service runs vipd as (its User=) while the unit does not give vipd
// CAP_SETUID and CAP_SETGID (AmbientCapabilities=): vipd cannot switch
// users then, and every hook fails to start.
func checkHookUser(v *validator, c *Config, units, dropInDirs []string) {
	h := c.Hooks
	if h.User == "" || len(h.Command) == 0 || h.uid < 0 {
		return
	}
	unit := installedUnit(units)
	if unit == "" {
		return // not installed as a service: vipd runs as whoever starts it
	}
	svcUser := ""
	caps := map[string]bool{}
	for _, e := range unitEntries(append([]string{unit}, dropInFiles(dropInDirs)...)) {
		switch e[0] {
		case "User":
			svcUser = e[1]
		case "AmbientCapabilities":
			if e[1] == "" {
				clear(caps)
			}
			for _, f := range strings.Fields(e[1]) {
				caps[strings.TrimPrefix(f, "~")] = !strings.HasPrefix(f, "~")
			}
		}
	}
	if svcUser == "" || svcUser == "root" || svcUser == "0" || (caps["CAP_SETUID"] && caps["CAP_SETGID"]) {
		return
	}
	if uid, _, err := lookupUser(svcUser); err == nil && uid == h.uid {
		return // the hooks run as vipd's own user: nothing to switch
	}
	v.at("hooks.user", "hooks.user %q: %s runs vipd as User=%s without CAP_SETUID and CAP_SETGID, so vipd cannot switch users and every hook fails to start; leave hooks.user out (hooks run as %s, with hooks.capabilities), or add both to AmbientCapabilities= and CapabilityBoundingSet= in a drop-in (systemctl edit vipd)",
		h.User, unit, svcUser, svcUser)
}

// installedUnit returns the first of units that exists ("" if none).
func installedUnit(units []string) string {
	for _, u := range units {
		if _, err := os.Stat(u); err == nil {
			return u
		}
	}
	return ""
}
