package bgplab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckBadBGPConfig runs the real `vipd --check` on configurations with
// bad [bgp] settings and expects one PATH:LINE:COL line per problem, at the
// key that is wrong. It needs no root: --check only reads the file.
func TestCheckBadBGPConfig(t *testing.T) {
	bin := binaries(t)
	dir := t.TempDir()
	okPass := filepath.Join(dir, "ok.pass")
	if err := os.WriteFile(okPass, []byte(md5Secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	openPass := filepath.Join(dir, "open.pass")
	if err := os.WriteFile(openPass, []byte(md5Secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(openPass, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pass")
	head := `node_name = "n1"
state_dir = "` + dir + `/state"
[cluster]
bind_address = "192.0.2.11"
[[vip]]
name = "apiserver"
address = "203.0.113.10"
mode = "bgp"
`
	// head is 8 lines: [bgp] is on line 9.
	cases := []struct {
		name string
		bgp  string
		want []string // "LINE:COL: message fragment"
	}{
		{"asn 0", `[bgp]
asn = 0
[[bgp.peer]]
address = "192.0.2.1"
asn = 64512
`, []string{"10:1: bgp: asn: must not be 0"}},
		{"bad peer address", `[bgp]
asn = 64513
[[bgp.peer]]
address = "192.0.2.300"
asn = 64512
`, []string{`12:1: invalid peer address "192.0.2.300"`}},
		{"hold_time 1s", `[bgp]
asn = 64513
[[bgp.peer]]
address = "192.0.2.1"
asn = 64512
hold_time = "1s"
`, []string{`14:1: bgp: peer 192.0.2.1: hold_time 1s: must be at least 3s`}},
		{"missing password file", `[bgp]
asn = 64513
[[bgp.peer]]
address = "192.0.2.1"
asn = 64512
password_file = "` + missing + `"
`, []string{"14:1: password_file " + missing + ": file does not exist"}},
		{"password file readable by others", `[bgp]
asn = 64513
[[bgp.peer]]
address = "192.0.2.1"
asn = 64512
password_file = "` + openPass + `"
`, []string{"14:1: password_file " + openPass + " has mode 0644"}},
		{"bfd and prefix limit out of range", `[bgp]
asn = 64513
[[bgp.peer]]
address = "192.0.2.1"
asn = 64512
bfd = true
bfd_min_interval = "20ms"
bfd_multiplier = 0
max_prefixes = 0
`, []string{
			`15:1: bgp: peer 192.0.2.1: bfd_min_interval 20ms: must be at least 50ms`,
			`16:1: bfd_multiplier must be 1-255, got 0`,
			`17:1: max_prefixes must be at least 1, got 0`,
		}},
		{"all at once, second peer", `[bgp]
asn = 0
[[bgp.peer]]
address = "192.0.2.1"
asn = 64512
password_file = "` + okPass + `"
[[bgp.peer]]
address = "not-an-ip"
asn = 64512
hold_time = "1s"
password_file = "` + missing + `"
`, []string{
			"10:1: bgp: asn: must not be 0",
			`16:1: invalid peer address "not-an-ip"`,
			`18:1: bgp: peers[1]: hold_time 1s: must be at least 3s`,
			"19:1: password_file " + missing + ": file does not exist",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".toml")
			if err := os.WriteFile(path, []byte(head+c.bgp), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(filepath.Join(bin, "vipd"), "--check", "--config", path).CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("vipd --check: err %v, want exit status 1; output:\n%s", err, out)
			}
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if strings.HasPrefix(l, path+":") {
					lines = append(lines, strings.TrimPrefix(l, path+":"))
				}
			}
			if len(lines) != len(c.want) {
				t.Fatalf("got %d %s:LINE:COL lines, want %d; output:\n%s", len(lines), path, len(c.want), out)
			}
			for i, w := range c.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("line %d: got %q, want prefix %q", i, lines[i], w)
				}
			}
		})
	}

	// The same keys, valid, pass.
	path := filepath.Join(dir, "good.toml")
	good := head + `[bgp]
asn = 64513
graceful_shutdown = "3s"
[[bgp.peer]]
address = "192.0.2.1"
asn = 64512
hold_time = "3s"
keepalive = "1s"
password_file = "` + okPass + `"
communities = ["64512:100"]
max_prefixes = 20000
bfd = true
bfd_min_interval = "100ms"
bfd_multiplier = 3
`
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(bin, "vipd"), "--check", "--config", path).CombinedOutput(); err != nil {
		t.Fatalf("vipd --check on a good file: %v\n%s", err, out)
	}
}
