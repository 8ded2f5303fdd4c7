package membership

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/internal/testkit"
)

// TestMemberlistConfig: memberlist keeps its robust LAN failure detection
// in both modes (the lease does fast detection), gossips every 500ms
// (metadata is pushed, gossip repeats it) with retransmissions left after
// the pushes, and neither compresses (LZW's per-packet table was most of an
// idle node's garbage and saves nothing on our small messages).
func TestMemberlistConfig(t *testing.T) {
	lan := memberlist.DefaultLANConfig()
	for _, tt := range []struct {
		detection string
		probe     time.Duration
		suspicion int
		gossip    time.Duration
	}{
		{"fast", lan.ProbeInterval, lan.SuspicionMult, 500 * time.Millisecond},
		{"lan", lan.ProbeInterval, lan.SuspicionMult, 500 * time.Millisecond},
	} {
		t.Run(tt.detection, func(t *testing.T) {
			src := fmt.Sprintf("node_name = \"cp-1\"\n[cluster]\nbind_address = \"192.0.2.11\"\nfailure_detection = %q\n"+
				"[[vip]]\nname = \"a\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n", tt.detection)
			c, err := config.Parse("m.toml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			mc := memberlistConfig(c)
			if mc.EnableCompression {
				t.Error("compression is on")
			}
			if mc.RetransmitMult < 8 {
				t.Errorf("retransmit mult %d: pushes to 7 members would use up every retransmission", mc.RetransmitMult)
			}
			if mc.ProbeInterval != tt.probe || mc.SuspicionMult != tt.suspicion || mc.GossipInterval != tt.gossip {
				t.Errorf("probe interval %v, suspicion mult %d, gossip %v; want %v, %d, %v", mc.ProbeInterval, mc.SuspicionMult, mc.GossipInterval, tt.probe, tt.suspicion, tt.gossip)
			}
			if mc.Name != "cp-1" || mc.BindAddr != "192.0.2.11" || mc.AdvertiseAddr != "192.0.2.11" {
				t.Errorf("name %q bind %q advertise %q", mc.Name, mc.BindAddr, mc.AdvertiseAddr)
			}
		})
	}
}

// TestSlogWriterSendFailures: memberlist's send failures (a flood while a
// link is down) are logged at WARN, once per kind per sendFailureEvery with
// the count left out; other errors keep their level and are throttled the
// same way; info lines are never dropped.
func TestSlogWriterSendFailures(t *testing.T) {
	var buf bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	now := time.Unix(1000, 0)
	w := newSlogWriter(lg, func() time.Time { return now })
	write := func(line string) {
		if _, err := w.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	gossip := "[ERR] memberlist: Failed to send gossip to 192.0.2.12:7946: write udp 192.0.2.11:7946->192.0.2.12:7946: sendto: network is unreachable"
	ping := "[ERR] memberlist: Failed to send UDP ping: write udp 192.0.2.11:7946->192.0.2.13:7946: sendto: network is unreachable"
	for range 5 {
		write(gossip)
		write(ping)
		write("[ERR] memberlist: Push/Pull with n2 failed: dial tcp: i/o timeout")
		now = now.Add(time.Second)
	}
	now = now.Add(sendFailureEvery)
	write(gossip)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	count := func(sub string) int {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, sub) {
				n++
			}
		}
		return n
	}
	if n := count("Failed to send gossip"); n != 2 {
		t.Errorf("gossip failures logged %d times, want 2 (first, then after %v):\n%s", n, sendFailureEvery, buf.String())
	}
	if n := count("Failed to send UDP ping"); n != 1 {
		t.Errorf("ping failures logged %d times, want 1", n)
	}
	if n := count("suppressed=4"); n != 1 {
		t.Errorf("want one line with suppressed=4 (the gossip failures left out):\n%s", buf.String())
	}
	if n := count("level=WARN msg=\"Failed to send"); n != 3 {
		t.Errorf("send failures at WARN: %d lines, want 3:\n%s", n, buf.String())
	}
	if n := count("level=ERROR msg=\"Push/Pull with n2 failed"); n != 1 {
		t.Errorf("other errors: %d lines at ERROR, want 1 per %v", n, sendFailureEvery)
	}
}

