package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// base is the smallest valid configuration; the cases below add to it.
const base = "[cluster]\nbind_address = \"192.0.2.11\"\npeers = [\"192.0.2.12\"]\n"

// oneVIP is a valid [[vip]] table (lines 4-7 after base).
const oneVIP = "[[vip]]\nname = \"api\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n"

// TestParseNewcomerMistakes: each mistake a new user made in the
// configuration is refused with a message that names the key, its place
// and what to write instead (docs/configuration.md lists them).
func TestParseNewcomerMistakes(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("this is not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missingPass := filepath.Join(dir, "bgp.pass")
	tests := []struct {
		name string
		toml string
		want []string // "line:col: substring"
	}{
		{
			name: "an address with a prefix length",
			toml: "[cluster]\nbind_address = \"192.0.2.11/24\"\n[[vip]]\nname = \"api\"\naddress = \"192.0.2.10/24\"\ninterface = \"eth0\"\n",
			want: []string{`2:1: cluster.bind_address: invalid address "192.0.2.11/24": write the address alone, no prefix here`,
				`5:1: vip[0].address: invalid address "192.0.2.10/24": write the address alone, no prefix here`},
		},
		{
			name: "a link-local IPv6 VIP",
			toml: base + "[[vip]]\nname = \"api\"\naddress = \"fe80::10\"\ninterface = \"eth0\"\n",
			want: []string{`6:1: vip "api": address fe80::10 is link-local`},
		},
		{
			name: "a health URL that is the VIP itself",
			toml: base + oneVIP + "[vip.health]\nurl = \"https://192.0.2.10:6443/readyz\"\n",
			want: []string{`9:1: vip "api": health url "https://192.0.2.10:6443/readyz" is the VIP itself`},
		},
		{
			name: "TLS keys with an http:// health URL",
			toml: base + oneVIP + "[vip.health]\nurl = \"http://127.0.0.1:10256/healthz\"\nca_file = \"/etc/kubernetes/pki/ca.crt\"\ntls_server_name = \"kubernetes\"\ninsecure_skip_verify = true\n",
			want: []string{`10:1: vip.health.ca_file applies to https:// URLs only`, `11:1: vip.health.tls_server_name applies to https:// URLs only`,
				`12:1: vip.health.insecure_skip_verify applies to https:// URLs only`},
		},
		{
			name: "a ca_file that is not PEM, and one that is a directory",
			toml: base + oneVIP + fmt.Sprintf("[vip.health]\nurl = \"https://127.0.0.1:6443/readyz\"\nca_file = %q\n", notPEM) +
				"[[vip]]\nname = \"api2\"\naddress = \"192.0.2.20\"\ninterface = \"eth0\"\n" + fmt.Sprintf("[vip.health]\nurl = \"https://127.0.0.1:6443/readyz\"\nca_file = %q\n", dir),
			want: []string{`10:1: ca_file ` + notPEM + `: holds no PEM certificate`, `17:1: ca_file ` + dir + `: is a directory`},
		},
		{
			name: "rise, fall and poke_rate written as 0",
			toml: base + "[connections]\npoke_rate = 0\n" + oneVIP + "[vip.health]\ncommand = [\"true\"]\nrise = 0\nfall = 0\n",
			want: []string{`5:1: poke_rate must be 1-1000000, got 0`, `12:1: rise must be at least 1, got 0`, `13:1: fall must be at least 1, got 0`},
		},
		{
			name: "bgp asn left out",
			toml: base + "[bgp]\n[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\n[[vip]]\nname = \"api\"\naddress = \"203.0.113.10\"\nmode = \"bgp\"\n",
			want: []string{`4:1: bgp.asn is required: this node's AS number`},
		},
		{
			name: "a BGP peer that is this node",
			toml: base + "[bgp]\nasn = 64513\n[[bgp.peer]]\naddress = \"192.0.2.11\"\nasn = 64512\n[[vip]]\nname = \"api\"\naddress = \"203.0.113.10\"\nmode = \"bgp\"\n",
			want: []string{`7:1: bgp.peer[0].address 192.0.2.11 is this node's cluster.bind_address`},
		},
		{
			name: "a password_file that does not exist",
			toml: base + "[bgp]\nasn = 64513\n[[bgp.peer]]\naddress = \"192.0.2.1\"\nasn = 64512\n" + fmt.Sprintf("password_file = %q\n", missingPass) +
				"[[vip]]\nname = \"api\"\naddress = \"203.0.113.10\"\nmode = \"bgp\"\n",
			want: []string{`9:1: password_file ` + missingPass + `: file does not exist: write the router's password to it (umask 077; printf '%s' PASSWORD > ` + missingPass + `), then chown vipd ` + missingPass},
		},
		{
			name: "a misspelt key",
			toml: base + "bind_adress = \"192.0.2.11\"\n" + oneVIP + "[vip.helth]\nurl = \"https://127.0.0.1:6443/readyz\"\n",
			want: []string{`4:1: unknown key "cluster.bind_adress" (did you mean "cluster.bind_address"?)`, `10:1: unknown key "vip.helth.url" (did you mean "vip.health.url"?)`},
		},
		{
			name: "a key written twice",
			toml: base + "bind_address = \"192.0.2.12\"\n" + oneVIP,
			want: []string{`4:1: cluster.bind_address: written twice (first at line 2, column 1)`},
		},
		{
			name: "the TOML library's message with the key it is about",
			toml: "[cluster]\nbind_port = 0x\n",
			want: []string{`2:13: cluster.bind_port: not a hexadecimal number`},
		},
		{
			name: "a NUL byte placed where it is",
			toml: "a = 1\n\x00\n",
			want: []string{`2:1: a NUL byte`},
		},
		{
			name: "a UTF-16 byte-order mark",
			toml: "\xff\xfe" + base + oneVIP,
			want: []string{`1:1: the file starts with a UTF-16 byte-order mark: vipd reads UTF-8 (iconv -f UTF-16 -t UTF-8 `},
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
		})
	}
}

