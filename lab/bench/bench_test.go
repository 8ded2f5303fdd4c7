package bench

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/k8slab"
	"github.com/vipd/vipd/lab/netlab"
	"github.com/vipd/vipd/lab/upgrade"
)

func TestSummarize(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var ds []time.Duration
		for _, x := range v {
			ds = append(ds, time.Duration(x)*time.Millisecond)
		}
		return ds
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		want Stats
	}{
		{"no values", nil, Stats{}},
		{"one value", ms(7), Stats{1, 7 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond}},
		{"odd count unsorted", ms(30, 10, 20), Stats{3, 10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}},
		{"even count takes the mean of the middle two", ms(40, 10, 20, 30), Stats{4, 10 * time.Millisecond, 25 * time.Millisecond, 40 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tc.in...)
			if got := Summarize(tc.in); got != tc.want {
				t.Errorf("Summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
			}
			for i := range in {
				if in[i] != tc.in[i] {
					t.Fatalf("Summarize reordered its input: %v", tc.in)
				}
			}
		})
	}
}

func TestSplitTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []holderSample{
		{at(0), 1}, {at(20), 2}, {at(45), 2}, {at(60), 1}, // 40ms before the heal
		{at(100), 2}, {at(130), 1}, // 30ms after the heal at 100
		{at(150), 2}, // last sample counts one interval
	}
	total, after := splitTime(samples, at(100), sampleEvery)
	if want := 40*time.Millisecond + 30*time.Millisecond + sampleEvery; total != want {
		t.Errorf("total = %v, want %v", total, want)
	}
	if want := 30*time.Millisecond + sampleEvery; after != want {
		t.Errorf("after heal = %v, want %v", after, want)
	}
	if total, after := splitTime([]holderSample{{at(0), 1}, {at(20), 0}}, at(10), sampleEvery); total != 0 || after != 0 {
		t.Errorf("one or no holder: got %v, %v, want 0, 0", total, after)
	}
}

func TestParseStatCPU(t *testing.T) {
	// Command name with spaces and parentheses; utime 250, stime 50 ticks.
	stat := "1234 (vi pd (x)) S 1 1234 1234 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0 100 0 0"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3 * time.Second; got != want {
		t.Errorf("parseStatCPU = %v, want %v", got, want)
	}
	if _, err := parseStatCPU("1234 (vipd) S 1"); err == nil {
		t.Error("short stat line: want an error")
	}
}

func TestParseVmRSS(t *testing.T) {
	got, err := parseVmRSS("Name:\tvipd\nVmPeak:\t  99 kB\nVmRSS:\t   23456 kB\nThreads: 9\n")
	if err != nil || got != 23456 {
		t.Errorf("parseVmRSS = %d, %v; want 23456", got, err)
	}
	if _, err := parseVmRSS("Name:\tvipd\n"); err == nil {
		t.Error("no VmRSS line: want an error")
	}
}

