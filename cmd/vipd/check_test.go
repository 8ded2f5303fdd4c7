package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vipd/vipd/internal/backendconfig"
)

// TestCheckRefusesWhatStartRefuses: every configuration the daemon refuses
// at start-up before it binds or announces (agent.Run's and main's own
// refusals; agent's TestRunRefusesWhatPreflightRefuses shows Run refuses
// them) is refused by --check too, exit 1, with the problem placed at its
// key: ExecStartPre's --check is where an operator reads why.
func TestCheckRefusesWhatStartRefuses(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "a-file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	head := func(stateDir, socket string) string {
		return fmt.Sprintf("node_name = \"cp-1\"\nstate_dir = %q\n[api]\nsocket = %q\n", stateDir, socket)
	}
	state, sock := filepath.Join(dir, "state"), filepath.Join(dir, "run", "vipd.sock")
	const tail = "[cluster]\nbind_address = \"192.0.2.11\"\npeers = [\"192.0.2.12\"]\n[[vip]]\nname = \"apiserver\"\naddress = \"192.0.2.10\"\ninterface = \"lo\"\n"
	for _, tc := range []struct {
		name, text, want string
	}{
		{"state_dir cannot be created", head(filepath.Join(blocker, "state"), sock) + tail, `:2:1: state_dir ` + filepath.Join(blocker, "state") + `: cannot be created`},
		{"the socket's directory cannot be created", head(state, filepath.Join(blocker, "vipd.sock")) + tail, `:4:1: api.socket ` + filepath.Join(blocker, "vipd.sock") + `: its directory cannot be created`},
		{"socket_group does not exist", head(state, sock) + "socket_group = \"nosuchgroup-vipd\"\n" + tail, `:5:1: api.socket_group "nosuchgroup-vipd" does not exist`},
		{"the VIP's interface does not exist", head(state, sock) + strings.Replace(tail, `"lo"`, `"vtcheck-none"`, 1), `:11:1: vip "apiserver": interface "vtcheck-none" does not exist on this host`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vipd.toml")
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := run([]string{"--check", "--config", path}, &stdout, &stderr)
			if code != 1 {
				t.Errorf("vipd --check exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stderr.String(), path+tc.want) {
				t.Errorf("stderr does not hold %q:\n%s", path+tc.want, stderr.String())
			}
			if strings.Contains(stdout.String(), "configuration OK") {
				t.Errorf("stdout says configuration OK")
			}
		})
	}
}

// TestHelp: vipd --help (and -h) prints the usage to standard output and
// exits 0, its flags spelt with two dashes as every document spells them;
// a bad flag prints it to standard error and exits 2.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{arg}, &stdout, &stderr); code != 0 {
			t.Errorf("vipd %s: exit %d, want 0", arg, code)
		}
		out := stdout.String()
		if !strings.Contains(out, "\n  --check\n") || !strings.Contains(out, "\n  --config PATH\n") {
			t.Errorf("vipd %s: the flags are not listed as --check and --config PATH:\n%s", arg, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") {
				t.Errorf("vipd %s: a flag with one dash: %q", arg, line)
			}
		}
		if stderr.Len() != 0 {
			t.Errorf("vipd %s: standard error %q, want nothing", arg, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--chek"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--check") || stdout.Len() != 0 {
		t.Errorf("vipd --chek: exit %d, stdout %q, stderr %q; want 2 and the usage on standard error", code, stdout.String(), stderr.String())
	}
}

// TestConvertKeepalived: vipd convert-keepalived FILE prints the vipd.toml
// for the kubeadm HA guide's keepalived.conf on standard output, one that
// vipd accepts, and what it could not carry over on standard error.
func TestConvertKeepalived(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"convert-keepalived", "../../internal/keepalived/testdata/kubeadm-ha-guide-unicast.conf"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, stderr.String())
	}
	if _, err := backendconfig.Rules().Parse("converted.toml", stdout.Bytes()); err != nil {
		t.Errorf("vipd refuses the converted file: %v\n%s", err, stdout.String())
	}
	if !strings.Contains(stderr.String(), "vipd convert-keepalived: not carried over: line 18: priority 100") {
		t.Errorf("standard error does not list what was not carried over:\n%s", stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"convert-keepalived"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "vipd convert-keepalived FILE") {
		t.Errorf("without a file: exit %d, stderr %q; want 2 and the usage", code, stderr.String())
	}
}
