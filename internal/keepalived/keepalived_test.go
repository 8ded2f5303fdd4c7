package keepalived

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/internal/backendconfig"
)

func convertFile(t *testing.T, path string) (string, []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := Parse(string(b))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	out, notes := Convert(conf)
	return out, notes
}

// hasNote reports whether a note mentions every one of words.
func hasNote(notes []string, words ...string) bool {
	return slices.ContainsFunc(notes, func(n string) bool {
		for _, w := range words {
			if !strings.Contains(n, w) {
				return false
			}
		}
		return true
	})
}

// TestConvertGuideUnicast: the kubeadm HA guide's keepalived.conf on a
// node with unicast peers becomes a vipd.toml vipd accepts, the same VIP
// on the same interface, the peers and this node's address for membership
// and the guide's check script as the VIP's health check with its timing;
// what vipd has no equivalent for is listed, each with what to do instead.
func TestConvertGuideUnicast(t *testing.T) {
	out, notes := convertFile(t, "testdata/kubeadm-ha-guide-unicast.conf")
	c, err := backendconfig.Rules().Parse("converted.toml", []byte(out))
	if err != nil {
		t.Fatalf("vipd refuses the converted file: %v\n%s", err, out)
	}
	if got := c.Cluster.BindAddress; got != "192.0.2.11" {
		t.Errorf("bind_address %q, want unicast_src_ip 192.0.2.11", got)
	}
	if got := strings.Join(c.Cluster.Peers, ","); got != "192.0.2.12,192.0.2.13" {
		t.Errorf("peers %q, want the unicast_peer block", got)
	}
	if len(c.VIPs) != 1 {
		t.Fatalf("%d VIPs, want 1:\n%s", len(c.VIPs), out)
	}
	v := c.VIPs[0]
	if v.Address != "192.0.2.10" || v.Interface != "eth0" || v.Mode != config.ModeL2 {
		t.Errorf("vip %+v, want 192.0.2.10 on eth0, l2", v)
	}
	h := v.Health
	if h == nil || strings.Join(h.Command, " ") != "/etc/keepalived/check_apiserver.sh" || h.Interval != "3s" || h.Rise != 2 || h.Fall != 10 {
		t.Errorf("health %+v, want the check script every 3s, rise 2, fall 10", h)
	}
	for _, want := range [][]string{
		{"priority", "100"}, {"state", "BACKUP"}, {"weight", "-2"}, {"virtual_router_id", "51"},
		{"authentication", "key_file"}, {"notify_master", "[hooks] command"}, {"router_id", "LVS_DEVEL"},
	} {
		if !hasNote(notes, want...) {
			t.Errorf("no note about %v in:\n%s", want, strings.Join(notes, "\n"))
		}
	}
}

// TestConvertGuide: the guide's file as written (multicast VRRP, no
// unicast peers) converts to valid TOML with the VIP and its check; the
// membership addresses keepalived did not need are left for the operator,
// and said so.
func TestConvertGuide(t *testing.T) {
	out, notes := convertFile(t, "testdata/kubeadm-ha-guide.conf")
	var c config.Config
	if _, err := toml.Decode(out, &c); err != nil {
		t.Fatalf("the converted file is not TOML: %v\n%s", err, out)
	}
	if len(c.VIPs) != 1 || c.VIPs[0].Address != "192.0.2.10" || c.VIPs[0].Interface != "eth0" || c.VIPs[0].Health == nil {
		t.Errorf("vips %+v, want 192.0.2.10 on eth0 with a health check:\n%s", c.VIPs, out)
	}
	if c.Cluster.BindAddress != "" {
		t.Errorf("bind_address %q invented", c.Cluster.BindAddress)
	}
	if !hasNote(notes, "cluster.bind_address") || !hasNote(notes, "cluster.peers") || !hasNote(notes, "priority", "101") || !hasNote(notes, "state", "MASTER") {
		t.Errorf("notes do not ask for bind_address and peers or miss priority/state:\n%s", strings.Join(notes, "\n"))
	}
	if _, err := backendconfig.Rules().Parse("converted.toml", []byte(out)); err == nil || !strings.Contains(err.Error(), "cluster.bind_address is required") {
		t.Errorf("vipd on the converted file: %v, want only the missing bind_address", err)
	}
}

// TestParseErrors: what is not a keepalived configuration is refused with
// the line.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"vrrp_instance VI_1 {\n  interface eth0\n", "line 1: vrrp_instance VI_1: no closing }"},
		{"}\n", "line 1: } without {"},
		{"vrrp_instance VI_1 {\n  script \"unterminated\n}\n", "line 2: unterminated quote"},
	} {
		if _, err := Parse(tc.text); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want %q", tc.text, err, tc.want)
		}
	}
}

