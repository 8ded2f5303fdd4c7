package config

import (
	"strings"
	"testing"
	"time"
)

// l2Config has an L2 VIP and a BGP VIP; %s is the [l2] section.
const l2Config = `[cluster]
bind_address = "192.0.2.11"
%s
[bgp]
asn = 64513
[[bgp.peer]]
address = "192.0.2.1"
asn = 64512
[[vip]]
name = "l2"
address = "192.0.2.10"
interface = "eth0"
[[vip]]
name = "routed"
address = "203.0.113.10"
mode = "bgp"
`

// TestL2RefreshInterval: l2.refresh_interval reaches the announcers of
// the L2 VIPs (VIPConfig.L2), never the quiet one of a BGP VIP; left out it
// is the default, "0s" turns it off.
func TestL2RefreshInterval(t *testing.T) {
	for _, tt := range []struct {
		name, section string
		want          time.Duration
	}{
		{"default", "", DefaultL2RefreshInterval},
		{"set", "[l2]\nrefresh_interval = \"10s\"", 10 * time.Second},
		{"the shortest", "[l2]\nrefresh_interval = \"1s\"", time.Second},
		{"off", "[l2]\nrefresh_interval = \"0s\"", 0},
		{"off, bare 0", "[l2]\nrefresh_interval = \"0\"", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := rules.Parse("l2.toml", []byte(strings.Replace(l2Config, "%s", tt.section, 1)))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := c.L2.RefreshIntervalDuration(); got != tt.want {
				t.Errorf("refresh_interval = %s, want %s", got, tt.want)
			}
			lc := toL2(c.VIPs[0].L2())
			if lc.RefreshInterval != tt.want {
				t.Errorf("the L2 VIP's announcer gets a refresh of %s, want %s", lc.RefreshInterval, tt.want)
			}
			if err := lc.Validate(); err != nil {
				t.Errorf("the l2 package refuses it: %v", err)
			}
			if got := toL2(c.VIPs[1].L2()); !got.Quiet || got.RefreshInterval != 0 {
				t.Errorf("the BGP VIP's announcer: quiet %v refresh %s, want quiet and no refresh", got.Quiet, got.RefreshInterval)
			}
		})
	}
	if DefaultL2RefreshInterval != 3*time.Second {
		t.Errorf("documented default changed: %s", DefaultL2RefreshInterval)
	}
}

// TestL2RefreshIntervalRefused: what the l2 package would refuse is
// refused at the key.
func TestL2RefreshIntervalRefused(t *testing.T) {
	for _, tt := range []struct{ value, want string }{
		{`"500ms"`, `5:1: refresh_interval must be 0 (off) or at least 1s, got 500ms`},
		{`"-3s"`, `5:1: duration must be positive, got "-3s"`},
		{`"often"`, `5:1: invalid duration "often"`},
		{`3`, `5:1: l2.refresh_interval`},
	} {
		t.Run(tt.value, func(t *testing.T) {
			_, err := rules.Parse("bad.toml", []byte(strings.Replace(l2Config, "%s", "\n[l2]\nrefresh_interval = "+tt.value, 1)))
			if err == nil || !strings.Contains(err.Error(), "bad.toml:"+tt.want) {
				t.Fatalf("Parse = %v, want a problem %q", err, tt.want)
			}
		})
	}
}

// TestL2RefreshIntervalKeptOnReload: the announcers are built once per
// interface, so a reload keeps the running refresh_interval (with the
// VIPs' copies) and says it takes a restart.
func TestL2RefreshIntervalKeptOnReload(t *testing.T) {
	old, err := rules.Parse("l2.toml", []byte(strings.Replace(l2Config, "%s", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := rules.Parse("l2.toml", []byte(strings.Replace(l2Config, "%s", "[l2]\nrefresh_interval = \"0s\"", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !c.KeepRestartSettings(old) {
		t.Error("KeepRestartSettings reports no change")
	}
	if got := c.L2.RefreshIntervalDuration(); got != DefaultL2RefreshInterval {
		t.Errorf("refresh_interval after the reload = %s, want the running %s", got, DefaultL2RefreshInterval)
	}
	if got := toL2(c.VIPs[0].L2()).RefreshInterval; got != DefaultL2RefreshInterval {
		t.Errorf("the L2 VIP's announcer after the reload gets %s, want the running %s", got, DefaultL2RefreshInterval)
	}
	same, err := rules.Parse("l2.toml", []byte(strings.Replace(l2Config, "%s", "[l2]\nrefresh_interval = \"3s\"", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if same.KeepRestartSettings(old) {
		t.Error("KeepRestartSettings reports a change for the same value written out")
	}
}
