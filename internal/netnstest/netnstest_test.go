package netnstest

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	calls := 0
	ok, detail := Poll(time.Minute, 0, func() (bool, string) {
		calls++
		return calls == 3, "call " + string(rune('0'+calls))
	})
	if !ok || calls != 3 || detail != "call 3" {
		t.Errorf("Poll = %v, %q after %d calls, want true, \"call 3\" after 3", ok, detail, calls)
	}
	calls = 0
	ok, detail = Poll(0, 0, func() (bool, string) { calls++; return false, "never" })
	if ok || detail != "never" || calls < 1 {
		t.Errorf("Poll with no time = %v, %q after %d calls, want false, \"never\" after at least one", ok, detail, calls)
	}
}

func TestName(t *testing.T) {
	a, b := Name("x", "s"), Name("x", "s")
	if a == b || !strings.HasPrefix(a, "vt-x-") || !strings.HasSuffix(a, "-s") {
		t.Errorf("Name twice = %q, %q: want two different vt-x-…-s names", a, b)
	}
}

// TestNetnsInAndVeth: a veth between two new namespaces carries a TCP
// connection made by code run In each of them, and the listener is not in
// the test's own namespace.
func TestNetnsInAndVeth(t *testing.T) {
	SkipUnlessEnabled(t)
	a, b := NewNS(t, Name("nt", "a")), NewNS(t, Name("nt", "b"))
	Veth(t, a, "eth0", []string{"192.0.2.1/24"}, b, "eth0", []string{"192.0.2.2/24"})
	var l net.Listener
	MustIn(t, a, func() (err error) { l, err = net.Listen("tcp", "192.0.2.1:0"); return err })
	defer l.Close()
	if _, err := net.Listen("tcp", "192.0.2.1:0"); err == nil {
		t.Fatal("192.0.2.1 is bindable in the test's own namespace: In did not switch")
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	MustIn(t, b, func() error {
		c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted within 5s")
	}
}
