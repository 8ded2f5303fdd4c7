package conns

import (
	"encoding/binary"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestActivityIdle(t *testing.T) {
	const quiet = 40 * time.Millisecond
	for _, c := range []struct {
		name  string
		a     Activity
		quiet time.Duration
		want  bool
	}{
		{"answered: the host sent after the client", Activity{SentAgo: 10, RecvAgo: 30}, 0, true},
		{"a request unanswered: the client sent last", Activity{SentAgo: 30, RecvAgo: 10}, 0, false},
		{"data unread by the application", Activity{Unread: 120, SentAgo: 10, RecvAgo: 30}, 0, false},
		{"an answer still in the send queue", Activity{Unsent: 4 << 20, SentAgo: 10, RecvAgo: 30}, 0, false},
		{"an answer sent, not acknowledged yet", Activity{Unsent: 300, SentAgo: 0, RecvAgo: 30}, 0, false},
		{"request and answer in one tick, just now", Activity{SentAgo: 4, RecvAgo: 4}, 0, false},
		{"request and answer in one tick, long ago", Activity{SentAgo: SameTickIdle, RecvAgo: SameTickIdle}, 0, true},
		{"never spoke since the handshake", Activity{SentAgo: 5000, RecvAgo: 5000}, 0, true},
		{"answered, quiet not long enough (a watch event after an HTTP/2 request?)", Activity{SentAgo: 10, RecvAgo: 30}, quiet, false},
		{"answered and quiet long enough", Activity{SentAgo: 40, RecvAgo: 90}, quiet, true},
		{"same tick, quiet longer than SameTickIdle", Activity{SentAgo: SameTickIdle, RecvAgo: SameTickIdle}, time.Second, false},
		{"negative quiet is none", Activity{SentAgo: 1, RecvAgo: 30}, -time.Second, true},
	} {
		if got := c.a.Idle(c.quiet); got != c.want {
			t.Errorf("%s: %+v Idle(%v) = %v, want %v", c.name, c.a, c.quiet, got, c.want)
		}
	}
}

// TestTCPInfoOffsets: the offsets activityOf reads are struct tcp_info's
// and struct inet_diag_msg's.
func TestTCPInfoOffsets(t *testing.T) {
	var ti unix.TCPInfo
	if o := unsafe.Offsetof(ti.Last_data_sent); o != tcpInfoLastDataSent {
		t.Errorf("tcpi_last_data_sent at %d, want %d", o, tcpInfoLastDataSent)
	}
	if o := unsafe.Offsetof(ti.Last_data_recv); o != tcpInfoLastDataRecv {
		t.Errorf("tcpi_last_data_recv at %d, want %d", o, tcpInfoLastDataRecv)
	}
	// struct inet_diag_msg: family, state, timer, retrans (4 bytes), the
	// sockid (48), expires, then rqueue (4 bytes each).
	if o := 4 + sockIDLen + 4; o != diagRqueue {
		t.Errorf("idiag_rqueue at %d, want %d", o, diagRqueue)
	}
	if o := 4 + sockIDLen + 8; o != diagWqueue {
		t.Errorf("idiag_wqueue at %d, want %d", o, diagWqueue)
	}
}

// TestActivityOf reads a message as the kernel lays it out: the
// inet_diag_msg, another attribute, then INET_DIAG_INFO.
func TestActivityOf(t *testing.T) {
	msg := make([]byte, diagMsgLen)
	binary.NativeEndian.PutUint32(msg[diagRqueue:], 7)
	binary.NativeEndian.PutUint32(msg[diagWqueue:], 9)
	attr := func(typ uint16, payload []byte) []byte {
		b := make([]byte, 4, 4+len(payload)+3)
		binary.NativeEndian.PutUint16(b, uint16(4+len(payload)))
		binary.NativeEndian.PutUint16(b[2:], typ)
		b = append(b, payload...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	info := make([]byte, unsafe.Sizeof(unix.TCPInfo{}))
	binary.NativeEndian.PutUint32(info[tcpInfoLastDataSent:], 12)
	binary.NativeEndian.PutUint32(info[tcpInfoLastDataRecv:], 40)
	full := append(append(append([]byte{}, msg...), attr(5, []byte{1, 2, 3})...), attr(inetDiagInfo, info)...)
	a, ok := activityOf(full)
	if !ok || a != (Activity{Unread: 7, Unsent: 9, SentAgo: 12, RecvAgo: 40}) {
		t.Errorf("activityOf = %+v, %v; want unread 7, unsent 9, sent 12 ms ago, received 40 ms ago", a, ok)
	}
	if _, ok := activityOf(msg); ok {
		t.Error("activityOf without INET_DIAG_INFO: ok")
	}
	if _, ok := activityOf(append(append([]byte{}, msg...), attr(inetDiagInfo, info[:20])...)); ok {
		t.Error("activityOf with a short tcp_info: ok")
	}
}

// TestQuietAt: the silence asked for shrinks from Quiet at the start to
// none at Until.
func TestQuietAt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := IdleConfig{Quiet: 40 * time.Millisecond, Until: t0.Add(4 * time.Second)}
	for _, tc := range []struct {
		name string
		at   time.Duration
		want time.Duration
	}{
		{"at the start", 0, 40 * time.Millisecond},
		{"a quarter of the way", time.Second, 30 * time.Millisecond},
		{"half way", 2 * time.Second, 20 * time.Millisecond},
		{"at Until", 4 * time.Second, 0},
		{"past Until", 5 * time.Second, 0},
	} {
		if got := c.quietAt(t0, t0.Add(tc.at)); got != tc.want {
			t.Errorf("%s: quietAt = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := (IdleConfig{Quiet: time.Second, Until: t0}).quietAt(t0, t0); got != 0 {
		t.Errorf("Until at the start: quietAt = %v, want 0", got)
	}
}
