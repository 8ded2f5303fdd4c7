package bgp

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func validConfig() Config {
	return Config{
		ASN:      65001,
		RouterID: netip.MustParseAddr("192.0.2.1"),
		Peers: []Peer{{
			Address:     netip.MustParseAddr("192.0.2.254"),
			ASN:         65000,
			Communities: []string{"65000:100"},
		}},
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *Config)
		want   []string // substrings, one per expected error, in order
	}{
		{name: "valid config", modify: func(c *Config) {}},
		{name: "ipv6 peer and listening", modify: func(c *Config) {
			c.ListenPort = 179
			c.ListenAddresses = []string{"192.0.2.1", "2001:db8::1"}
			c.Peers = append(c.Peers, Peer{Address: netip.MustParseAddr("2001:db8::fe"), ASN: 65000, HoldTime: 3 * time.Second})
		}},
		{name: "asn zero", modify: func(c *Config) { c.ASN = 0 }, want: []string{"asn: must not be 0"}},
		{name: "router id missing", modify: func(c *Config) { c.RouterID = netip.Addr{} }, want: []string{"router_id: missing"}},
		{name: "router id ipv6", modify: func(c *Config) { c.RouterID = netip.MustParseAddr("2001:db8::1") }, want: []string{"must be an IPv4 address"}},
		{name: "router id unspecified", modify: func(c *Config) { c.RouterID = netip.IPv4Unspecified() }, want: []string{"must not be unspecified"}},
		{name: "listen port out of range", modify: func(c *Config) { c.ListenPort = 70000 }, want: []string{"listen_port 70000"}},
		{name: "listen port below -1", modify: func(c *Config) { c.ListenPort = -2 }, want: []string{"listen_port -2"}},
		{name: "bad listen address", modify: func(c *Config) { c.ListenAddresses = []string{"nope"} }, want: []string{`listen_addresses "nope"`}},
		{name: "hold time under 3s", modify: func(c *Config) { c.Peers[0].HoldTime = 2 * time.Second }, want: []string{"must be at least 3s"}},
		{name: "hold time fractional", modify: func(c *Config) { c.Peers[0].HoldTime = 3500 * time.Millisecond }, want: []string{"whole seconds"}},
		{name: "keepalive not shorter than hold", modify: func(c *Config) {
			c.Peers[0].HoldTime = 9 * time.Second
			c.Peers[0].Keepalive = 9 * time.Second
		}, want: []string{"must be shorter than hold time"}},
		{name: "keepalive versus default hold", modify: func(c *Config) { c.Peers[0].Keepalive = 90 * time.Second }, want: []string{"shorter than hold time 1m30s"}},
		{name: "peer asn zero", modify: func(c *Config) { c.Peers[0].ASN = 0 }, want: []string{"peer 192.0.2.254: asn must not be 0"}},
		{name: "peer address missing", modify: func(c *Config) { c.Peers[0].Address = netip.Addr{} }, want: []string{"peers[0]: address missing"}},
		{name: "peer address with zone", modify: func(c *Config) { c.Peers[0].Address = netip.MustParseAddr("fe80::1%eth0") }, want: []string{"without zone"}},
		{name: "peer listed twice", modify: func(c *Config) { c.Peers = append(c.Peers, c.Peers[0]) }, want: []string{"listed twice"}},
		{name: "community without colon", modify: func(c *Config) { c.Peers[0].Communities = []string{"65000"} }, want: []string{`community "65000": want asn:value`}},
		{name: "community part too large", modify: func(c *Config) { c.Peers[0].Communities = []string{"65536:1"} }, want: []string{"asn part must be 0-65535"}},
		{name: "prefix limit too large", modify: func(c *Config) { c.Peers[0].MaxPrefixes = MaxPrefixesLimit + 1 }, want: []string{"max_prefixes 1000001: must be at most 1000000"}},
		{name: "graceful restart and long-lived", modify: func(c *Config) {
			c.GracefulRestart = GracefulRestart{RestartTime: 5 * time.Second, LongLivedStaleTime: time.Hour}
		}},
		{name: "graceful restart at its limit", modify: func(c *Config) { c.GracefulRestart.RestartTime = MaxRestartTime }},
		{name: "graceful restart over 12 bits", modify: func(c *Config) { c.GracefulRestart.RestartTime = MaxRestartTime + time.Second },
			want: []string{"graceful_restart_time 1h8m16s: must be at most 1h8m15s"}},
		{name: "graceful restart fractional", modify: func(c *Config) { c.GracefulRestart.RestartTime = 2500 * time.Millisecond },
			want: []string{"graceful_restart_time 2.5s: must be whole non-negative seconds"}},
		{name: "graceful restart negative", modify: func(c *Config) { c.GracefulRestart.RestartTime = -time.Second },
			want: []string{"graceful_restart_time -1s: must be whole"}},
		{name: "long-lived without graceful restart", modify: func(c *Config) { c.GracefulRestart.LongLivedStaleTime = time.Minute },
			want: []string{"long_lived_stale_time 1m0s: needs graceful_restart_time"}},
		{name: "long-lived over 24 bits", modify: func(c *Config) {
			c.GracefulRestart = GracefulRestart{RestartTime: time.Second, LongLivedStaleTime: MaxLongLivedStaleTime + time.Second}
		}, want: []string{"long_lived_stale_time 4660h20m16s: must be at most"}},
		{name: "long-lived fractional", modify: func(c *Config) {
			c.GracefulRestart = GracefulRestart{RestartTime: time.Second, LongLivedStaleTime: 1500 * time.Millisecond}
		}, want: []string{"long_lived_stale_time 1.5s: must be whole"}},
		{name: "every problem reported", modify: func(c *Config) {
			c.ASN = 0
			c.RouterID = netip.MustParseAddr("2001:db8::1")
			c.Peers[0].HoldTime = time.Second
			c.Peers[0].Communities = []string{"x:1", "1:y"}
		}, want: []string{"asn", "router_id", "hold_time", "asn part", "value part"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.modify(&c)
			errs := c.Validate()
			if len(errs) != len(tt.want) {
				t.Fatalf("Validate() = %v, want %d errors matching %q", errs, len(tt.want), tt.want)
			}
			for i, e := range errs {
				if !strings.Contains(e.Error(), tt.want[i]) {
					t.Errorf("error %d = %q, want it to contain %q", i, e, tt.want[i])
				}
			}
		})
	}
}