// TestSlogWriterGarbageFlood: a host sending 10,000 garbage packets to the
// membership port (each an error from memberlist, with the sender's address
// in it) produces a bounded number of log lines.
func TestSlogWriterGarbageFlood(t *testing.T) {
	var buf bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	now := time.Unix(1000, 0)
	w := newSlogWriter(lg, func() time.Time { return now })
	kinds := []string{
		"[ERR] memberlist: Failed to decode ping request: msgpack decode error [pos %d]: invalid code from=203.0.113.9:%d",
		"[ERR] memberlist: failed to receive: No installed keys could decrypt the message from=203.0.113.9:%d",
		"[WARN] memberlist: ignoring alive message for 'stranger-%d': node stranger at 203.0.113.9: not in cluster.allowed_networks",
		"[ERR] memberlist: Received invalid msgType (%d) from=203.0.113.9:7946",
		"[ERR] memberlist: discarding packet with unacceptable label \"x%d: y\": from=203.0.113.9:%d",
		"[WARN] memberlist: Got ping for unexpected node stranger-%d from=203.0.113.9:%d",
	}
	for i := range 10000 {
		w.Write(fmt.Appendf(nil, kinds[i%len(kinds)]+"\n", i, i))
		now = now.Add(time.Millisecond) // 10 s in all
	}
	// Text the sender chooses (random node names in labels) makes a new
	// kind each time: the budget still bounds the lines.
	for i := range 10000 {
		w.Write(fmt.Appendf(nil, "[ERR] memberlist: random %x junk: from=203.0.113.9:1\n", i*7919))
		now = now.Add(time.Millisecond)
	}
	if len(w.lastLogged) > maxLogKinds {
		t.Errorf("%d kinds remembered, want at most %d", len(w.lastLogged), maxLogKinds)
	}
	w.Write([]byte("[INFO] memberlist: Suspect n2 has failed, no acks received\n"))
	lines := strings.Count(buf.String(), "\n")
	if want := 4*logBudget + 4; lines > want {
		t.Errorf("20,000 garbage packets in 20 s made %d log lines, want at most %d:\n%s", lines, want, buf.String())
	}
	if !strings.Contains(buf.String(), "Suspect n2 has failed") {
		t.Errorf("an info line was dropped")
	}
}

// namedBroadcast is a memberlist broadcast about one node, like memberlist's
// own alive messages.
type namedBroadcast struct {
	name, msg string
}

func (b namedBroadcast) Invalidates(o memberlist.Broadcast) bool {
	ob, ok := o.(namedBroadcast)
	return ok && ob.name == b.name
}
func (b namedBroadcast) Name() string    { return b.name }
func (b namedBroadcast) Message() []byte { return []byte(b.msg) }
func (b namedBroadcast) Finished()       {}

// TestBroadcastQueueKeepsEveryNode: a node's metadata update must not be
// lost in memberlist's broadcast queue. Upstream memberlist (v0.5.4 and
// v0.7.0) resets the queue's id generator when an update empties the queue
// while replacing the node's previous update, and a later broadcast of the
// same length then overwrites it (hashicorp/memberlist#263): with nodes
// named cp-1, cp-2, cp-3 every alive message has the same length, and a
// node's "I hold the VIP" never left it (TestClusterHealthReturnsEverywhere
// failed 1 run in 8). go.mod replaces memberlist with grafana/memberlist,
// which carries the fix; this test fails if that replacement goes.
func TestBroadcastQueueKeepsEveryNode(t *testing.T) {
	q := &memberlist.TransmitLimitedQueue{NumNodes: func() int { return 3 }, RetransmitMult: 4}
	q.QueueBroadcast(namedBroadcast{"cp-3", "alive cp-3 v1"})
	q.QueueBroadcast(namedBroadcast{"cp-3", "alive cp-3 v2"}) // replaces v1, the queue is empty for a moment
	q.QueueBroadcast(namedBroadcast{"cp-1", "alive cp-1 v1"})
	q.QueueBroadcast(namedBroadcast{"cp-2", "alive cp-2 v1"})
	got := map[string]bool{}
	for _, m := range q.GetBroadcasts(0, 1<<16) {
		got[string(m)] = true
	}
	for _, want := range []string{"alive cp-3 v2", "alive cp-1 v1", "alive cp-2 v1"} {
		if !got[want] {
			t.Errorf("broadcast %q lost from the queue; queued %d, sent %v", want, q.NumQueued(), got)
		}
	}
}

