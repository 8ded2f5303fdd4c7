package netlab

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseAddrs(t *testing.T) {
	out := `2: eth0    inet 192.0.2.11/24 scope global eth0\       valid_lft forever preferred_lft forever
2: eth0    inet 192.0.2.10/32 scope global eth0\       valid_lft forever preferred_lft forever
2: eth0    inet6 2001:db8::11/64 scope global nodad \       valid_lft forever preferred_lft forever
`
	ps, err := parseAddrs(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"192.0.2.11/24", "192.0.2.10/32", "2001:db8::11/64"}
	if len(ps) != len(want) {
		t.Fatalf("got %v, want %v", ps, want)
	}
	for i, p := range ps {
		if p.String() != want[i] {
			t.Errorf("address %d: got %s, want %s", i, p, want[i])
		}
	}
}

func TestParseNeigh(t *testing.T) {
	for _, tc := range []struct{ name, out, mac, state string }{
		{"reachable", "192.0.2.10 lladdr 02:00:00:00:00:0b REACHABLE\n", "02:00:00:00:00:0b", "REACHABLE"},
		{"failed has no lladdr", "192.0.2.10 FAILED\n", "", "FAILED"},
		{"no entry", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mac, state, err := parseNeigh(tc.out)
			if err != nil || mac != tc.mac || state != tc.state {
				t.Errorf("parseNeigh(%q) = %q, %q, %v; want %q, %q", tc.out, mac, state, err, tc.mac, tc.state)
			}
		})
	}
}

// probes builds a probe series every 20ms from t0: "n1" served by n1, "-"
// failed.
func probes(t0 time.Time, servers ...string) []Probe {
	var ps []Probe
	for i, s := range servers {
		p := Probe{Start: t0.Add(time.Duration(i) * 20 * time.Millisecond), OK: s != "-"}
		if p.OK {
			p.Server = s
		}
		ps = append(ps, p)
	}
	return ps
}

