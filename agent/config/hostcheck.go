package config

import (
	"fmt"
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
	// Prefixes are its addresses with their prefix lengths.
	Prefixes []netip.Prefix
}

// CheckHost checks the configuration against this host: what `vipd --check`
// warns about and what stops `vipd` at start. Warnings are things that work
// but are unsafe or will surprise (no key_file; what env.CheckL2 finds for
// an L2 VIP: a sysctl that breaks it, a VIP outside the prefixes of its
// interface; a secret file, state_dir or socket directory the service
// user cannot use). Errors are what make the daemon unable to do its job
// here: an L2 interface that does not exist. --check reports both as
// warnings (it may run before the interface exists); start fails on errors.
func CheckHost(c *Config, env HostEnv) (warnings, errors []Problem) {
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
	v := &validator{path: c.Path, keys: indexKeys(nil)}
	if data, err := os.ReadFile(c.Path); err == nil {
		v.keys = indexKeys(data)
	}
	if c.Cluster.KeyFile == "" {
		v.at("cluster", "cluster.key_file is not set: membership traffic is neither encrypted nor authenticated, and only cluster.allowed_networks (default: the configured peers) keeps other hosts from joining and swaying quorum; generate a key (head -c 32 /dev/urandom | base64), copy it to every node and set key_file")
	}
	ifaces, ierr := env.Interfaces()
	byName := map[string]HostInterface{}
	for _, ifi := range ifaces {
		byName[ifi.Name] = ifi
	}
	for i, vip := range c.VIPs {
		if vip.Mode != ModeL2 || ierr != nil {
			continue
		}
		p := fmt.Sprintf("vip[%d].interface", i)
		ifi, ok := byName[vip.Interface]
		if !ok {
			before := len(v.problems)
			v.at(p, "vip %q: interface %q does not exist on this host (ip -br link lists the interfaces)", vip.Name, vip.Interface)
			errors = append(errors, v.problems[before:]...)
			v.problems = v.problems[:before]
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
		if kubeconfig == "" && k.Explicit() {
			v.at("kubernetes.enabled", "kubernetes.enabled is true but no kubeconfig is found (looked for %s): vipd waits for one, and until then a cordoned or deleted Node does not withdraw this node; set kubernetes.kubeconfig", strings.Join(k.watch.Kubeconfigs, ", "))
		}
	}
	if env.Euid() == 0 {
		if u, err := user.Lookup(env.ServiceUser); err == nil {
			checkAccess(v, u, c)
			if kubeconfig != "" && !grantsReadSearch(env.DropInDirs) {
				checkKubeconfigAccess(v, u, c.Kubernetes, kubeconfig)
			}
		}
	}
	return v.problems, errors
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
	for _, d := range dirs {
		files, _ := filepath.Glob(filepath.Join(d, "*.conf"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				k, val, ok := strings.Cut(strings.TrimSpace(line), "=")
				if ok && strings.TrimSpace(k) == "AmbientCapabilities" && slices.Contains(strings.Fields(val), "CAP_DAC_READ_SEARCH") {
					return true
				}
			}
		}
	}
	return false
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
					}
				}
			}
		}
		out = append(out, hi)
	}
	return out, nil
}