// TestAdmission: the admitted networks follow key_file and
// allowed_networks, and a node is admitted only with a valid name, an
// address in them and metadata that decodes.
func TestAdmission(t *testing.T) {
	parse := func(cluster string) *config.Config {
		t.Helper()
		c, err := config.Parse("a.toml", []byte("node_name = \"cp-1\"\n[cluster]\nbind_address = \"192.0.2.11\"\npeers = [\"192.0.2.12\", \"192.0.2.13:7947\"]\n"+cluster+
			"[[vip]]\nname = \"a\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	key := filepath.Join(t.TempDir(), "k")
	testkit.WriteKeyFile(t, key, testkit.NewKey(t))
	for _, tt := range []struct {
		name    string
		cluster string
		want    []string
	}{
		{"no key: this node and the peers", "", []string{"192.0.2.11/32", "192.0.2.12/32", "192.0.2.13/32"}},
		{"with a key: any address", "key_file = \"" + key + "\"\n", nil},
		{"allowed_networks wins", "key_file = \"" + key + "\"\nallowed_networks = [\"198.51.100.0/24\"]\n", []string{"198.51.100.0/24", "192.0.2.11/32"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range AdmissionNetworks(parse(tt.cluster)) {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("admitted networks %v, want %v", got, tt.want)
			}
		})
	}

	var reasons []string
	m := &Membership[string]{self: "cp-1", codec: testCodec, rejected: func(r string) { reasons = append(reasons, r) }}
	m.SetAllowed(AdmissionNetworks(parse("")))
	good := []byte("ok:")
	node := func(name, ip string, meta []byte) *memberlist.Node {
		return &memberlist.Node{Name: name, Addr: net.ParseIP(ip), Port: 7946, Meta: meta}
	}
	for _, tt := range []struct {
		n      *memberlist.Node
		reason string
	}{
		{node("cp-2", "192.0.2.12", good), ""},
		{node("stranger", "192.0.2.50", good), "network"},
		{node("cp-2\nINFO fake line", "192.0.2.12", good), "name"},
		{node("cp-3", "192.0.2.13", []byte{0, 0}), "metadata"},
	} {
		reasons = nil
		err := m.admit(tt.n)
		if (err == nil) != (tt.reason == "") || (tt.reason != "" && (len(reasons) != 1 || reasons[0] != tt.reason)) {
			t.Errorf("admit %q at %v: %v (reasons %v), want reason %q", tt.n.Name, tt.n.Addr, err, reasons, tt.reason)
		}
	}
	if err := (delegate[string]{m}).NotifyMerge([]*memberlist.Node{node("cp-2", "192.0.2.12", good), node("stranger", "192.0.2.50", good)}); err == nil {
		t.Error("a join bringing in a stranger was not refused")
	}

	// The transport filter drops packets from outside the same networks.
	tr := &transport{allowed: &m.allowed}
	if !tr.admits(netip.MustParseAddr("192.0.2.13")) || tr.admits(netip.MustParseAddr("192.0.2.50")) || tr.admits(netip.MustParseAddr("203.0.113.9")) {
		t.Error("transport filter admits the wrong addresses")
	}
}

// TestMetadataPushed: a metadata change reaches the other members by the
// push alone: with gossip, probes and state exchanges turned off after the
// join, only the publisher's pings can carry it.
func TestMetadataPushed(t *testing.T) {
	ports := []int{testkit.FreePort(t), testkit.FreePort(t)}
	var ms []*Membership[string]
	for i, name := range []string{"cp-1", "cp-2"} {
		src := fmt.Sprintf("node_name = %q\nstate_dir = %q\n[cluster]\nbind_address = \"127.0.0.1\"\nbind_port = %d\npeers = [\"127.0.0.1:%d\"]\n"+
			"[[vip]]\nname = \"a\"\naddress = \"192.0.2.10\"\ninterface = \"eth0\"\n", name, t.TempDir(), ports[i], ports[1-i])
		c, err := config.Parse(name+".toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		quiet := func(mc *memberlist.Config) {
			mc.GossipInterval = time.Hour
			mc.ProbeInterval = time.Hour
			mc.PushPullInterval = time.Hour
		}
		m, err := New(c, Options[string]{Codec: testCodec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Meta: []byte("ok:idle"), Now: time.Now, Rejected: func(string) {}, Tune: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Shutdown() })
		ms = append(ms, m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ms[0].RunPublisher(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if _, err := ms[1].Join([]string{fmt.Sprintf("127.0.0.1:%d", ports[0])}); err != nil {
		t.Fatal(err)
	}
	seen := func(want string) bool {
		for _, n := range ms[1].Members() {
			if n.Name == "cp-1" {
				return n.Meta == want
			}
		}
		return false
	}
	// cp-1 pushes to the members in its table: wait until cp-2 is there
	// (the join's state exchange reaches it a moment after Join returns).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if slices.ContainsFunc(ms[0].Members(), func(n Member[string]) bool { return n.Name == "cp-2" && n.State == Alive }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cp-1 never saw cp-2 join: %+v", ms[0].Members())
		}
	}
	held := "ok:held"
	ms[0].SetMeta([]byte(held))
	deadline := time.Now().Add(10 * time.Second)
	for !seen(held) {
		if time.Now().After(deadline) {
			t.Fatalf("cp-2 never saw cp-1's new metadata: %+v", ms[1].Members())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
