package bfd

import (
	"testing"
)

// FuzzUnmarshal feeds arbitrary datagrams to the decoder: it must not
// panic, and whatever it accepts must encode back to the same mandatory
// section (the authentication section is not re-encoded).
func FuzzUnmarshal(f *testing.F) {
	f.Add(remote(Up, localDisc).Append(nil))
	f.Add(remote(Down, 0).Append(nil))
	poll := remote(Init, localDisc)
	poll.Poll = true
	f.Add(poll.Append(nil))
	auth := remote(Up, localDisc).Append(nil)
	auth[1] |= bitAuth
	auth[3] = 26
	f.Add(append(auth, 1, 2))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		if err := p.Unmarshal(b); err != nil {
			return
		}
		if p.DetectMult == 0 || p.MyDiscriminator == 0 || p.Multipoint {
			t.Fatalf("accepted a packet RFC 5880 6.8.6 discards: %+v", p)
		}
		out := p.Append(nil)
		if len(out) != HeaderLen {
			t.Fatalf("encoded %d bytes", len(out))
		}
		want := append([]byte(nil), b[:HeaderLen]...)
		want[1] &^= bitAuth
		want[3] = HeaderLen
		if string(out) != string(want) {
			t.Fatalf("re-encoded %x, want %x", out, want)
		}
		var q Packet
		if err := q.Unmarshal(out); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		p.AuthPresent = false
		if q != p {
			t.Fatalf("round trip %+v != %+v", q, p)
		}
	})
}