func TestParseGoBench(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/vipd/vipd/agent
cpu: AMD EPYC
BenchmarkElect-2         	  812345	      1456 ns/op	     320 B/op	       4 allocs/op
BenchmarkParseConfig-2   	   20000	     61234.5 ns/op
BenchmarkBroken-2   	 x	  1 ns/op
PASS
ok  	github.com/vipd/vipd/agent	3.1s
pkg: github.com/vipd/vipd/conns
BenchmarkEncodeSet/ipv4/conns=20000-2      	    2473	    651838 ns/op	         3.470 B/conn	     69393 B/set	       0 B/op	       0 allocs/op
PASS
`
	got := ParseGoBench(out)
	want := []GoBench{
		{Pkg: "github.com/vipd/vipd/agent", Name: "BenchmarkElect-2", N: 812345, NsPerOp: 1456, BytesPerOp: 320, AllocsPer: 4},
		{Pkg: "github.com/vipd/vipd/agent", Name: "BenchmarkParseConfig-2", N: 20000, NsPerOp: 61234.5, BytesPerOp: -1, AllocsPer: -1},
		{Pkg: ConnsPkg, Name: "BenchmarkEncodeSet/ipv4/conns=20000-2", N: 2473, NsPerOp: 651838, BytesPerOp: 0, AllocsPer: 0, Other: "3.470 B/conn, 69393 B/set"},
	}
	if len(got) != len(want) {
		t.Fatalf("ParseGoBench: got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestCPUModel(t *testing.T) {
	if got := cpuModel("processor\t: 0\nvendor_id\t: X\nmodel name\t: Some CPU @ 2.0GHz\n"); got != "Some CPU @ 2.0GHz" {
		t.Errorf("cpuModel = %q", got)
	}
	if got := cpuModel("processor: 0\n"); got != "unknown" {
		t.Errorf("cpuModel without a model name = %q, want unknown", got)
	}
}

func TestSettled(t *testing.T) {
	vips := manyVIPs(3, false)
	a := func(i int) netip.Addr { return vips[i].Address }
	n2 := &netlab.Host{Name: "n2"}
	for _, tc := range []struct {
		name    string
		pl      map[string][]netip.Addr
		exclude *netlab.Host
		want    bool
	}{
		{"every VIP on one node", map[string][]netip.Addr{"n1": {a(0), a(1)}, "n2": {a(2)}}, nil, true},
		{"a VIP on no node", map[string][]netip.Addr{"n1": {a(0), a(1)}}, nil, false},
		{"a VIP on two nodes", map[string][]netip.Addr{"n1": {a(0), a(1), a(2)}, "n2": {a(2)}}, nil, false},
		{"VIPs still on the node that left", map[string][]netip.Addr{"n1": {a(0), a(1)}, "n2": {a(2)}}, n2, false},
		{"node that left holds nothing", map[string][]netip.Addr{"n1": {a(0), a(1), a(2)}, "n2": nil}, n2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, detail := settled(tc.pl, vips, tc.exclude); got != tc.want {
				t.Errorf("settled = %t (%s), want %t", got, detail, tc.want)
			}
		})
	}
}

func TestKeepalivedConfig(t *testing.T) {
	c := KeepalivedConfig("n2", keepalivedPriority(1))
	for _, want := range []string{"priority 100", "advert_int 1", "interface eth0", "192.0.2.10/32 dev eth0",
		"fall 3", "rise 2", "weight -100", "http://127.0.0.1:6443/readyz", "track_script", "router_id n2"} {
		if !strings.Contains(c, want) {
			t.Errorf("keepalived config lacks %q:\n%s", want, c)
		}
	}
	if p := []int{keepalivedPriority(0), keepalivedPriority(1), keepalivedPriority(2)}; p[0] != 150 || p[1] != 100 || p[2] != 50 {
		t.Errorf("priorities %v, want 150 100 50", p)
	}
	if strings.Count(c, "{") != strings.Count(c, "}") {
		t.Errorf("unbalanced braces:\n%s", c)
	}
}

// sample is a run with two systems, two scenarios, one failed trial.
func sample() *Results {
	d := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	return &Results{
		Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Finished: time.Date(2026, 1, 2, 3, 14, 5, 0, time.UTC), Runs: 2,
		Failover: []Trial{
			{System: "vipd", Scenario: "handoff", Run: 1, From: "n1", To: "n2", Gap: 0, Takeover: d(300)},
			{System: "vipd", Scenario: "handoff", Run: 2, From: "n1", To: "n3", Gap: d(40), Failed: 2, Takeover: d(320), FirstFailure: "read: connection reset by peer"},
			{System: "keepalived", Scenario: "handoff", Run: 1, From: "n1", To: "n2", Gap: d(600), Failed: 30, Takeover: d(610)},
			{System: "vipd", Scenario: "linkdown", Run: 1, From: "n2", To: "n1", Gap: d(1200), Takeover: d(1210), Failed: 60, SplitAfterHeal: d(20)},
			{System: "keepalived", Scenario: "linkdown", Run: 1, Err: "lab not steady"},
			// In place: the VIP stayed on n1 (no takeover), or came back
			// on n2 after 1.5 s.
			{System: "vipd", Scenario: "addrdel", Run: 1, From: "n1", Gap: 0},
			{System: "vipd", Scenario: "addrdel", Run: 2, From: "n1", Gap: d(40), Failed: 2},
			{System: "vipd", Scenario: "ifrecreate", Run: 1, From: "n1", To: "n2", Gap: d(1500), Takeover: d(1500), Failed: 75},
			{System: "keepalived", Scenario: "addrdel", Run: 1, Err: "client not answered again within 20s"},
		},
		Footprint: &Footprint{Idle1: Usage{RSSKiB: 30 * 1024, CPUPercent: 0.4, Window: 10 * time.Second}, Ready: []time.Duration{d(200), d(1200)}},
	}
}

func TestTargets(t *testing.T) {
	got := map[string]Target{}
	r := sample()
	r.Failover = append(r.Failover, Trial{System: "vipd", Scenario: "health", Run: 1, From: "n1", To: "n2",
		Gap: 1200 * time.Millisecond, Takeover: 1210 * time.Millisecond, Failed: 60},
		Trial{System: "vipd", Scenario: "restart", Run: 1, From: "n1", To: "n1"},
		Trial{System: "keepalived", Scenario: "restart", Run: 1, From: "n1", To: "n2", Gap: 40 * time.Millisecond, Failed: 2})
	for _, tg := range r.Targets() {
		got[tg.Goal] = tg
	}
	for goal, want := range map[string]struct{ met, unknown bool }{
		"planned handoff: zero failed probes (vipd)":                                                     {false, false}, // run 2 lost 2 probes
		"agent restart on the owner: zero failed probes, the VIP stays (vipd)":                           {true, false},
		"owner link down: median client gap under 0.5 s (vipd, fast)":                                    {false, false}, // 1.2 s
		"owner cut off at the bridge: median client gap under 0.5 s (vipd, fast)":                        {false, true},
		"owner's health endpoint failing: median client gap under 1.5 s (vipd, default health settings)": {true, false}, // 1.2 s
		"agent crash: new owner answers, median under 0.5 s (vipd, fast)":                                {false, true},
		"split-brain time 0 after partitions heal (vipd)":                                                {false, false}, // 20ms after heal
		"idle RSS under 40 MiB (vipd, 1 VIP)":                                                            {true, false},
		"idle CPU under 1% of a core (vipd, 1 VIP)":                                                      {true, false},
		"READY under 1 s after start, peers reachable":                                                   {false, false}, // max 1.2s
		"address removed on the owner: VIP answers again within 1 s (vipd)":                              {true, false},
		"owner interface deleted and recreated: VIP answers again within 2 s (vipd)":                     {true, false},
	} {
		tg, ok := got[goal]
		if !ok {
			t.Errorf("no target %q", goal)
			continue
		}
		if tg.Met != want.met || tg.Unknown != want.unknown {
			t.Errorf("%s: met=%t unknown=%t (%s), want met=%t unknown=%t", goal, tg.Met, tg.Unknown, tg.Measured, want.met, want.unknown)
		}
	}
}

func TestTargetsInPlaceNotAnsweredAgain(t *testing.T) {
	r := &Results{Failover: []Trial{
		{System: "vipd", Scenario: "addrdel", Run: 1, From: "n1", Gap: 0},
		{System: "vipd", Scenario: "addrdel", Run: 2, Err: "client not answered again within 20s"},
		{System: "vipd", Scenario: "ifrecreate", Run: 1, From: "n1", Gap: 2 * time.Second},
	}}
	for _, tg := range r.Targets() {
		switch tg.Goal {
		case "address removed on the owner: VIP answers again within 1 s (vipd)":
			if tg.Met || tg.Unknown || !strings.Contains(tg.Measured, "1 run(s) not answered again") {
				t.Errorf("addrdel with a run never answered again: %+v, want not met, saying so", tg)
			}
		case "owner interface deleted and recreated: VIP answers again within 2 s (vipd)":
			if tg.Met || tg.Unknown {
				t.Errorf("ifrecreate with a 2 s gap: %+v, want not met", tg)
			}
		}
	}
}

func TestMarkdown(t *testing.T) {
	md := Markdown(sample(), Machine{NProc: 2, CPU: "Test CPU", Kernel: "Linux 6", Go: "go1.26"},
		[]GoBench{{Name: "BenchmarkElect-2", N: 10, NsPerOp: 99, BytesPerOp: 1, AllocsPer: 1},
			{Pkg: ConnsPkg, Name: "BenchmarkDelta/ipv4/conns=20000-2", N: 5, NsPerOp: 700000, Other: "1901 B/delta"}}, "RUNS=2 make bench", "benchmarks.svg")
	reportHas(t, md,
		"| CPU | Test CPU |",
		"RUNS=2 make bench",
		"![client-observed gap and takeover per scenario, min/median/max](benchmarks.svg)",
		"| handoff | vipd | 2 | 0 / 20 / 40 | 300 / 310 / 320 | 1 |",
		"| linkdown | keepalived | 0 (+1 failed) | - |",
		"- keepalived linkdown run 1: lab not steady",
		"| BenchmarkElect-2 | 10 | 99 | 1 | 1 |",
		"## Client connections (conns)",
		"| BenchmarkDelta/ipv4/conns=20000-2 | 5 | 700000 | 0 | 0 | 1901 B/delta |",
		"| 1 VIP, idle | 30.0 | 0.40 |",
		"- run 2 (n1 to n3): 2 probe(s), read: connection reset by peer",
		// No takeover when the VIP stayed on its node.
		"| addrdel | vipd | 2 | 0 / 20 / 40 | - | 1 |",
		"| ifrecreate | vipd | 1 | 1500 / 1500 / 1500 | 1500 / 1500 / 1500 | 75 |",
		"| addrdel | keepalived | 0 (+1 failed) | - |",
	)
	if strings.Contains(md, "Not from the run above") {
		t.Errorf("the report's own scale numbers are said to come from elsewhere")
	}
}

// TestMarkdownScaleSource: scale numbers spliced in from another run say
// where they come from, in their section.
func TestMarkdownScaleSource(t *testing.T) {
	r := sample()
	r.Scale = &Scale{Nodes: 16, VIPs: 100, Start: 7109 * time.Millisecond, Leave: 711 * time.Millisecond, Moved: 12,
		Source: "`PARTS=scale make bench` on vipd a705295"}
	md := Markdown(r, Machine{NProc: 2}, nil, "RUNS=10 make bench", "benchmarks.svg")
	scale, _, _ := strings.Cut(md[strings.Index(md, "## Scale"):], "\n## ")
	for _, want := range []string{
		"Not from the run above: `PARTS=scale make bench` on vipd a705295.",
		"| start of every vipd to settled | 7109 |",
	} {
		if !strings.Contains(scale, want) {
			t.Errorf("scale section lacks %q:\n%s", want, scale)
		}
	}
}

// TestMarkdownKubeClient: the Kubernetes client comparison shows each
// build's size, modules, RSS (min / median / max of the runs) and CPU.
func TestMarkdownKubeClient(t *testing.T) {
	r := sample()
	md := Markdown(r, Machine{NProc: 2}, nil, "make bench", "benchmarks.svg")
	if strings.Contains(md, "## Kubernetes client (node watch)") {
		t.Errorf("a report without the part has its section:\n%s", md)
	}
	r.KubeClient = &KubeClient{Source: "lab/kubeclient.sh (ROUNDS=3 SECS=40) on vipd 1e8733e", Seconds: 40, Variants: []KubeClientVariant{
		{Name: "no Node watch", Bytes: 24166562, Modules: 60, StartRSSKiB: 16500, IdleRSSKiB: []int64{22744, 22528, 22740}, CPUPercent: []float64{0.5, 0.3, 0.4}},
		{Name: "client-go", Bytes: 49553570, Modules: 101, StartRSSKiB: 31280, IdleRSSKiB: []int64{41876, 40792, 40484}, CPUPercent: []float64{0.6}},
	}}
	md = Markdown(r, Machine{NProc: 2}, nil, "make bench", "benchmarks.svg")
	sec, _, _ := strings.Cut(md[strings.Index(md, "## Kubernetes client (node watch)"):], "\n## ")
	for _, want := range []string{
		"Measured by lab/kubeclient.sh (ROUNDS=3 SECS=40) on vipd 1e8733e:",
		"| no Node watch | 23.0 | 60 | 16.1 | 22.0 / 22.2 / 22.2 | 0.40 |",
		"| client-go | 47.3 | 101 | 30.5 | 39.5 / 39.8 / 40.9 | 0.60 |",
	} {
		if !strings.Contains(sec, want) {
			t.Errorf("section lacks %q:\n%s", want, sec)
		}
	}
}

func TestChartIsWellFormedSVG(t *testing.T) {
	svg := Chart(sample())
	d := xml.NewDecoder(strings.NewReader(svg))
	rects := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	// Background; gap panel: 5 bars with completed trials (handoff twice,
	// linkdown, addrdel, ifrecreate), takeover panel: 4 (not addrdel,
	// where the VIP never moved); 2 legend boxes per panel.
	if rects != 14 {
		t.Errorf("chart has %d rects, want 14:\n%s", rects, svg)
	}
	if !strings.Contains(svg, "keepalived handoff: median 600 ms") || !strings.Contains(svg, "keepalived handoff: median 610 ms") {
		t.Errorf("chart lacks the keepalived handoff bar:\n%s", svg)
	}
}

func TestDoFatalEndsRunAndRunsCleanups(t *testing.T) {
	var order []string
	err := Do(t.Context(), "x", nil, func(bt *T) {
		bt.Cleanup(func() { order = append(order, "first") })
		bt.Cleanup(func() { order = append(order, "second") })
		bt.Fatalf("boom %d", 1)
		order = append(order, "after fatal")
	})
	if err == nil || !strings.Contains(err.Error(), "boom 1") {
		t.Errorf("Do error = %v, want one with the Fatalf message", err)
	}
	if strings.Join(order, ",") != "second,first" {
		t.Errorf("ran %v, want the cleanups newest first and nothing after Fatalf", order)
	}
	if err := Do(t.Context(), "ok", nil, func(bt *T) { bt.Logf("fine") }); err != nil {
		t.Errorf("Do without failure = %v", err)
	}
}

func TestBGPReport(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	r := &Results{Runs: 2, BGP: []BGPTrial{
		{Scenario: "partition-all", Run: 1, From: "n1", RouteGone: ms(2600), NewRoute: ms(2600), ClientGap: ms(2580), Lost: 129},
		{Scenario: "partition-all-bfd", Run: 1, From: "n1", RouteGone: ms(300), NewRoute: ms(300), ClientGap: ms(280), Lost: 14},
		{Scenario: "partition-all-bfd", Run: 2, From: "n2", RouteGone: ms(340), NewRoute: ms(340), ClientGap: ms(320), Lost: 16},
		{Scenario: "partition-all-bfd", Run: 3, Err: "lab not steady"},
	}}
	md := Markdown(r, Machine{NProc: 2, BIRD: "BIRD 2.0.12"}, nil, "PARTS=bgp make bench", "benchmarks.svg")
	reportHas(t, md,
		"| `all`: node in use cut off (hold timer) | 1 | 2600 / 2600 / 2600 | 2600 / 2600 / 2600 | 2580 / 2580 / 2580 | 129 |",
		"| `all`: node in use cut off, BFD | 2 (+1 failed) | 300 / 320 / 340 | 300 / 320 / 340 | 280 / 300 / 320 | 15 |",
		"- failed: partition-all-bfd run 3: lab not steady",
		"| BGP cable cut with BFD: median client gap under 0.5 s (announce all, one path at the router) | median 300 ms over 2 runs | yes |",
	)
	if strings.Contains(md, "owner vipd SIGKILL") {
		t.Errorf("report has a row for a scenario without trials:\n%s", md)
	}
}

// TestColdStartAndScaleRuns: the cold-start section and the targets of
// cold start and the scale runs.
func TestColdStartAndScaleRuns(t *testing.T) {
	d := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	r := sample()
	r.ColdStart = []ColdTrial{
		{Nodes: 3, Delay: 0, Run: 1, First: "n1", Answered: d(1500)},
		{Nodes: 3, Delay: 0, Run: 2, First: "n2", Answered: d(1700)},
		{Nodes: 3, Delay: 5 * time.Second, Run: 1, First: "n2", Bootstrap: "n1", Answered: d(1900)},
		{Nodes: 5, Delay: 5 * time.Second, Run: 1, Err: "bootstrap holder: none"},
	}
	r.Scale = &Scale{Nodes: 16, VIPs: 100, Start: d(6800), Starts: []time.Duration{d(6800), d(7100), d(42700)},
		Leaves: []time.Duration{d(700)}, Leave: d(700), Moved: 12}
	r.ColdStartSource = "`PARTS=coldstart make bench` on vipd 0960034"
	md := Markdown(r, Machine{NProc: 2}, nil, "make bench", "benchmarks.svg")
	reportHas(t, md,
		"## Cold start",
		"Not from the run above: `PARTS=coldstart make bench` on vipd 0960034.",
		"| 3 | with the vipds | 2 | 1500 / 1600 / 1700 | 1500, 1700 |",
		"| 3 | 5s after, a bootstrap holder elected | 1 | 1900 / 1900 / 1900 | 1900 |",
		"| 5 | 5s after, a bootstrap holder elected | 0 (+1 failed) | - |",
		"- failed: 5 nodes, ready after 5s, run 1: bootstrap holder: none",
		"3 runs, each in a new lab",
		"| start of every vipd to settled | 6800 / 7100 / 42700 (6800, 7100, 42700) |",
	)
	got := map[string]Target{}
	for _, tg := range r.Targets() {
		got[tg.Goal] = tg
	}
	cold := got["cold start: VIP answered by the first ready apiserver within 2s of it turning ready, every run ([3 5] nodes)"]
	if cold.Met || cold.Unknown || !strings.Contains(cold.Measured, "max 1900 ms over 3 runs, 1 run(s) failed") {
		t.Errorf("cold-start target with a failed run = %+v, want not met, saying so", cold)
	}
	sc := got["16 nodes, 100 VIPs: settled within 10s of starting every vipd, every run"]
	if sc.Met || sc.Unknown || !strings.Contains(sc.Measured, "max 42700 ms over 3 runs") {
		t.Errorf("scale target with a 42.7 s run = %+v, want not met", sc)
	}
	r.ColdStart = r.ColdStart[:3]
	r.Scale.Starts = r.Scale.Starts[:2]
	for _, tg := range r.Targets() {
		if strings.HasPrefix(tg.Goal, "cold start") || strings.HasPrefix(tg.Goal, "16 nodes") {
			if !tg.Met {
				t.Errorf("%s = %+v, want met", tg.Goal, tg)
			}
		}
	}
}

func TestServedFrom(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ps []netlab.Probe
	add := func(ms int, ok bool, server string) {
		ps = append(ps, netlab.Probe{Start: t0.Add(time.Duration(ms) * time.Millisecond), OK: ok, Server: server})
	}
	add(-20, true, "n1") // before since: ignored
	add(0, true, "n2")
	add(20, false, "")
	for i := 0; i < servedRun; i++ {
		add(40+20*i, true, "n1")
	}
	if got := servedFrom(ps, "n1", t0); got != 40*time.Millisecond {
		t.Errorf("servedFrom = %v, want 40ms (the run after the failure)", got)
	}
	if got := servedFrom(ps[:len(ps)-1], "n1", t0); got != 0 {
		t.Errorf("servedFrom with a run one short = %v, want 0", got)
	}
}

// reportHas fails t for each of wants that md does not contain.
func reportHas(t *testing.T, md string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// TestMarkdownScenarioSource: a failover scenario spliced in from another
// run says where it comes from.
func TestMarkdownScenarioSource(t *testing.T) {
	r := sample()
	r.ScenarioSources = map[string]string{"restart": "`SCENARIOS=restart make bench` on vipd 0960034"}
	md := Markdown(r, Machine{NProc: 2}, nil, "make bench", "benchmarks.svg")
	reportHas(t, md, "a restart in place, then the next vipd", "Not from the run above: `SCENARIOS=restart make bench` on vipd 0960034.")
	if strings.Count(md, "Not from the run above") != 1 {
		t.Error("the source note is on more than the restart scenario")
	}
}

// TestRestartTarget: a restart that moved the VIP, or lost a probe, misses
// the restart target.
func TestRestartTarget(t *testing.T) {
	goal := "agent restart on the owner: zero failed probes, the VIP stays (vipd)"
	for _, tt := range []struct {
		name string
		tr   Trial
		met  bool
	}{
		{"stayed, nothing lost", Trial{System: "vipd", Scenario: "restart", From: "n1", To: "n1"}, true},
		{"moved", Trial{System: "vipd", Scenario: "restart", From: "n1", To: "n2"}, false},
		{"a probe lost", Trial{System: "vipd", Scenario: "restart", From: "n1", To: "n1", Failed: 1, Gap: 20 * time.Millisecond}, false},
		{"failed run", Trial{System: "vipd", Scenario: "restart", Err: "lab not steady"}, false},
	} {
		r := &Results{Failover: []Trial{tt.tr}}
		for _, tg := range r.Targets() {
			if tg.Goal == goal && (tg.Met != tt.met || tg.Unknown) {
				t.Errorf("%s: %+v, want met %t", tt.name, tg, tt.met)
			}
		}
	}
}

func TestK8sReport(t *testing.T) {
	s := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	tr := func(agent, sc string, run, failed int, stall time.Duration, moves int, err string) k8slab.Trial {
		return k8slab.Trial{Agent: agent, Scenario: sc, Run: run, From: "n1", To: "n2", Moves: moves, Err: err,
			Clients: k8slab.ClientStats{Watches: 20, Requests: 500, Failed: failed, Stall: stall, Back: stall, Delivering: stall / 2, LongestRequest: s(1000), Relists: 1}}
	}
	r := &Results{K8s: []k8slab.Trial{
		tr("vipd", "handoff", 1, 0, s(200), 1, ""),
		tr("vipd", "handoff", 2, 1, s(29800), 1, ""),
		tr("keepalived", "handoff", 1, 3, s(30000), 2, ""),
		tr("vipd", "partition", 1, 7, s(29000), 1, ""),
		tr("keepalived", "partition", 1, 20, s(31000), 2, ""),
		tr("keepalived", "partition", 2, 0, 0, 0, "lab not steady"),
	}}
	r.K8s[1].Clients.FirstError = "write: connection reset by peer"
	r.K8s[1].Clients.FailedBy = map[string]int{"write": 1}
	md := Markdown(r, Machine{NProc: 2}, nil, "PARTS=k8s make bench", "benchmarks.svg")
	for _, want := range []string{
		"## Kubernetes clients: vipd vs keepalived",
		"| handoff | vipd | 2 | 0 / 0 / 1 | 200 / 15000 / 29800 | 0 / 0 / 0 | 100 / 7500 / 14900 | 200 / 15000 / 29800 | 1000 / 1000 / 1000 | 1 / 1 / 1 | 1 / 1 / 1 |",
		"| partition | keepalived | 1 (+1 failed) | 20 / 20 / 20 |",
		"Runs per scenario and system: 1 to 2 (the runs column).",
		"- handoff run 2 (map[write:1]): write: connection reset by peer",
		"- keepalived partition run 2: lab not steady",
		"| Kubernetes clients, handoff: 0 failed requests, every watch delivering again within 1 s (vipd) | at most 1 failed, longest stall 29800 ms, every watch delivering after at most 14900 ms, 2 runs | no |",
		"| Kubernetes clients, partition: every watch delivering events again within 2 s of the event, median (vipd, [connections] default) | median 14500 ms, max 14500 ms, 1 runs; keepalived median 15500 ms | no |",
		"| Kubernetes clients, linkdown: every watch delivering events again within 2 s of the event, median (vipd, [connections] default) | not measured | not measured |",
		"| Kubernetes clients, partition: median watch stall below keepalived's | vipd 29000 ms, keepalived 31000 ms | yes |",
		"| Kubernetes clients, sigterm: 0 failed requests, every watch delivering again within 1 s (vipd) | not measured | not measured |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "| crash | vipd |") {
		t.Errorf("report has a row for a scenario without trials")
	}
	r.K8sSource = "`PARTS=k8s make bench` on vipd abc1234"
	if md := Markdown(r, Machine{NProc: 2}, nil, "RUNS=10 make bench", "benchmarks.svg"); !strings.Contains(md, "Not from the run above: `PARTS=k8s make bench` on vipd abc1234.") {
		t.Errorf("spliced Kubernetes trials do not say where they come from:\n%s", md)
	}
}

// TestUpgradeReport: the rolling-upgrade section, its target, and both
// when the part did not run.
func TestUpgradeReport(t *testing.T) {
	goal := "rolling upgrade from the previous release and back: 0 failed probes (vipd)"
	targetOf := func(r *Results) Target {
		t.Helper()
		for _, tg := range r.Targets() {
			if tg.Goal == goal {
				return tg
			}
		}
		t.Fatalf("no target %q", goal)
		return Target{}
	}
	r := sample()
	md := Markdown(r, Machine{NProc: 2}, nil, "make bench", "benchmarks.svg")
	if strings.Contains(md, "## Upgrade") {
		t.Errorf("a report without the part has its section:\n%s", md)
	}
	reportHas(t, md, "| "+goal+" | not measured | not measured |")
	if tg := targetOf(r); !tg.Unknown || tg.Met {
		t.Errorf("target without runs = %+v, want not measured", tg)
	}

	s := func(v int) time.Duration { return time.Duration(v) * time.Second }
	run := func(n int, upFailed, downMoves int) UpgradeTrial {
		return UpgradeTrial{Run: n, Result: upgrade.Result{Previous: "d9e3df7", PreviousVersion: "d9e3df7", Version: "abc1234", Passes: []upgrade.Pass{
			{Name: "upgrade", Duration: s(20 + n), Probes: 1000 + n, Failed: upFailed, Resets: upFailed, Samples: 990, TwoHolders: 4, Moves: 2,
				FirstFailure: map[bool]string{true: "12:00:01.000 read: connection reset by peer"}[upFailed > 0]},
			{Name: "restart", InPlace: true, Duration: s(15), Probes: 750, Samples: 740},
			{Name: "downgrade", Duration: s(21), Probes: 1050, Samples: 1040, TwoHolders: 3, Moves: downMoves},
		}}}
	}
	r.Upgrade = []UpgradeTrial{run(1, 0, 2), run(2, 0, 3), run(3, 0, 2)}
	if tg := targetOf(r); !tg.Met || tg.Unknown || tg.Measured != "at most 0 failed probe(s) in a pass (upgrade 0, restart 0, downgrade 0), 3 runs" {
		t.Errorf("target of 3 clean runs = %+v, want met", tg)
	}
	r.Upgrade = append(r.Upgrade, run(4, 1, 2), UpgradeTrial{Run: 5, Err: "go test: exit status 1: restart pass: the VIP moved 1 times"})
	md = Markdown(r, Machine{NProc: 2}, nil, "RUNS=5 PARTS=failover,upgrade make bench", "benchmarks.svg")
	section, _, _ := strings.Cut(md[strings.Index(md, "## Upgrade"):], "\n## ")
	reportHas(t, section,
		"`RUNS=5 PARTS=failover,upgrade make bench` (part `upgrade`",
		"previous release (d9e3df7, built from git)",
		"This tree: abc1234.",
		"- `restart`: this tree restarted in place",
		"| upgrade | 4 (+1 failed) | 1001 / 1002 / 1004 | 0 / 0 / 1 | 0 / 0 / 1 | 2 / 2 / 2 | 990 / 990 / 990 | 4 / 4 / 4 | 0 / 0 / 0 | 21000 / 22500 / 24000 |",
		"| restart | 4 (+1 failed) | 750 / 750 / 750 | 0 / 0 / 0 | 0 / 0 / 0 | 0 / 0 / 0 | 740 / 740 / 740 | 0 / 0 / 0 | 0 / 0 / 0 | 15000 / 15000 / 15000 |",
		"| downgrade | 4 (+1 failed) | 1050 / 1050 / 1050 | 0 / 0 / 0 | 0 / 0 / 0 | 2 / 2 / 3 |",
		"- run 4, upgrade (1 failed): 12:00:01.000 read: connection reset by peer",
		"- run 5: go test: exit status 1: restart pass: the VIP moved 1 times",
	)
	if strings.Contains(section, "Not from the run above") {
		t.Error("the report's own upgrade runs are said to come from elsewhere")
	}
	reportHas(t, md, "| "+goal+" | at most 1 failed probe(s) in a pass (upgrade 1, restart 0, downgrade 0), 4 runs, 1 run(s) failed | no |")

	r.Upgrade = r.Upgrade[:3]
	r.UpgradeSource = "`RUNS=5 PARTS=upgrade make bench` on vipd abc1234"
	md = Markdown(r, Machine{NProc: 2}, nil, "RUNS=10 make bench", "benchmarks.svg")
	reportHas(t, md, "## Upgrade\n\nNot from the run above: `RUNS=5 PARTS=upgrade make bench` on vipd abc1234. ", "First failed probe per pass:\n\n- none\n", "Runs that did not complete:\n\n- none\n")
	if strings.Contains(md, "(part `upgrade`") {
		t.Error("spliced upgrade runs are credited to the report's own command")
	}
}

// TestUpgradeOutput: what the bench takes from the rolling-upgrade test's
// go test output.
func TestUpgradeOutput(t *testing.T) {
	out := `=== RUN   TestRollingUpgrade
    upgrade_test.go:230: previous release: d9e3df7; this tree: abc1234
    upgrade_test.go:330: upgrade pass: 21s, 1000 probes, 0 failed; 990 holder samples (...); the VIP moved 2 times
    upgrade_test.go:330: restart pass: 15s, 750 probes, 0 failed; 740 holder samples (...); the VIP moved 0 times
    upgrade_test.go:351: restart pass: the VIP moved 1 times; restarts in place move nothing
--- FAIL: TestRollingUpgrade (80.12s)
FAIL
exit status 1
FAIL	github.com/vipd/vipd/lab/upgrade	80.2s
`
	if got := passLines(out); len(got) != 4 || !strings.HasPrefix(got[0], "upgrade_test.go:330: upgrade pass: 21s") || !strings.HasPrefix(got[3], "--- FAIL") {
		t.Errorf("passLines = %q", got)
	}
	want := ": upgrade_test.go:330: upgrade pass: 21s, 1000 probes, 0 failed; 990 holder samples (...); the VIP moved 2 times | " +
		"upgrade_test.go:330: restart pass: 15s, 750 probes, 0 failed; 740 holder samples (...); the VIP moved 0 times | " +
		"upgrade_test.go:351: restart pass: the VIP moved 1 times; restarts in place move nothing"
	if got := failureLines(out); got != want {
		t.Errorf("failureLines =\n%q, want\n%q", got, want)
	}
	if got := failureLines("FAIL\n"); got != "" {
		t.Errorf("failureLines of nothing but FAIL = %q", got)
	}
}

// TestMeasuredOn: a report re-rendered elsewhere describes the machine the
// run recorded, not the one rendering it.
func TestMeasuredOn(t *testing.T) {
	rec := Machine{NProc: 2, CPU: "Recorded CPU", Kernel: "Linux 6.0", Go: "go1.26", Keepalived: "Keepalived v2", BIRD: "BIRD 2"}
	r := sample()
	r.Machine = &rec
	if got := r.MeasuredOn(); got != rec {
		t.Errorf("MeasuredOn = %+v, want the recorded %+v", got, rec)
	}
	r.Machine = nil
	if got := r.MeasuredOn(); got.NProc < 1 || got.CPU == "Recorded CPU" {
		t.Errorf("MeasuredOn without a recorded machine = %+v, want this one", got)
	}
}

// TestChartFitsEveryScenario: with trials in every scenario, every bar and
// label lies inside the chart (it widens), and a few scenarios keep the
// usual width.
func TestChartFitsEveryScenario(t *testing.T) {
	width := func(svg string) float64 {
		var w float64
		if _, err := fmt.Sscanf(svg[strings.Index(svg, `width="`):], `width="%g"`, &w); err != nil {
			t.Fatalf("no width in %.200s: %v", svg, err)
		}
		return w
	}
	r := &Results{}
	for _, sc := range Scenarios {
		for _, sys := range Systems {
			r.Failover = append(r.Failover, Trial{System: sys, Scenario: sc, Run: 1, From: "n1", To: "n2", Gap: 300 * time.Millisecond, Takeover: 320 * time.Millisecond})
		}
	}
	svg := Chart(r)
	w := width(svg)
	xs := regexp.MustCompile(`<(?:rect|text) x="([0-9.]+)"`).FindAllStringSubmatch(svg, -1)
	if len(xs) == 0 {
		t.Fatal("no bars or labels")
	}
	for _, m := range xs {
		if x, _ := strconv.ParseFloat(m[1], 64); x >= w {
			t.Errorf("an element at x=%s lies outside the chart's width %g", m[1], w)
		}
	}
	for _, sc := range Scenarios {
		if !strings.Contains(svg, ">"+sc+"</text>") {
			t.Errorf("no label for %s", sc)
		}
	}
	if got := width(Chart(sample())); got != minChartWidth {
		t.Errorf("chart of a few scenarios is %g wide, want %d", got, minChartWidth)
	}
}
