package config

import (
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const hooksBase = "[cluster]\nbind_address = \"192.0.2.11\"\n[[vip]]\nname=\"a\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\n"

// TestHooksDefaults: without [hooks] no command runs; with one, the
// timeout defaults to 10s and no capability is kept.
func TestHooksDefaults(t *testing.T) {
	c, err := rules.Parse("h.toml", []byte(hooksBase))
	if err != nil {
		t.Fatal(err)
	}
	if c.Hooks.On() {
		t.Errorf("hooks on without [hooks]: %+v", c.Hooks)
	}
	c, err = rules.Parse("h.toml", []byte(hooksBase+"[hooks]\ncommand = [\"/usr/local/bin/vip-notify\", \"--all\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Hooks.On() || c.Hooks.TimeoutDuration() != DefaultHookTimeout || len(c.Hooks.CapabilityNumbers()) != 0 {
		t.Errorf("hooks %+v: want on, timeout %s, no capability", c.Hooks, DefaultHookTimeout)
	}
	if _, _, ok := c.Hooks.Credential(); ok {
		t.Error("a credential without hooks.user")
	}
	c, err = rules.Parse("h.toml", []byte(hooksBase+"[hooks]\ncommand = [\"/bin/true\"]\ntimeout = \"2s\"\nuser = \"root\"\ncapabilities = [\"CAP_NET_ADMIN\", \"CAP_NET_RAW\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Hooks.CapabilityNumbers(); !slices.Equal(got, []uint{unix.CAP_NET_ADMIN, unix.CAP_NET_RAW}) {
		t.Errorf("capabilities %v, want CAP_NET_ADMIN, CAP_NET_RAW", got)
	}
	if uid, gid, ok := c.Hooks.Credential(); !ok || uid != 0 || gid != 0 {
		t.Errorf("user root: %d %d %v, want 0 0 true", uid, gid, ok)
	}
}

// TestHooksBadConfigs: each mistake in [hooks] is placed at its key.
func TestHooksBadConfigs(t *testing.T) {
	for _, tc := range []struct {
		name, hooks string
		want        []string
	}{
		{"empty program", "command = [\"\"]\n", []string{`8:1: hooks command has an empty program name`}},
		{"timeout too short", "command = [\"/bin/true\"]\ntimeout = \"10ms\"\n", []string{`9:1: `}},
		{"unknown capability, a read-any-file one, one twice", "command = [\"/bin/true\"]\ncapabilities = [\"NET_ADMIN\", \"CAP_DAC_OVERRIDE\", \"CAP_NET_RAW\", \"CAP_NET_RAW\"]\n",
			[]string{`9:1: capabilities[0]: "NET_ADMIN" is not a capability`, `9:1: capabilities[1]: a hook never keeps CAP_DAC_OVERRIDE`, `9:1: capabilities[3]: CAP_NET_RAW is listed twice`}},
		{"no such user", "command = [\"/bin/true\"]\nuser = \"no-such-user-vipd\"\n", []string{`9:1: hooks user "no-such-user-vipd": no such user`}},
		{"user without a command", "user = \"root\"\n", []string{`7:1: hooks.user and hooks.capabilities need hooks.command`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rules.Parse("bad.toml", []byte(hooksBase+"[hooks]\n"+tc.hooks))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), "bad.toml:"+w) {
					t.Errorf("missing %q in:\n%s", w, err)
				}
			}
		})
	}
}
