package converge

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

const (
	// strangers is how many vipd processes the attacker runs, and
	// strangerPort the first of their bind ports.
	strangers    = 3
	strangerPort = 7950
	// strangerLife is how long they run before they are killed (the
	// attack as found: wait 4 s, kill).
	strangerLife = 4 * time.Second
	// afterKill is how long the real nodes are still watched after the
	// strangers vanished: a node that had counted them would report them
	// dead, and lose quorum, within about a second (failure_detection
	// "fast").
	afterKill = 3 * time.Second

	// floodDatagrams random UDP datagrams and floodConns TCP connections of
	// floodBytes random bytes each are sent to the owner's membership port.
	floodDatagrams = 10000
	floodConns     = 50
	floodBytes     = 64 << 10
	// floodLabelled of the datagrams and floodLabelledConns of the
	// connections start with a memberlist label header (type 244, a length,
	// that many random bytes) and go on with random bytes: memberlist
	// names the label it refuses in its error, so each carries a message
	// of its own; one random datagram in 256 starts so by chance.
	floodLabelled      = 500
	floodLabelledConns = 10
	// floodPings TCP connections carry a well-formed memberlist ping
	// (message type 0, a msgpack map) for a random node name: memberlist
	// names the node in its warning.
	floodPings = 20
	// maxFloodLines bounds the owner's log lines during the flood and the
	// 2 s after it: memberlist warnings and errors are logged once per kind
	// per 10 s (a few dozen kinds at most), where one line per datagram
	// would be 10,000.
	maxFloodLines = 40
	// membershipPort is cluster.bind_port of the real nodes.
	membershipPort = 7946
)

// TestTrustBoundaries attacks a 3-node cluster from the client namespace,
// a host that is not among the nodes' configured peers, first without
// cluster.key_file on the real nodes (admission by address), then with it
// (the attacker has no key):
//
//   - strangers: three vipd processes with their own names and ports and
//     peers = ["<the owner>:7946"] run for 4 s and are killed. Throughout and
//     for 3 s after, every real node keeps quorum with 3 of 3 known and
//     alive, lists no stranger, and exactly one node holds the VIP;
//     afterwards no peers.json holds a stranger.
//   - flood: 10,000 datagrams of random bytes and 50 TCP connections of
//     64 KiB of random bytes at the owner's membership port, 500 of the
//     datagrams and 10 of the connections behind a random memberlist label
//     header, and 20 TCP pings for random node names. The owner logs a bounded number of lines (log_level info),
//     the VIP stays on one node and the cluster stays formed with quorum.
//   - restart: the owner restarts (SIGTERM, start); the VIP stays held
//     (handed off, never on no node) and every node has quorum with 3
//     known afterwards: nothing of the strangers was kept.
func TestTrustBoundaries(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		name := "without key_file"
		if keyed {
			name = "with key_file"
		}
		t.Run(name, func(t *testing.T) { trustBoundaries(t, keyed) })
	}
}

