package config

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/vipd/vipd/nodewatch"
)

const goodConfig = `node_name = "cp-1"
state_dir = "/var/lib/vipd"
[api]
socket = "/run/vipd/vipd.sock"
[cluster]
bind_address = "192.0.2.11"
peers = ["192.0.2.12", "192.0.2.13:7950", "cp-4.example.net"]
rejoin_interval = "10s"
[[vip]]
name = "kube-apiserver"
interface = "eth0"
address = "192.0.2.10"
[vip.health]
fall = 5
url = "https://127.0.0.1:6443/readyz"
[[vip]]
name = "apiserver-v6"
address = "2001:db8::10"
interface = "eth0"
`

func TestParseGoodConfigAppliesDefaults(t *testing.T) {
	c, err := rules.Parse("good.toml", []byte(goodConfig))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := c.Cluster.BindPort, DefaultBindPort; got != want {
		t.Errorf("bind_port = %d, want default %d", got, want)
	}
	if got, want := c.Cluster.PeerAddrs(), []string{"192.0.2.12:7946", "192.0.2.13:7950", "cp-4.example.net:7946"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("peers = %v, want %v", got, want)
	}
	if got := c.Cluster.RejoinIntervalDuration(); got != 10*time.Second {
		t.Errorf("rejoin_interval = %s, want 10s", got)
	}
	if got := c.Cluster.HandoffTimeoutDuration(); got != DefaultHandoffTimeout {
		t.Errorf("handoff_timeout = %s, want default %s", got, DefaultHandoffTimeout)
	}
	if c.Cluster.FailureDetection != "fast" {
		t.Errorf("failure_detection = %q, want default fast", c.Cluster.FailureDetection)
	}
	if got := c.Cluster.RestartGraceDuration(); got != DefaultRestartGrace {
		t.Errorf("restart_grace = %s, want default %s", got, DefaultRestartGrace)
	}
	v := c.VIPs[0]
	if v.Mode != ModeL2 || v.Announce != "owner" || v.Preempt {
		t.Errorf("vip defaults: mode %q announce %q preempt %v", v.Mode, v.Announce, v.Preempt)
	}
	h := v.Health
	if h.Rise != DefaultHealthRise || h.Fall != 5 || h.interval != DefaultHealthInterval || h.timeout != DefaultHealthTimeout {
		t.Errorf("health = rise %d fall %d interval %s timeout %s", h.Rise, h.Fall, h.interval, h.timeout)
	}
	if !c.VIPs[1].Addr().Is6() {
		t.Errorf("second VIP address %v is not IPv6", c.VIPs[1].Addr())
	}
	cc := c.Connections
	if !cc.Enabled() || len(cc.PortList()) != 0 || cc.PokeRate != DefaultPokeRate || cc.PokeTimeoutDuration() != DefaultPokeTimeout {
		t.Errorf("connections = reset %v ports %v poke_rate %d poke_timeout %s, want the defaults", cc.Enabled(), cc.PortList(), cc.PokeRate, cc.PokeTimeoutDuration())
	}
	off, err := rules.Parse("off.toml", []byte(goodConfig+"[connections]\nreset = false\nports = [6443, 443]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if off.Connections.Enabled() || fmt.Sprint(off.Connections.PortList()) != "[6443 443]" {
		t.Errorf("connections.reset = false, ports = [6443, 443]: enabled %v, ports %v", off.Connections.Enabled(), off.Connections.PortList())
	}
}

// TestKubernetesDefaults: without a [kubernetes] section the Node watch is
// off (under the packaged unit it could not read the kubelet's
// credentials); turned on, it looks for the kubelet's kubeconfig where
// kubeadm, RKE2, k3s and Talos put it, and falls back to node_name for the
// Node's name; the section's keys reach the watch.
func TestKubernetesDefaults(t *testing.T) {
	c, err := rules.Parse("good.toml", []byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	if c.Kubernetes.On() || c.Kubernetes.Explicit() {
		t.Errorf("no [kubernetes] section: on %v, explicit %v; want off", c.Kubernetes.On(), c.Kubernetes.Explicit())
	}
	c, err = rules.Parse("k.toml", []byte(goodConfig+"[kubernetes]\nenabled = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	k := c.Kubernetes
	w := k.Watch()
	if !k.On() || !k.Explicit() || len(w.Kubeconfigs) != len(nodewatch.DefaultKubeconfigs()) || w.Kubeconfigs[0] != "/etc/kubernetes/kubelet.conf" || w.FallbackNodeName != "cp-1" || w.NodeName != "" || w.Rules.FollowExclusionLabel {
		t.Errorf("defaults: on %v explicit %v, watch %+v", k.On(), k.Explicit(), w)
	}
	c, err = rules.Parse("k.toml", []byte(goodConfig+"[kubernetes]\nenabled = false\n"))
	if err != nil || c.Kubernetes.On() {
		t.Errorf("enabled = false: %v, on %v", err, c != nil && c.Kubernetes.On())
	}
	c, err = rules.Parse("k.toml", []byte(goodConfig+"[kubernetes]\nenabled = true\nkubeconfig = \"/etc/vipd/kubeconfig\"\nnode_name = \"node-1\"\nserver = \"https://127.0.0.1:6443\"\ntls_server_name = \"kubernetes\"\nfollow_exclusion_label = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	w = c.Kubernetes.Watch()
	if !c.Kubernetes.Explicit() || len(w.Kubeconfigs) != 1 || w.Kubeconfigs[0] != "/etc/vipd/kubeconfig" || w.NodeName != "node-1" ||
		w.Server != "https://127.0.0.1:6443" || w.TLSServerName != "kubernetes" || !w.Rules.FollowExclusionLabel {
		t.Errorf("watch %+v", w)
	}
}

// TestKubernetesHostCheck: enabled = true with no kubeconfig to be found
// is a --check warning, placed at kubernetes.kubeconfig when that names
// the file (and saying it does not exist, not to set it); absent, it is
// not (the watch waits quietly for kubeadm to write one).
func TestKubernetesHostCheck(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "kubelet.conf")
	env := HostEnv{Interfaces: func() ([]HostInterface, error) { return nil, nil }, Euid: func() int { return 1000 }}
	for _, tc := range []struct {
		section string
		warn    bool
	}{
		{fmt.Sprintf("[kubernetes]\nenabled = true\nkubeconfig = %q\n", missing), true},
		{fmt.Sprintf("[kubernetes]\nkubeconfig = %q\n", missing), false},
		{fmt.Sprintf("[kubernetes]\nenabled = false\nkubeconfig = %q\n", missing), false},
	} {
		path := filepath.Join(t.TempDir(), "vipd.toml")
		text := goodConfig + tc.section
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := rules.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		warnings, _ := CheckHost(c, env)
		found := false
		for _, w := range warnings {
			if strings.Contains(w.Msg, "does not exist (yet)") {
				found = true
				if w.Line != 22 || strings.Contains(w.Msg, "set kubernetes.kubeconfig") {
					t.Errorf("warning at line %d, want 22 (kubernetes.kubeconfig), not asking to set it: %v", w.Line, w)
				}
			}
		}
		if found != tc.warn {
			t.Errorf("%q: warned %v, want %v (%v)", tc.section, found, tc.warn, warnings)
		}
	}
}

// TestKubernetesOffButConfigured: a [kubernetes] section that sets keys
// but not enabled = true leaves the watch off, and --check says so at the
// section, with the fix; enabled = false written, or the keys left out,
// is not worth a warning.
func TestKubernetesOffButConfigured(t *testing.T) {
	env := HostEnv{Interfaces: func() ([]HostInterface, error) { return nil, nil }, Euid: func() int { return 1000 }}
	for _, tc := range []struct {
		section string
		warn    bool
	}{
		{"[kubernetes]\nkubeconfig = \"/etc/vipd/kubeconfig\"\n", true},
		{"[kubernetes]\nnode_name = \"cp-1\"\n", true},
		{"[kubernetes]\nenabled = false\nkubeconfig = \"/etc/vipd/kubeconfig\"\n", false},
		{"", false},
	} {
		c, err := rules.Parse("k.toml", []byte(goodConfig+tc.section))
		if err != nil {
			t.Fatal(err)
		}
		warnings, _ := CheckHost(c, env)
		found := false
		for _, w := range warnings {
			if strings.Contains(w.Msg, "the Node watch is off") && strings.Contains(w.Msg, "enabled = true") {
				found = true
			}
		}
		if found != tc.warn {
			t.Errorf("%q: warned %v, want %v (%v)", tc.section, found, tc.warn, warnings)
		}
	}
}

// TestParseExampleConfig: the example validates once its key file exists
// (it names /etc/vipd/cluster.key, which the test points at a key of its
// own), and without it the problem says how to make one.
func TestParseExampleConfig(t *testing.T) {
	b, err := os.ReadFile("../../vipd.toml.example")
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(key, []byte(testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), `key_file = "/etc/vipd/cluster.key"`, fmt.Sprintf("key_file = %q", key), 1)
	if text == string(b) {
		t.Fatal("the example no longer sets key_file = \"/etc/vipd/cluster.key\"")
	}
	if _, err := rules.Parse("vipd.toml.example", []byte(text)); err != nil {
		t.Fatalf("vipd.toml.example does not validate: %v", err)
	}
	missing := strings.Replace(text, key, filepath.Join(t.TempDir(), "cluster.key"), 1)
	_, err = rules.Parse("vipd.toml.example", []byte(missing))
	if err == nil || !strings.Contains(err.Error(), "head -c 32 /dev/urandom | base64") {
		t.Errorf("missing key file: %v; want how to generate one", err)
	}
}

// TestParseBadConfigs checks that each mistake is reported at the line and
// column of the key it is about, and that every problem is listed.
func TestParseBadConfigs(t *testing.T) {
	tests := []struct {
		name string
		toml string
		want []string // "line:col: substring"
	}{
		{
			name: "unknown key in a table",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\nbind_adress = \"x\"\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\n",
			want: []string{`3:1: unknown key "cluster.bind_adress"`},
		},
		{
			name: "unknown key in the second vip",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\n[[vip]]\nname=\"b\"\n  adress=\"192.0.2.9\"\ninterface=\"eth0\"\n",
			want: []string{`9:3: unknown key "vip.adress"`, `7:1: vip.address is required`},
		},
		{
			name: "bad addresses and durations, all listed",
			toml: "[cluster]\nbind_address = \"192.0.2.300\"\npeers = [\"192.0.2.12\", \"192.0.2.400:7946\"]\nrejoin_interval = \"30 seconds\"\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.1000\"\ninterface=\"eth0\"\n",
			want: []string{`2:1: cluster.bind_address: invalid address "192.0.2.300"`, `3:1: peers[1]: invalid address "192.0.2.400:7946"`, `4:1: invalid duration "30 seconds"`, `7:1: vip[0].address: invalid address "192.0.2.1000"`},
		},
		{
			name: "kubernetes section checked by the Node watch's rules",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\n[kubernetes]\nkubeconfig = \"kubelet.conf\"\nnode_name = \"CP_1\"\nserver = \"http://192.0.2.11:6443\"\nenabled = \"yes\"\n",
			want: []string{`11:1: kubernetes.enabled: must be true or false, got a string ("yes")`},
		},
		{
			name: "kubernetes values",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\n[kubernetes]\nkubeconfig = \"kubelet.conf\"\nnode_name = \"CP_1\"\nserver = \"http://192.0.2.11:6443\"\n",
			want: []string{`8:1: kubeconfig must be an absolute path, got "kubelet.conf"`, `9:1: node_name "CP_1" is not a Kubernetes node name`, `10:1: server "http://192.0.2.11:6443": want https://HOST[:PORT]`},
		},
		{
			name: "duplicate VIP names",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[[vip]]\nname=\"api\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\n[[vip]]\nname=\"api\"\naddress=\"192.0.2.20\"\ninterface=\"eth0\"\n",
			want: []string{`8:1: duplicate VIP name "api" (first at vip[0])`},
		},
		{
			name: "missing interface for l2",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[[vip]]\nname=\"api\"\naddress=\"192.0.2.10\"\n",
			want: []string{`3:1: vip "api": interface is required (mode "l2")`},
		},
		{
			name: "missing bind address and no vip",
			toml: "[cluster]\nbind_port = 70000\n",
			want: []string{`1:1: cluster.bind_address is required`, `2:1: bind_port must be 1-65535`, `no [[vip]] configured`},
		},
		{
			name: "connections out of range",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[connections]\nports = [6443, 0, 6443]\npoke_rate = -1\npoke_timeout = \"10ms\"\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\n",
			want: []string{`4:1: ports[1] must be 1-65535, got 0`, `4:1: ports[2]: 6443 is listed twice`, `5:1: poke_rate must be 1-1000000, got -1`, `6:1: poke_timeout must be at least 100ms, got "10ms"`},
		},
		{
			name: "restart grace out of range",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\nrestart_grace = \"1s\"\n[[vip]]\nname=\"api\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\n",
			want: []string{`3:1: restart_grace must be 0s (off) or 2s-1m0s, got "1s"`},
		},
		{
			name: "graceful restart times the speaker refuses, at their keys",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[bgp]\nasn = 64513\ngraceful_restart_time = \"2500ms\"\nlong_lived_stale_time = \"forever\"\n[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\n[[vip]]\nname=\"api\"\naddress=\"203.0.113.10\"\nmode = \"bgp\"\n",
			want: []string{`5:1: bgp: graceful_restart_time 2.5s: must be whole non-negative seconds`, `6:1: invalid duration "forever"`},
		},
		{
			name: "long-lived without graceful restart",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[bgp]\nasn = 64513\nlong_lived_stale_time = \"1h\"\n[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\n[[vip]]\nname=\"api\"\naddress=\"203.0.113.10\"\nmode = \"bgp\"\n",
			want: []string{`5:1: bgp: long_lived_stale_time 1h0m0s: needs graceful_restart_time`},
		},
		{
			name: "bad mode and failure detection",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\nfailure_detection = \"slow\"\n[[vip]]\nname=\"api\"\naddress=\"192.0.2.10\"\nmode = \"arp\"\n",
			want: []string{`3:1: failure_detection must be "lan" or "fast"`, `7:1: mode must be "l2" or "bgp"`},
		},
		{
			name: "wrong types, every one placed at its key",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\nbind_port = \"7946\"\npeers = \"192.0.2.12\"\n[[vip]]\nname = \"a\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\npreempt = \"yes\"\n[[vip]]\nname = 7\n[bgp]\nasn = 4294967296\n",
			want: []string{`3:1: cluster.bind_port: must be an integer, got a string ("7946")`, `4:1: cluster.peers: must be an array, got a string`, `9:1: vip.preempt: must be true or false, got a string ("yes")`, `11:1: vip.name: must be a string, got an integer (7)`, `13:1: bgp.asn: 4294967296 is out of range`},
		},
		{
			name: "a table where an array of tables belongs",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[vip]\nname = \"a\"\n",
			want: []string{`3:1: vip: must be an array of tables ([[vip]]), got a table`},
		},
		{
			name: "syntax error",
			toml: "[cluster\nbind_address = \"192.0.2.11\"\n",
			want: []string{`2:9: expected '.' or ']' to end table name`},
		},
		{
			// The library quotes the rune it stopped at raw; a newline
			// there must not start a line without the file name.
			name: "syntax error at a newline stays on one line",
			toml: "a = 0b\nb = 0o\tc\n",
			want: []string{`1:5: a: not a binary number: '0b\n'`},
		},
		{
			name: "health needs url or command, bad url",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\n[vip.health]\nurl = \"ftp://x\"\ninterval = \"-1s\"\n",
			want: []string{`8:1: health url must be http:// or https://`, `9:1: duration must be positive`},
		},
		{
			name: "bgp mode without bgp section",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[[vip]]\nname=\"a\"\naddress=\"203.0.113.10\"\nmode=\"bgp\"\n",
			want: []string{`a VIP has mode "bgp" but there is no [bgp] section`},
		},
		{
			name: "bad bgp: asn 0, bad peer address, short hold time, missing password file",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[bgp]\nasn = 0\n[[bgp.peer]]\naddress = \"192.0.2.256\"\nasn = 64512\nhold_time = \"1s\"\npassword_file = \"/nonexistent/vipd-test.pass\"\ncommunities = [\"64512:70000\"]\n[[vip]]\nname=\"a\"\naddress=\"203.0.113.10\"\nmode=\"bgp\"\n",
			want: []string{`4:1: bgp: asn: must not be 0`, `6:1: invalid peer address "192.0.2.256"`, `8:1: bgp: peers[0]: hold_time 1s: must be at least 3s`, `9:1: password_file /nonexistent/vipd-test.pass: file does not exist`, `10:1: bgp: peers[0]: community "64512:70000": value part must be 0-65535`},
		},
		{
			name: "VIP equal to this node's bind address or to a peer's address",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\npeers = [\"192.0.2.12:7946\", \"192.0.2.13\"]\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.11\"\ninterface=\"eth0\"\n[[vip]]\nname=\"b\"\naddress=\"192.0.2.13\"\ninterface=\"eth0\"\n",
			want: []string{`6:1: vip "a": address 192.0.2.11 is this node's cluster.bind_address; a VIP needs an address no host uses`, `10:1: vip "b": address 192.0.2.13 is the address of cluster.peers[1]`},
		},
		{
			name: "unspecified bind address, bad node name, bad allowed network",
			toml: "node_name = \"cp-1\\nINFO fake\"\n[cluster]\nbind_address = \"0.0.0.0\"\nallowed_networks = [\"192.0.2.0/24\", \"lan\"]\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\n",
			want: []string{`1:1: node_name "cp-1\nINFO fake": use letters, digits`, `3:1: bind_address 0.0.0.0 is not an address other nodes can reach`, `4:1: allowed_networks[1]: invalid network "lan"`},
		},
		{
			name: "intervals too short to be sane",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\nrejoin_interval = \"10ms\"\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\n[vip.health]\ncommand = [\"true\"]\ninterval = \"1ns\"\ntimeout = \"1ns\"\n",
			want: []string{`3:1: rejoin_interval must be at least 1s, got "10ms"`, `10:1: interval must be at least 100ms, got "1ns"`, `11:1: timeout must be at least 10ms, got "1ns"`},
		},
		{
			// What the bgp package refuses is refused here, at its key
			// (the daemon builds its speaker from the same values).
			name: "bgp rules: whole seconds, keepalive shorter than hold_time, a peer once, routable VIP, prefix limit",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[bgp]\nasn = 64513\n[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\nhold_time = \"4500ms\"\n" +
				"[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\nhold_time = \"9s\"\nkeepalive = \"9s\"\nmax_prefixes = 2000000\n[[vip]]\nname=\"a\"\naddress=\"fe80::10\"\nmode=\"bgp\"\n",
			want: []string{`8:1: bgp: peer 192.0.2.1: hold_time 4.5s: must be whole seconds`, `10:1: bgp: peer 192.0.2.1: listed twice`,
				`13:1: bgp: peer 192.0.2.1: keepalive 9s: must be shorter than hold time 9s`, `14:1: bgp: peer 192.0.2.1: max_prefixes 2000000: must be at most 1000000`,
				`17:1: bgp: vip: address fe80::10: not a routable unicast address`},
		},
		{
			name: "interface name the kernel refuses",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.10\"\ninterface=\"eth0.vlan-1234567\"\n",
			want: []string{`6:1: vip "a": invalid interface name "eth0.vlan-1234567"`},
		},
		{
			name: "announce all needs bgp",
			toml: "[cluster]\nbind_address = \"192.0.2.11\"\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\nannounce=\"all\"\n",
			want: []string{`7:1: announce = "all" needs mode "bgp"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rules.Parse("bad.toml", []byte(tt.toml))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Parse error = %v, want *ConfigError", err)
			}
			text := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(text, "bad.toml:"+w) && !strings.Contains(text, "bad.toml: "+w) {
					t.Errorf("missing %q in:\n%s", w, text)
				}
			}
			for _, line := range strings.Split(text, "\n") {
				if !strings.HasPrefix(line, "bad.toml:") {
					t.Errorf("line without the file name: %q", line)
				}
			}
			for _, p := range ce.Problems {
				if p.Path != "bad.toml" {
					t.Errorf("problem without path: %+v", p)
				}
			}
		})
	}
}

func TestPeerAddress(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"192.0.2.12", "192.0.2.12:7946", true},
		{"192.0.2.12:8000", "192.0.2.12:8000", true},
		{"2001:db8::1", "[2001:db8::1]:7946", true},
		{"[2001:db8::1]:8000", "[2001:db8::1]:8000", true},
		{"cp-2", "cp-2:7946", true},
		{"cp-2.example.net:9000", "cp-2.example.net:9000", true},
		{"192.0.2.300", "", false},
		{"192.0.2.12:0", "", false},
		{"192.0.2.12:x", "", false},
		{"bad_host!", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, err := peerAddress(tt.in, 7946)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("peerAddress(%q) = %q, %v; want %q ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestKeyIndexPositions(t *testing.T) {
	ki := indexKeys([]byte("a = 1\n[t]\n  b = \"\"\"\nx = 2\n\"\"\"\nc = [\n 1,\n]\nd = 3\n[[arr]]\ne = 1\n[[arr]]\n'e' = 2\n[arr.sub]\nf = 1\n"))
	want := map[string]keyPos{
		"a": {1, 1}, "t": {2, 1}, "t.b": {3, 3}, "t.c": {6, 1}, "t.d": {9, 1},
		"arr[0].e": {11, 1}, "arr[1].e": {13, 1}, "arr[1].sub.f": {15, 1},
	}
	for k, w := range want {
		if got, ok := ki.pos[k]; !ok || got != w {
			t.Errorf("%s at %v (found %v), want %v", k, got, ok, w)
		}
	}
	if _, ok := ki.pos["t.x"]; ok {
		t.Errorf("line inside a multi-line string taken for a key")
	}
}

// TestKeyIndexQuotingAndNesting: quoted keys are placed under the name the
// decoder gives them (escapes decoded, "=", "]" and "#" inside quotes
// being part of the name), and nothing inside a value that spans lines
// (an array with strings holding brackets, a multi-line inline table, a
// literal multi-line string ending in extra quotes) is taken for a key.
func TestKeyIndexQuotingAndNesting(t *testing.T) {
	text := strings.Join([]string{
		`"a\tb" = 1`,            // 1
		`"k=]#" = 2`,            // 2
		`[""]`,                  // 3
		`"\u00e9" = 3`,          // 4
		`[t."x.y"]`,             // 5
		`arr = [ "]", '[', """`, // 6
		`y = 1 ] """, # ]`,      // 7
		`]`,                     // 8
		`inl = { p = 1,`,        // 9
		`  q = [2] }`,           // 10
		`lit = '''z = 1'''''`,   // 11
		`esc = "say \"x = 1\""`, // 12
		`after = 4 # "unclosed`, // 13
	}, "\n") + "\n"
	ki := indexKeys([]byte(text))
	want := map[string]keyPos{
		"a\tb": {1, 1}, "k=]#": {2, 1}, "": {3, 1}, ".\u00e9": {4, 1},
		"t.x.y": {5, 1}, "t.x.y.arr": {6, 1}, "t.x.y.inl": {9, 1},
		"t.x.y.lit": {11, 1}, "t.x.y.esc": {12, 1}, "t.x.y.after": {13, 1},
	}
	for k, w := range want {
		if got, ok := ki.pos[k]; !ok || got != w {
			t.Errorf("%q at %v (found %v), want %v", k, got, ok, w)
		}
	}
	if len(ki.pos) != len(want) {
		t.Errorf("indexed %d keys, want %d: %v", len(ki.pos), len(want), ki.pos)
	}
	if _, err := toml.Decode(text, new(map[string]any)); err != nil {
		t.Fatalf("the test's text is not valid TOML: %v", err)
	}
}

func BenchmarkParseConfig(b *testing.B) {
	data := []byte(goodConfig)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := rules.Parse("bench.toml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestKubeconfigAccessHostCheck: --check as root warns when the service
// user cannot read the kubeconfig, naming the packaged drop-in that fixes
// it; a vipd.service drop-in granting CAP_DAC_READ_SEARCH silences it, one
// that does not (or a commented-out grant) does not.
func TestKubeconfigAccessHostCheck(t *testing.T) {
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skip("no user nobody to check for:", err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubelet.conf")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "vipd.toml")
	if err := os.WriteFile(path, []byte(goodConfig+fmt.Sprintf("[kubernetes]\nenabled = true\nkubeconfig = %q\n", kubeconfig)), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := rules.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dropin string
		warn         bool
	}{
		{"no drop-in", "", true},
		{"the packaged drop-in", "", false},
		{"a drop-in without the capability", "[Service]\nAmbientCapabilities=CAP_NET_ADMIN\n", true},
		{"the grant commented out", "[Service]\n#AmbientCapabilities=CAP_DAC_READ_SEARCH\n", true},
		{"the admin's own grant", "[Service]\nAmbientCapabilities = CAP_DAC_READ_SEARCH\nCapabilityBoundingSet=CAP_DAC_READ_SEARCH\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dropins := t.TempDir()
			text := tc.dropin
			if tc.name == "the packaged drop-in" {
				b, err := os.ReadFile("../../packaging/systemd/kubelet-credentials.conf")
				if err != nil {
					t.Fatal(err)
				}
				text = string(b)
			}
			if text != "" {
				if err := os.WriteFile(filepath.Join(dropins, "x.conf"), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			env := HostEnv{ServiceUser: "nobody", Interfaces: func() ([]HostInterface, error) { return nil, nil },
				Euid: func() int { return 0 }, DropInDirs: []string{filepath.Join(dropins, "missing"), dropins}}
			warnings, _ := CheckHost(c, env)
			var got []Problem
			for _, w := range warnings {
				if strings.Contains(w.Msg, "cannot read it") {
					got = append(got, w)
				}
			}
			if (len(got) > 0) != tc.warn {
				t.Fatalf("warned %v, want %v: %v", got, tc.warn, warnings)
			}
			if tc.warn && !strings.Contains(got[0].Msg, "link "+KubeletCredentialsDropIn+" into /etc/systemd/system/vipd.service.d/") {
				t.Errorf("the warning does not name the drop-in: %v", got[0])
			}
		})
	}
}