// TestFieldErrors: every problem names its field and the element it is
// about, so vipd's configuration can place it at its key.
func TestFieldErrors(t *testing.T) {
	c := validConfig()
	c.RouterID = netip.Addr{}
	c.Peers = append(c.Peers, Peer{Address: netip.MustParseAddr("192.0.2.253"), ASN: 65000, HoldTime: 10 * time.Second, Keepalive: 10 * time.Second})
	c.VIPs = []netip.Addr{netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("fe80::1")}
	c.GracefulRestart = GracefulRestart{RestartTime: 1500 * time.Millisecond, LongLivedStaleTime: -time.Second}
	type field struct {
		name  string
		index int
	}
	var got []field
	for _, err := range c.Validate() {
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Fatalf("%v is not a *FieldError", err)
		}
		got = append(got, field{fe.Field, fe.Index})
	}
	want := []field{{"router_id", -1}, {"peer.keepalive", 1}, {"graceful_restart_time", -1}, {"long_lived_stale_time", -1}, {"vip", 1}}
	if !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v", got, want)
	}
}

func TestParseCommunity(t *testing.T) {
	tests := []struct {
		in      string
		want    uint32
		wantErr bool
	}{
		{in: "65535:0", want: GracefulShutdown},
		{in: "0:0", want: 0},
		{in: "65000:100", want: 65000<<16 | 100},
		{in: "1:65535", want: 1<<16 | 65535},
		{in: "65536:0", wantErr: true},
		{in: "1:65536", wantErr: true},
		{in: "-1:0", wantErr: true},
		{in: "1:2:3", wantErr: true},
		{in: ":1", wantErr: true},
		{in: "1:", wantErr: true},
		{in: "graceful-shutdown", wantErr: true},
		{in: " 1:2", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseCommunity(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseCommunity(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil {
			if got != tt.want {
				t.Errorf("ParseCommunity(%q) = %#x, want %#x", tt.in, got, tt.want)
			}
			if back := FormatCommunity(got); back != tt.in {
				t.Errorf("FormatCommunity(%#x) = %q, want %q", got, back, tt.in)
			}
		}
	}
}

func TestDefaults(t *testing.T) {
	p := Peer{}
	if got := p.holdTime(); got != DefaultHoldTime {
		t.Errorf("default hold time = %s, want %s", got, DefaultHoldTime)
	}
	if got := p.keepalive(); got != 30*time.Second {
		t.Errorf("default keepalive = %s, want 30s", got)
	}
	p.HoldTime = 10 * time.Second
	if got := p.keepalive(); got != 3*time.Second {
		t.Errorf("keepalive for hold 10s = %s, want 3s (whole seconds)", got)
	}
	if got := (Config{}).listenPort(); got != -1 {
		t.Errorf("default listen port = %d, want -1", got)
	}
}