func trustBoundaries(t *testing.T, keyed bool) {
	o := netlab.VipdOptions{}
	o.LogLevel = "info"
	var edits []string
	edits = append(edits, withMetrics...)
	if keyed {
		edits = append(edits, `(?m)^(\[cluster\])$`, "$1\nkey_file = \"KEYFILE\"")
	}
	l := netlab.New(t, netlab.Options{})
	key := filepath.Join(l.Dir, "cluster.key")
	writeKey(t, key)
	for _, n := range l.Nodes {
		cfg := l.EditedVipdConfig(t, n, o, edits...)
		l.StartVipdConfig(n, strings.ReplaceAll(cfg, "KEYFILE", key))
	}
	vip := l.DefaultVIPs()[0]
	owner, err := l.WaitSteady(vip, l.Settle)
	if err != nil {
		t.Fatal(err)
	}
	attacker := l.Client
	rec := l.RecordHolders(vip.Address, sampleEvery, 2*time.Minute)
	defer rec.Stop()
	real := map[string]bool{}
	for _, n := range l.Nodes {
		real[n.Name] = true
	}

	ok := t.Run("strangers join and vanish", func(t *testing.T) {
		rejected := metricOf(t, l, owner, "vipd_membership_rejected_total")
		ownerLog := len(owner.MustVipdLog(t))
		start := time.Now()
		var procs []*netlab.Proc
		for i := 1; i <= strangers; i++ {
			procs = append(procs, startStranger(t, l, attacker, i, owner))
		}
		w := watchCluster(t, l, real, strangerLife)
		for _, p := range procs {
			if !p.Running() {
				b, _ := os.ReadFile(p.Log)
				t.Fatalf("%s exited before it was killed (%v): the attack did not run:\n%s", p.Name, p.ExitErr(), b)
			}
			p.Kill()
		}
		killed := time.Now()
		w2 := watchCluster(t, l, real, afterKill)
		samples := rec.Samples().Between(start, time.Time{})
		t.Logf("%d strangers ran %v from %s (peers = [%s:%d]), watched %v after they were killed: %s; %s; holders %s",
			strangers, killed.Sub(start).Round(time.Millisecond), attacker.IP, owner.IP, membershipPort, afterKill, w, w2, samples.Summary())
		for _, v := range append(w.violations, w2.violations...) {
			t.Error(v)
		}
		if n := len(samples) - samples.Count(1); n > 0 || len(samples) == 0 {
			t.Errorf("%d of %d samples without exactly one holder: %v", n, len(samples), samples.Transitions())
		}
		if h, err := l.OneHolder(vip); err != nil || h != owner.Name {
			t.Errorf("after the strangers: holder %q (%v), want %s to keep it", h, err, owner.Name)
		}
		for _, n := range l.Nodes {
			ps, err := n.PeerCache()
			if err != nil {
				t.Errorf("peers.json of %s: %v", n.Name, err)
				continue
			}
			for _, p := range ps {
				if !real[p.Name] || !strings.HasPrefix(p.Address, l.Node(p.Name).IP.String()+":") {
					t.Errorf("peers.json of %s holds a stranger: %+v (all: %+v)", n.Name, p, ps)
				}
			}
		}
		// The attack reached the owner (else the checks above prove
		// nothing): without a key its admission refused the strangers;
		// with one, their unencrypted traffic was refused and logged.
		now := metricOf(t, l, owner, "vipd_membership_rejected_total")
		mentions := netlab.LogLines(owner.MustVipdLog(t)[ownerLog:], attacker.IP.String())
		t.Logf("owner %s: vipd_membership_rejected_total %v -> %v; %d log lines mention %s, e.g. %q",
			owner.Name, rejected, now, len(mentions), attacker.IP, first(mentions))
		if !keyed && now <= rejected {
			t.Errorf("without key_file: vipd_membership_rejected_total on %s stayed %v: the strangers never reached admission", owner.Name, now)
		}
		if keyed && len(mentions) == 0 {
			t.Errorf("with key_file: %s logged nothing about %s: the strangers never reached it", owner.Name, attacker.IP)
		}
	})
	if !ok {
		t.FailNow()
	}

	t.Run("garbage flood", func(t *testing.T) {
		logs := map[string]int{}
		for _, n := range l.Nodes {
			logs[n.Name] = len(n.MustVipdLog(t))
		}
		target := netip.AddrPortFrom(owner.IP, membershipPort)
		seed := uint64(time.Now().UnixNano())
		start := time.Now()
		fs, err := flood(l, attacker, target, seed)
		if err != nil {
			t.Fatalf("flood: %v", err)
		}
		sent := time.Now()
		w := watchCluster(t, l, real, 2*time.Second)
		for _, v := range w.violations {
			t.Error(v)
		}
		samples := rec.Samples().Between(start, time.Time{})
		added := netlab.LogLines(owner.MustVipdLog(t)[logs[owner.Name]:], "level=")
		t.Logf("flood from %s to %s (seed %d) in %v: %s; owner %s logged %d lines during it and the 2s after (bound %d), by message: %s; %s; holders %s",
			attacker.IP, target, seed, sent.Sub(start).Round(time.Millisecond), fs, owner.Name, len(added), maxFloodLines, byMessage(added), w, samples.Summary())
		for _, n := range l.Others(owner) {
			t.Logf("%s (not targeted) logged %d lines", n.Name, len(netlab.LogLines(n.MustVipdLog(t)[logs[n.Name]:], "level=")))
		}
		if len(added) > maxFloodLines {
			t.Errorf("owner %s logged %d lines for the flood, want at most %d; first: %s", owner.Name, len(added), maxFloodLines, strings.Join(added[:min(len(added), 10)], "\n"))
		}
		if fs.datagrams < floodDatagrams*9/10 || fs.conns < (floodConns+floodPings)/2 {
			t.Errorf("the flood did not go out: %s", fs)
		}
		if n := len(samples) - samples.Count(1); n > 0 || len(samples) == 0 {
			t.Errorf("%d of %d samples without exactly one holder: %v", n, len(samples), samples.Transitions())
		}
		if h, err := l.OneHolder(vip); err != nil || h != owner.Name {
			t.Errorf("after the flood: holder %q (%v), want %s to keep it", h, err, owner.Name)
		}
	})

	t.Run("owner restart keeps the VIP", func(t *testing.T) {
		start := time.Now()
		l.StopCleanly(t, owner, l.StopTimeout)
		cfg, err := os.ReadFile(l.Vipd(owner).Config)
		if err != nil {
			t.Fatal(err)
		}
		l.StartVipdConfig(owner, string(cfg))
		if err := l.WaitAlive(owner, l.Nodes, l.Settle); err != nil {
			t.Fatal(err)
		}
		holder, err := l.WaitOneHolder(vip, l.Settle)
		if err != nil {
			t.Fatalf("after the restart of %s: %v", owner.Name, err)
		}
		back := time.Since(start)
		time.Sleep(time.Second)
		w := watchCluster(t, l, real, time.Second)
		for _, v := range w.violations {
			t.Error(v)
		}
		samples := rec.Samples().Between(start, time.Time{})
		t.Logf("restart of %s: one holder (%s) and every node alive %v after SIGTERM; %s; holders %s",
			owner.Name, holder, back.Round(time.Millisecond), w, samples.Summary())
		if n := samples.Count(0); n > 0 {
			t.Errorf("%d samples with no holder during the restart of %s: %v", n, owner.Name, samples.Transitions())
		}
	})
}

