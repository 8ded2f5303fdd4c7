package config

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

const prioBase = "[cluster]\nbind_address = \"192.0.2.11\"\n"

// TestPriorityDefaults: a VIP without priority keys has the default
// priority, no preempt delay and no group.
func TestPriorityDefaults(t *testing.T) {
	c, err := rules.Parse("p.toml", []byte(prioBase+"[[vip]]\nname=\"a\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v := c.VIPs[0]; v.Priority != DefaultPriority || v.PreemptDelayDuration() != 0 || v.Group != "" {
		t.Errorf("defaults: priority %d preempt_delay %s group %q", v.Priority, v.PreemptDelayDuration(), v.Group)
	}
	c, err = rules.Parse("p.toml", []byte(prioBase+"[[vip]]\nname=\"a4\"\naddress=\"192.0.2.10\"\ninterface=\"eth0\"\npriority=150\npreempt=true\npreempt_delay=\"30s\"\ngroup=\"api\"\n"+
		"[[vip]]\nname=\"a6\"\naddress=\"2001:db8::10\"\ninterface=\"eth0\"\npriority=150\npreempt=true\npreempt_delay=\"30s\"\ngroup=\"api\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v := c.VIPs[0]; v.Priority != 150 || v.PreemptDelayDuration() != 30*time.Second {
		t.Errorf("written: priority %d preempt_delay %s", v.Priority, v.PreemptDelayDuration())
	}
	if g := c.Groups()["api"]; len(g) != 2 || g[0] != "a4" || g[1] != "a6" {
		t.Errorf("Groups = %v", c.Groups())
	}
}

// TestPriorityProblems: the priority keys' problems, placed at the key.
func TestPriorityProblems(t *testing.T) {
	vip := func(name, addr, extra string) string {
		return "[[vip]]\nname=\"" + name + "\"\naddress=\"" + addr + "\"\ninterface=\"eth0\"\n" + extra
	}
	many := ""
	for i := range MaxVIPsWithPriority + 1 {
		extra := ""
		if i == 0 {
			extra = "priority=150\n"
		}
		many += vip("v"+strconv.Itoa(i), "198.51.100."+strconv.Itoa(i+1), extra)
	}
	for name, tt := range map[string]struct{ toml, want string }{
		"priority 0":               {vip("a", "192.0.2.10", "priority=0\n"), `7:1: vip "a": priority must be 1-255, got 0`},
		"priority 256":             {vip("a", "192.0.2.10", "priority=256\n"), `7:1: vip "a": priority must be 1-255, got 256`},
		"preempt_delay no preempt": {vip("a", "192.0.2.10", "preempt_delay=\"5s\"\n"), `7:1: vip "a": preempt_delay needs preempt = true`},
		"preempt_delay negative":   {vip("a", "192.0.2.10", "preempt=true\npreempt_delay=\"-1s\"\n"), `8:1: vip "a": preempt_delay must be 0-1h0m0s`},
		"preempt_delay garbage":    {vip("a", "192.0.2.10", "preempt=true\npreempt_delay=\"soon\"\n"), `8:1: invalid duration "soon"`},
		"group preempt differs": {vip("a", "192.0.2.10", "group=\"g\"\npreempt=true\n") + vip("b", "2001:db8::1", "group=\"g\"\n"),
			`9:1: vip "b": group "g" is elected as one: preempt must be the same as vip "a"'s`},
		"group priority differs": {vip("a", "192.0.2.10", "group=\"g\"\n") + vip("b", "2001:db8::1", "group=\"g\"\npriority=120\n"),
			`13:1: vip "b": group "g" is elected as one: priority must be the same as vip "a"'s`},
		"too many VIPs with a priority": {many, `a VIP has a priority other than 100: at most 84 VIPs fit the metadata then, got 85`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := rules.Parse("bad.toml", []byte(prioBase+tt.toml))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Parse error = %v, want *ConfigError", err)
			}
			if !strings.Contains(err.Error(), "bad.toml:"+tt.want) && !strings.Contains(err.Error(), "bad.toml: "+tt.want) {
				t.Errorf("missing %q in:\n%s", tt.want, err)
			}
		})
	}
}