// runHook runs the converted [hooks] command as vipd would for a VIP's new
// state, with the script paths in it replaced by a recorder that appends
// its arguments to a file, and returns what it recorded.
func runHook(t *testing.T, argv []string, scripts []string, vipName, state string) string {
	t.Helper()
	dir := t.TempDir()
	rec := filepath.Join(dir, "rec.sh")
	log := filepath.Join(dir, "log")
	if err := os.WriteFile(rec, []byte("#!/bin/sh\necho \"$*\" >> "+log+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	argv = slices.Clone(argv)
	for _, s := range scripts {
		argv[len(argv)-1] = strings.ReplaceAll(argv[len(argv)-1], s, rec)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "VIPD_VIP=" + vipName, "VIPD_NEW_STATE=" + state}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%q: %v: %s", argv, err, out)
	}
	b, _ := os.ReadFile(log)
	return strings.TrimSpace(string(b))
}

// TestConvertNotifyToHooks: the guide's notify_master becomes a [hooks]
// command that runs the script, with its argument, when the VIP becomes
// master and at no other state; a generic notify script runs at every
// state with keepalived's arguments (after the state's own script);
// notify_stop is noted as not carried over.
func TestConvertNotifyToHooks(t *testing.T) {
	out, _ := convertFile(t, "testdata/kubeadm-ha-guide-unicast.conf")
	c, err := backendconfig.Rules().Parse("converted.toml", []byte(out))
	if err != nil {
		t.Fatalf("vipd refuses the converted file: %v\n%s", err, out)
	}
	if !c.Hooks.On() {
		t.Fatalf("no [hooks] command:\n%s", out)
	}
	scripts := []string{"/etc/keepalived/notify.sh"}
	if got := runHook(t, c.Hooks.Command, scripts, "apiserver", "master"); got != "master" {
		t.Errorf("at master the hook ran %q, want notify.sh master", got)
	}
	for _, st := range []string{"backup", "fault"} {
		if got := runHook(t, c.Hooks.Command, scripts, "apiserver", st); got != "" {
			t.Errorf("at %s the hook ran %q, want nothing", st, got)
		}
	}

	conf, err := Parse(`vrrp_instance VI_1 {
    interface eth0
    notify "/usr/local/bin/keepalived-notify"
    notify_fault "/usr/local/bin/page oncall"
    notify_stop /usr/local/bin/stopped
    priority 150
    virtual_ipaddress {
        192.0.2.10
    }
}`)
	if err != nil {
		t.Fatal(err)
	}
	out, notes := Convert(conf)
	out = strings.Replace(out, "# bind_address = \"\"", "bind_address = \"192.0.2.11\"", 1)
	c, err = backendconfig.Rules().Parse("converted.toml", []byte(out))
	if err != nil {
		t.Fatalf("vipd refuses the converted file: %v\n%s", err, out)
	}
	scripts = []string{"/usr/local/bin/keepalived-notify", "/usr/local/bin/page"}
	for st, want := range map[string]string{
		"master": "INSTANCE VI_1 MASTER 150",
		"backup": "INSTANCE VI_1 BACKUP 150",
		"fault":  "oncall\nINSTANCE VI_1 FAULT 150",
	} {
		if got := runHook(t, c.Hooks.Command, scripts, "apiserver", st); got != want {
			t.Errorf("at %s the hook ran %q, want %q", st, got, want)
		}
	}
	if !hasNote(notes, "notify_stop", "not carried over") {
		t.Errorf("no note about notify_stop in:\n%s", strings.Join(notes, "\n"))
	}
}

// TestConvertPriorities: keepalived's priority, its default preemption
// and preempt_delay (seconds) are carried over to vip.priority, preempt
// and preempt_delay; nopreempt gives vipd's default and drops the delay
// (keepalived ignores it then); an instance with an IPv4 and an IPv6
// address becomes two VIPs of one group, so they move together.
func TestConvertPriorities(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		preempt     bool
		delay       time.Duration
		note        []string
	}{
		{"preempting, with a delay", "    preempt_delay 30\n", true, 30 * time.Second, []string{"preempt_delay 30", "30s"}},
		{"nopreempt", "    nopreempt\n    preempt_delay 30\n", false, 0, []string{"preempt_delay 30", "ignored with nopreempt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := Parse("vrrp_instance VI_1 {\n    state BACKUP\n    interface eth0\n    virtual_router_id 51\n    priority 150\n" + tc.extra +
				"    unicast_src_ip 192.0.2.11\n    unicast_peer {\n        192.0.2.12\n    }\n" +
				"    virtual_ipaddress {\n        192.0.2.10\n        2001:db8::10\n    }\n}\n")
			if err != nil {
				t.Fatal(err)
			}
			out, notes := Convert(conf)
			c, err := backendconfig.Rules().Parse("converted.toml", []byte(out))
			if err != nil {
				t.Fatalf("vipd refuses the converted file: %v\n%s", err, out)
			}
			if len(c.VIPs) != 2 {
				t.Fatalf("%d VIPs, want 2:\n%s", len(c.VIPs), out)
			}
			for _, v := range c.VIPs {
				if v.Priority != 150 || v.Preempt != tc.preempt || v.PreemptDelayDuration() != tc.delay || v.Group != "VI_1" {
					t.Errorf("vip %s: priority %d preempt %v preempt_delay %s group %q; want 150 %v %s VI_1\n%s",
						v.Name, v.Priority, v.Preempt, v.PreemptDelayDuration(), v.Group, tc.preempt, tc.delay, out)
				}
			}
			if !hasNote(notes, tc.note...) || !hasNote(notes, "priority 150", "vip.priority") {
				t.Errorf("notes miss %v or the priority:\n%s", tc.note, strings.Join(notes, "\n"))
			}
		})
	}
}