// TestParseErrorsAreCapped: a file of many thousands of unknown keys
// prints a bounded number of lines (ExecStartPre writes them to the
// journal), the last saying how many more there were.
func TestParseErrorsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString(base + oneVIP)
	for i := range 5000 {
		fmt.Fprintf(&b, "junk_%d = 1\n", i)
	}
	_, err := rules.Parse("bad.toml", []byte(b.String()))
	if err == nil {
		t.Fatal("Parse accepted 5000 unknown keys")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != MaxProblems+1 {
		t.Fatalf("%d lines, want %d (MaxProblems and one more)", len(lines), MaxProblems+1)
	}
	if want := fmt.Sprintf("bad.toml: and %d more problems", 5000-MaxProblems); lines[len(lines)-1] != want {
		t.Errorf("last line %q, want %q", lines[len(lines)-1], want)
	}
}

// TestLoadDirectory: --config naming a directory says so, and what it
// takes.
func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	_, err := rules.Load(dir)
	if err == nil || !strings.Contains(err.Error(), dir+" is a directory: --config takes the configuration file (such as "+DefaultConfigPath+")") {
		t.Errorf("rules.Load(dir) = %v, want it to say the path is a directory and what to give", err)
	}
}

// TestCheckHostNewcomerMistakes: what only this host can tell is wrong:
// a VIP or a BGP peer that is one of this host's own addresses (errors:
// vipd would remove the host's address at start, or peer with itself), a
// bind address not on the host (a warning: vipd waits for it), no peers, a
// kubeconfig that is named but missing or not a kubeconfig, and state_dir
// or api.socket outside the paths vipd.service may write.
func TestCheckHostNewcomerMistakes(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.conf")
	if err := os.WriteFile(garbage, []byte("\x01\x02 not yaml: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(dir, "vipd.service")
	b, err := os.ReadFile("../../packaging/systemd/vipd.service")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unit, b, 0o644); err != nil {
		t.Fatal(err)
	}
	env := HostEnv{
		Interfaces: func() ([]HostInterface, error) {
			// As hostInterfaces reads them: the networks masked.
			// 192.0.2.10/32 is a VIP as vipd puts it on a host: a vipd
			// that crashed left it, or a restart in place kept it.
			return []HostInterface{{Name: "eth0",
				Prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("192.0.2.10/32")},
				Addrs:    []netip.Addr{netip.MustParseAddr("192.0.2.5"), netip.MustParseAddr("192.0.2.10")}}}, nil
		},
		Euid:      func() int { return 1000 },
		UnitFiles: []string{unit}, DropInDirs: []string{filepath.Join(dir, "none")},
	}
	tests := []struct {
		name          string
		toml          string
		errors, warns []string
	}{
		{
			name:   "a VIP that is this host's address",
			toml:   "[cluster]\nbind_address = \"192.0.2.11\"\npeers = [\"192.0.2.12\"]\n[[vip]]\nname = \"api\"\naddress = \"192.0.2.5\"\ninterface = \"eth0\"\n",
			errors: []string{`6:1: vip "api": address 192.0.2.5 is this host's own address (on eth0)`},
		},
		{
			// Not an error: the start after a crash or a restart in
			// place finds the VIP there and must not be refused.
			name:  "a VIP already on the host as vipd puts it",
			toml:  "[cluster]\nbind_address = \"192.0.2.5\"\npeers = [\"192.0.2.12\"]\n[[vip]]\nname = \"api\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n",
			warns: []string{`6:1: vip "api": address 192.0.2.10 is already on this host (on eth0, as a VIP is): vipd takes it over`},
		},
		{
			name:   "a BGP peer that is this host, and a bind address not on it",
			toml:   "[cluster]\nbind_address = \"192.0.2.11\"\npeers = [\"192.0.2.12\"]\n[bgp]\nasn = 64513\n[[bgp.peer]]\naddress = \"192.0.2.5\"\nasn = 64512\n[[vip]]\nname = \"api\"\naddress = \"203.0.113.10\"\nmode = \"bgp\"\n",
			errors: []string{`7:1: bgp.peer[0].address 192.0.2.5 is this host's own address (on eth0)`},
			warns:  []string{`2:1: cluster.bind_address 192.0.2.11 is not an address of this host (yet): vipd waits for it at start`},
		},
		{
			name:  "no peers",
			toml:  "[cluster]\nbind_address = \"192.0.2.5\"\npeers = []\n[[vip]]\nname = \"api\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n",
			warns: []string{`3:1: cluster.peers is empty`},
		},
		{
			name: "a named kubeconfig that does not exist",
			toml: "[cluster]\nbind_address = \"192.0.2.5\"\npeers = [\"192.0.2.12\"]\n[[vip]]\nname = \"api\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n" +
				fmt.Sprintf("[kubernetes]\nenabled = true\nkubeconfig = %q\n", filepath.Join(dir, "missing.conf")),
			warns: []string{`10:1: kubernetes.kubeconfig ` + filepath.Join(dir, "missing.conf") + ` does not exist (yet)`},
		},
		{
			name: "a garbage kubeconfig",
			toml: "[cluster]\nbind_address = \"192.0.2.5\"\npeers = [\"192.0.2.12\"]\n[[vip]]\nname = \"api\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n" +
				fmt.Sprintf("[kubernetes]\nenabled = true\nkubeconfig = %q\n", garbage),
			warns: []string{`10:1: kubernetes.kubeconfig ` + garbage + `: not a kubeconfig the Node watch can use`},
		},
		{
			name: "state_dir and api.socket outside the unit's writable paths",
			toml: "state_dir = \"/srv/vipd\"\n[api]\nsocket = \"/var/run/vipd-api/vipd.sock\"\n[cluster]\nbind_address = \"192.0.2.5\"\npeers = [\"192.0.2.12\"]\n[[vip]]\nname = \"api\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n",
			warns: []string{`1:1: state_dir /srv/vipd is outside the paths vipd.service may write (` + unit + `: /run/vipd, /var/lib/vipd)`,
				`3:1: api.socket /var/run/vipd-api/vipd.sock is outside the paths vipd.service may write`},
		},
		{
			name: "hooks as another user than the unit's, which cannot switch users",
			toml: "[cluster]\nbind_address = \"192.0.2.5\"\npeers = [\"192.0.2.12\"]\n[[vip]]\nname = \"api\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n" +
				"[hooks]\ncommand = [\"/bin/true\"]\nuser = \"root\"\n",
			warns: []string{`10:1: hooks.user "root": ` + unit + ` runs vipd as User=vipd without CAP_SETUID and CAP_SETGID, so vipd cannot switch users and every hook fails to start`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vipd.toml")
			if err := os.WriteFile(path, []byte(tt.toml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := rules.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			warns, errs := CheckHost(c, env)
			for _, e := range errs {
				if !slices.ContainsFunc(tt.errors, func(w string) bool { return strings.Contains(e.Error(), path+":"+w) }) {
					t.Errorf("unexpected error %q", e.Error())
				}
			}
			for _, set := range []struct {
				what string
				want []string
				got  []Problem
			}{{"errors", tt.errors, errs}, {"warnings", tt.warns, warns}} {
				var lines []string
				for _, p := range set.got {
					lines = append(lines, p.Error())
				}
				text := strings.Join(lines, "\n")
				for _, w := range set.want {
					if !strings.Contains(text, path+":"+w) {
						t.Errorf("%s miss %q:\n%s", set.what, w, text)
					}
				}
			}
		})
	}
}

// TestCheckHostRealAddresses: on this host's real interfaces (loopback is
// always there), an address the host has is known as one: 127.0.0.1 as a
// bind address draws no "not an address of this host" warning, and another
// address of the host as a BGP peer is refused as this host's own.
func TestCheckHostRealAddresses(t *testing.T) {
	ifs, err := hostInterfaces()
	if err != nil {
		t.Fatal(err)
	}
	found, other := false, netip.Addr{}
	for _, ifi := range ifs {
		for _, a := range ifi.Addrs {
			switch {
			case a == netip.MustParseAddr("127.0.0.1"):
				found = true
			case !other.IsValid() && !a.IsLinkLocalUnicast() && !a.Is4In6():
				other = a
			}
		}
	}
	if !found || !other.IsValid() {
		t.Skipf("this host lacks 127.0.0.1 (%v) or a second address (%v)", found, other)
	}
	path := filepath.Join(t.TempDir(), "vipd.toml")
	text := fmt.Sprintf("[cluster]\nbind_address = \"127.0.0.1\"\npeers = [\"192.0.2.12\"]\n[bgp]\nasn = 64513\nrouter_id = \"192.0.2.11\"\n[[bgp.peer]]\naddress = %q\nasn = 64512\n", other) +
		"[[vip]]\nname = \"api\"\naddress = \"203.0.113.10\"\nmode = \"bgp\"\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := rules.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	warns, errs := CheckHost(c, HostEnv{Euid: func() int { return 1000 }, UnitFiles: []string{}})
	for _, w := range warns {
		if strings.Contains(w.Msg, "is not an address of this host") {
			t.Errorf("warned about the host's own 127.0.0.1: %v", w)
		}
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Msg, fmt.Sprintf("bgp.peer[0].address %s is this host's own address", other)) {
		t.Errorf("errors %v, want the BGP peer at %s refused", errs, other)
	}
}
