package agent

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestMemberlistConfig: memberlist keeps its robust LAN failure detection
// in both modes (the lease does fast detection), "fast" gossips metadata
// every 100ms, and neither compresses (LZW's per-packet table was most of an
// idle node's garbage and saves nothing on our small messages).
func TestMemberlistConfig(t *testing.T) {
	lan := memberlist.DefaultLANConfig()
	for _, tt := range []struct {
		detection string
		probe     time.Duration
		suspicion int
		gossip    time.Duration
	}{
		{"fast", lan.ProbeInterval, lan.SuspicionMult, 100 * time.Millisecond},
		{"lan", lan.ProbeInterval, lan.SuspicionMult, lan.GossipInterval},
	} {
		t.Run(tt.detection, func(t *testing.T) {
			src := strings.Replace(goodConfig, `rejoin_interval = "10s"`, `rejoin_interval = "10s"`+"\nfailure_detection = \""+tt.detection+"\"", 1)
			c, err := Parse("m.toml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			mc := memberlistConfig(c)
			if mc.EnableCompression {
				t.Error("compression is on")
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

	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		lines = append(lines, l)
	}
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
	}
	for i := range 10000 {
		w.Write(fmt.Appendf(nil, kinds[i%len(kinds)]+"\n", i, i))
		now = now.Add(time.Millisecond) // 10 s in all
	}
	w.Write([]byte("[INFO] memberlist: Suspect n2 has failed, no acks received\n"))
	lines := strings.Count(buf.String(), "\n")
	if lines > 2*len(kinds)+1 {
		t.Errorf("10,000 garbage packets made %d log lines, want at most %d:\n%s", lines, 2*len(kinds)+1, buf.String())
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