// writeKey writes a new random 32-byte membership key (mode 0600) to path.
func writeKey(t *testing.T, path string) {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startStranger starts the i-th stranger vipd on h (not a configured peer
// of any real node, no key): name x<i>, bind port strangerPort+i-1, peers =
// [target:7946], its own state, socket and VIP (192.0.2.20<i> on h, so it
// never claims the real VIP), rejoin every second, debug log.
func startStranger(t *testing.T, l *netlab.Lab, h *netlab.Host, i int, target *netlab.Host) *netlab.Proc {
	t.Helper()
	name := fmt.Sprintf("x%d", i)
	dir := filepath.Join(h.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`node_name = %q
state_dir = %q
log_level = "debug"

[api]
socket = %q

[cluster]
bind_address = %q
bind_port = %d
peers = ["%s:%d"]
rejoin_interval = "1s"
failure_detection = "fast"

[[vip]]
name = "stranger"
address = "192.0.2.%d"
mode = "l2"
interface = %q
`, name, filepath.Join(dir, "state"), filepath.Join(dir, "vipd.sock"), h.IP, strangerPort+i-1, target.IP, membershipPort, 200+i, netlab.Iface)
	path := filepath.Join(dir, "vipd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := l.Start(h, "stranger "+name, filepath.Join(dir, "vipd.log"), nil, l.Tools.Vipd, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// clusterWatch is what watchCluster saw.
type clusterWatch struct {
	polls      int
	violations []string
	over       time.Duration
}

func (w clusterWatch) String() string {
	return fmt.Sprintf("%d status polls of every node over %v, %d violations", w.polls, w.over.Round(time.Millisecond), len(w.violations))
}

// watchCluster polls every real node's status for d and records each time
// one lacks quorum, does not count exactly the real nodes as known and
// alive, or lists a member that is not one of them (the first violation
// per node and kind).
func watchCluster(t *testing.T, l *netlab.Lab, real map[string]bool, d time.Duration) clusterWatch {
	t.Helper()
	w := clusterWatch{}
	seen := map[string]bool{}
	add := func(key, msg string) {
		if !seen[key] {
			seen[key] = true
			w.violations = append(w.violations, msg)
		}
	}
	start := time.Now()
	for time.Since(start) < d {
		for _, n := range l.Nodes {
			st, err := l.Status(n)
			if err != nil {
				add(n.Name+"err", fmt.Sprintf("%s: %v", n.Name, err))
				continue
			}
			at := time.Since(start).Round(time.Millisecond)
			if !st.Quorum || int(st.KnownMembers) != len(real) || int(st.AliveMembers) != len(real) {
				add(n.Name+"quorum", fmt.Sprintf("%s at +%v: quorum=%t known=%d alive=%d, want quorum with %d of %d", n.Name, at, st.Quorum, st.KnownMembers, st.AliveMembers, len(real), len(real)))
			}
			for _, m := range st.Members {
				if !real[m.Name] {
					add(n.Name+"member"+m.Name, fmt.Sprintf("%s at +%v lists stranger %s (%s, %s)", n.Name, at, m.Name, m.Address, m.State))
				}
			}
		}
		w.polls++
		time.Sleep(100 * time.Millisecond)
	}
	w.over = time.Since(start)
	return w
}

// floodStats is what flood sent.
type floodStats struct {
	datagrams, datagramErrs int
	conns, connErrs         int
	bytes                   int64
}

func (f floodStats) String() string {
	return fmt.Sprintf("%d datagrams (%d send errors), %d TCP connections (%d failed), %d bytes", f.datagrams, f.datagramErrs, f.conns, f.connErrs, f.bytes)
}

// flood sends floodDatagrams UDP datagrams of 1 to 1400 random bytes (in
// bursts of 100 every 20 ms) and floodConns TCP connections writing
// floodBytes random bytes each to target, from h's namespace, with random
// bytes from seed; every floodDatagrams/floodLabelled-th datagram and
// every floodConns/floodLabelledConns-th connection starts with a label
// header.
func flood(l *netlab.Lab, h *netlab.Host, target netip.AddrPort, seed uint64) (floodStats, error) {
	var fs floodStats
	rnd := mrand.New(mrand.NewPCG(seed, seed>>1))
	garbage := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	// labelled puts a memberlist label header of 1 to 60 random bytes in
	// front of b.
	labelled := func(b []byte) []byte {
		n := 1 + rnd.IntN(60)
		return append(append([]byte{244, byte(n)}, garbage(n)...), b...)
	}
	conns := 0
	err := l.InNamespace(h, func() error {
		u, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(target))
		if err != nil {
			return fmt.Errorf("udp socket: %w", err)
		}
		defer u.Close()
		for i := 0; i < floodDatagrams; i++ {
			b := garbage(1 + rnd.IntN(1400))
			if i%(floodDatagrams/floodLabelled) == 0 {
				b = labelled(b[:min(len(b), 1000)])
			}
			if _, err := u.Write(b); err != nil {
				fs.datagramErrs++
			} else {
				fs.datagrams++
				fs.bytes += int64(len(b))
			}
			if i%100 == 99 {
				time.Sleep(20 * time.Millisecond)
			}
			if i%(floodDatagrams/floodConns) == 0 {
				b := garbage(floodBytes)
				if conns%(floodConns/floodLabelledConns) == 0 {
					b = labelled(b)
				}
				conns++
				n, err := garbageConn(target, b)
				fs.bytes += int64(n)
				if err != nil {
					fs.connErrs++
				} else {
					fs.conns++
				}
			}
		}
		for i := 0; i < floodPings; i++ {
			n, err := garbageConn(target, pingFor(garbageName(rnd)))
			fs.bytes += int64(n)
			if err != nil {
				fs.connErrs++
			} else {
				fs.conns++
			}
		}
		return nil
	})
	return fs, err
}

// pingFor returns a memberlist stream ping (message type 0 and the msgpack
// map {"SeqNo": 1, "Node": node}) addressed to node (at most 31 bytes).
func pingFor(node string) []byte {
	b := []byte{0, 0x82, 0xa5}
	b = append(b, "SeqNo"...)
	b = append(b, 0x01, 0xa4)
	b = append(b, "Node"...)
	b = append(b, 0xa0|byte(len(node)))
	return append(b, node...)
}

// garbageName returns a random name of 12 lowercase letters.
func garbageName(rnd *mrand.Rand) string {
	b := make([]byte, 12)
	for i := range b {
		b[i] = 'a' + byte(rnd.IntN(26))
	}
	return string(b)
}

// garbageConn connects to target, writes b and closes; it returns how many
// bytes went out. The peer may reset the connection before all of b is
// written: that still counts as a connection made.
func garbageConn(target netip.AddrPort, b []byte) (int, error) {
	c, err := net.DialTimeout("tcp", target.String(), time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	n, _ := c.Write(b)
	return n, nil
}

// quotedText and unexpectedNode match what an attacker chooses in a
// memberlist message (a label, a node name), for byMessage.
var (
	quotedText     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	unexpectedNode = regexp.MustCompile(`unexpected node \S+`)
)

// byMessage counts log lines by their msg field, with what varies (the
// peer, the detail after the first colon, quoted text, node names) taken
// out, most frequent first: `534x "discarding packet with unacceptable
// label "…""; 1x ...`.
func byMessage(ls []string) string {
	counts := map[string]int{}
	for _, line := range ls {
		msg := line
		if i := strings.Index(line, "msg="); i >= 0 {
			msg = line[i+4:]
			if q, err := strconv.QuotedPrefix(msg); err == nil {
				msg, _ = strconv.Unquote(q)
			} else if j := strings.IndexByte(msg, ' '); j >= 0 {
				msg = msg[:j]
			}
		}
		msg, _, _ = strings.Cut(msg, " from=")
		msg = quotedText.ReplaceAllString(msg, `"…"`)
		msg = unexpectedNode.ReplaceAllString(msg, "unexpected node …")
		msg, _, _ = strings.Cut(msg, ": ")
		counts[strings.TrimSuffix(msg, ":")]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return counts[keys[i]] > counts[keys[j]] || counts[keys[i]] == counts[keys[j]] && keys[i] < keys[j]
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%dx %q", counts[k], k))
	}
	return strings.Join(parts, "; ")
}

// first returns the first of ls, or "".
func first(ls []string) string {
	if len(ls) == 0 {
		return ""
	}
	return strings.TrimSpace(ls[0])
}
