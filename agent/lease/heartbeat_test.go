package lease

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// plainName is the name rule of the tests: letters, digits and '-'.
func plainName(s string) bool {
	return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
}

// TestHeartbeatRoundTrip: what encode writes decodes to the same
// heartbeat, a later version's trailing bytes are ignored, and garbage, or
// a name the rule refuses, is an error.
func TestHeartbeatRoundTrip(t *testing.T) {
	in := heartbeat{From: "cp-1", Epoch: 99, Seq: 1 << 40, Driver: true, AskAll: true, Ask: "cp-3",
		Entries: []heartbeatEntry{{Name: "cp-2", Epoch: 5, Seq: 7, Silent: true}, {Name: "cp-3", Seq: 0}}}
	b, err := in.encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeHeartbeat(b, plainName)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip: %+v -> %+v", in, out)
	}
	// A later version's trailing bytes are ignored.
	if out, err := decodeHeartbeat(append(b, 9, 9, 9), plainName); err != nil || !reflect.DeepEqual(in, out) {
		t.Errorf("with trailing bytes: %+v, %v", out, err)
	}
	for _, bad := range [][]byte{nil, {'H'}, append([]byte{'H', 0}, make([]byte, 18)...), b[:len(b)-3], append([]byte{'X', 1}, make([]byte, 18)...)} {
		if _, err := decodeHeartbeat(bad, plainName); err == nil {
			t.Errorf("decodeHeartbeat(%x) accepted", bad)
		}
	}
	for _, name := range []string{"cp 1", "cp-1\nINFO"} {
		bad := in
		bad.Entries = []heartbeatEntry{{Name: name}}
		b, err := bad.encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeHeartbeat(b, plainName); err == nil {
			t.Errorf("a heartbeat naming %q decoded", name)
		}
	}
}

// TestHeartbeatRestart: the restart grace travels after the entries; a
// heartbeat without it keeps its exact version-1 bytes (what a release
// without restarts reads), and a restart flag without its grace is
// garbage.
func TestHeartbeatRestart(t *testing.T) {
	plain := heartbeat{From: "cp-1", Epoch: 1, Seq: 2, Entries: []heartbeatEntry{{Name: "cp-2", Seq: 1}}}
	in := plain
	in.Restart = 3 * time.Second
	b, err := in.encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeHeartbeat(b, plainName)
	if err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v -> %+v, %v", in, out, err)
	}
	pb, _ := plain.encode()
	if len(b) != len(pb)+4 || b[18] != pb[18]|hbRestart {
		t.Errorf("restart heartbeat %x, want the plain one %x with flag bit 3 and 4 bytes of grace after the entries", b, pb)
	}
	// What a release without restarts reads of it: the plain heartbeat
	// (it ignores flag bit 3 and the bytes after the entries).
	old := b[: len(b)-4 : len(b)-4]
	old[18] &^= hbRestart
	if o, err := decodeHeartbeat(append(old, b[len(b)-4:]...), plainName); err != nil || !reflect.DeepEqual(o, plain) {
		t.Errorf("without the flag, the grace bytes are ignored: %+v, %v", o, err)
	}
	b[18] |= hbRestart
	if _, err := decodeHeartbeat(b[:len(b)-4], plainName); err == nil {
		t.Error("a restart flag without its grace decoded")
	}
	if _, err := (heartbeat{From: "a", Restart: -time.Second}).encode(); err == nil {
		t.Error("a negative grace encoded")
	}
}