func TestAnalyze(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name    string
		servers []string
		events  []Event
		want    []Gap
	}{
		{
			name:    "make-before-break withdraw: moves without a failure",
			servers: []string{"n1", "n1", "n1", "n2", "n2"},
			events:  []Event{{ms(30), "withdraw"}},
			want:    []Gap{{Probes: 3, Before: "n1", After: "n2", ToNewNode: 30 * time.Millisecond, Recovered: true}},
		},
		{
			name:    "link down: a run of failures, then the new node",
			servers: []string{"n1", "n1", "-", "-", "-", "n3", "n3"},
			events:  []Event{{ms(30), "link down"}},
			want: []Gap{{Probes: 5, Failed: 3, Before: "n1", After: "n3", ToNewNode: 70 * time.Millisecond,
				LongestRun: 3, Outage: 60 * time.Millisecond, Recovered: true}},
		},
		{
			name:    "two events: the longest run is per window",
			servers: []string{"n1", "-", "n2", "n2", "-", "-", "-", "n2", "n2"},
			events:  []Event{{ms(10), "a"}, {ms(70), "b"}},
			want: []Gap{
				{Probes: 3, Failed: 1, Before: "n1", After: "n2", ToNewNode: 30 * time.Millisecond, LongestRun: 1, Outage: 20 * time.Millisecond, Recovered: true},
				{Probes: 5, Failed: 3, Before: "n2", LongestRun: 3, Outage: 60 * time.Millisecond, Recovered: true},
			},
		},
		{
			name:    "never recovers: outage runs to the last probe plus one interval",
			servers: []string{"n1", "-", "-"},
			events:  []Event{{ms(10), "kill"}},
			want:    []Gap{{Probes: 2, Failed: 2, Before: "n1", LongestRun: 2, Outage: 40 * time.Millisecond}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Analyze(probes(t0, tc.servers...), tc.events, 20*time.Millisecond)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d gaps, want %d", len(got), len(tc.want))
			}
			for i := range got {
				tc.want[i].Event = tc.events[i]
				if got[i] != tc.want[i] {
					t.Errorf("gap %d:\n got %+v\nwant %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestParseProbesSortsAndRejectsGarbage(t *testing.T) {
	ps, err := ParseProbes(strings.NewReader("1020 ok n2 1.2ms\n1000 fail - dial tcp: i/o timeout\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].OK || ps[0].Server != "" || ps[0].Detail != "dial tcp: i/o timeout" || !ps[1].OK || ps[1].Server != "n2" {
		t.Errorf("got %+v", ps)
	}
	if _, err := ParseProbes(strings.NewReader("1000 maybe n1\n")); err == nil {
		t.Error("a line that is neither ok nor fail: want an error")
	}
}

func TestVipdConfigNamesPeersAndVIPs(t *testing.T) {
	l := &Lab{}
	for i := 1; i <= 3; i++ {
		l.Nodes = append(l.Nodes, &Host{Name: "n" + string(rune('0'+i)), IP: netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}), Dir: "/d"})
	}
	cfg := l.VipdConfig(l.Nodes[0], VipdOptions{HandoffTimeout: "3s"})
	for _, want := range []string{`node_name = "n1"`, `bind_address = "192.0.2.11"`, `peers = ["192.0.2.12", "192.0.2.13"]`,
		`rejoin_interval = "5s"`, `failure_detection = "fast"`, `handoff_timeout = "3s"`, `address = "192.0.2.10"`, `interface = "eth0"`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %s:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "2001:db8") {
		t.Errorf("config of a lab without IPv6 has an IPv6 VIP:\n%s", cfg)
	}
}

func TestDropRuleset(t *testing.T) {
	for _, tc := range []struct {
		dir     Direction
		in, out bool
	}{{Both, true, true}, {In, true, false}, {Out, false, true}} {
		t.Run(string(tc.dir), func(t *testing.T) {
			rs, err := dropRuleset("cut", tc.dir, MembershipMatches())
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(rs, "hook input"); got != tc.in {
				t.Errorf("input chain: %t, want %t:\n%s", got, tc.in, rs)
			}
			if got := strings.Contains(rs, "hook output"); got != tc.out {
				t.Errorf("output chain: %t, want %t:\n%s", got, tc.out, rs)
			}
			for _, want := range []string{"table inet cut {", "th dport 7946 drop", "th sport 7946 drop", "meta l4proto { tcp, udp }"} {
				if !strings.Contains(rs, want) {
					t.Errorf("ruleset lacks %q:\n%s", want, rs)
				}
			}
			if strings.Count(rs, "{") != strings.Count(rs, "}") {
				t.Errorf("unbalanced braces:\n%s", rs)
			}
		})
	}
	if _, err := dropRuleset("cut", "sideways", MembershipMatches()); err == nil {
		t.Error("unknown direction: want an error")
	}
	if _, err := dropRuleset("cut", Both, nil); err == nil {
		t.Error("no matches (a filter that drops nothing): want an error")
	}
}

func TestLogLines(t *testing.T) {
	log := "time=1 msg=\"member state\" member=n3 state=dead\n\ntime=2 msg=\"member state\" member=n3 state=alive\ntime=3 msg=other state=dead\n"
	got := LogLines(log, `msg="member state"`, "state=dead")
	if want := []string{`time=1 msg="member state" member=n3 state=dead`}; !slices.Equal(got, want) {
		t.Errorf("LogLines = %q, want %q", got, want)
	}
	if got := LogLines(log); len(got) != 3 {
		t.Errorf("LogLines with no words = %q, want the 3 non-empty lines", got)
	}
}

// TestParseVipdEvents: vipctl events --json, oldest first; garbage is an
// error.
func TestParseVipdEvents(t *testing.T) {
	out := `{"time":"2026-01-02T03:04:06Z","kind":"fence","node":"n1","message":"fenced: no majority evidence for 310ms"}
{"time":"2026-01-02T03:04:05Z","kind":"membership","node":"n1","message":"lease expired: gone for the election"}
`
	es, err := ParseVipdEvents(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Kind != "membership" || es[1].Kind != "fence" {
		t.Errorf("ParseVipdEvents = %+v, want the two events oldest first", es)
	}
	if _, err := ParseVipdEvents("not json\n"); err == nil {
		t.Error("garbage: want an error")
	}
}

// TestProcessToolsDir: the tools directory is this process's, and the
// directories of ended processes are removed while a live one's stays.
func TestProcessToolsDir(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	gone := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d", toolsPrefix, ended.Process.Pid))
	live := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d", toolsPrefix, os.Getppid()))
	for _, d := range []string{gone, live} {
		if err := os.MkdirAll(filepath.Join(d, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := ProcessToolsDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d", toolsPrefix, os.Getpid())); dir != want {
		t.Errorf("ProcessToolsDir() = %s, want %s", dir, want)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("the directory of ended process %d is still there (stat: %v)", ended.Process.Pid, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the directory of live process %d was removed: %v", os.Getppid(), err)
	}
}

func TestLogLinesBetween(t *testing.T) {
	log := `time=2026-01-02T03:04:05.100Z level=INFO msg="member state" member=n2 state=dead
time=2026-01-02T03:04:06.000Z level=INFO msg="member gone (lease expired)" member=n1
not a log line with member gone
time=2026-01-02T03:04:09.000Z level=WARN msg="fenced: no majority" evidence_age=310ms
`
	from := time.Date(2026, 1, 2, 3, 4, 5, 500_000_000, time.UTC)
	got := LogLinesBetween(log, from, time.Time{}, "member gone", "state=dead", "fenced")
	if len(got) != 2 || !strings.Contains(got[0], "lease expired") || !strings.Contains(got[1], "fenced") {
		t.Errorf("LogLinesBetween from 05.5 = %q, want the lease and fence lines", got)
	}
	to := time.Date(2026, 1, 2, 3, 4, 7, 0, time.UTC)
	if got := LogLinesBetween(log, time.Time{}, to, "member"); len(got) != 2 {
		t.Errorf("LogLinesBetween up to 07 = %q, want the two member lines", got)
	}
}
