package converge

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// bindLater is how long after vipd's start the bind address is added.
const bindLater = 5 * time.Second

// notifications collects what a process sends to a fake $NOTIFY_SOCKET.
type notifications struct {
	conn *net.UnixConn
	done chan struct{}

	mu   sync.Mutex
	msgs []notification
}

type notification struct {
	at   time.Time
	line string
}

// listenNotify creates a unixgram socket at path standing in for systemd's
// notification socket; it is closed in t.Cleanup.
func listenNotify(t *testing.T, path string) *notifications {
	t.Helper()
	os.Remove(path)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatalf("notify socket: %v", err)
	}
	n := &notifications{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return // closed
			}
			n.mu.Lock()
			for _, line := range strings.Split(string(buf[:k]), "\n") {
				if line != "" {
					n.msgs = append(n.msgs, notification{time.Now(), line})
				}
			}
			n.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-n.done; os.Remove(path) })
	return n
}

// all returns every notification so far.
func (n *notifications) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, m := range n.msgs {
		out = append(out, m.line)
	}
	return out
}

// first returns the first notification starting with prefix.
func (n *notifications) first(prefix string) (notification, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.msgs {
		if strings.HasPrefix(m.line, prefix) {
			return m, true
		}
	}
	return notification{}, false
}

// TestBindAddressAddedLater starts vipd on a node whose cluster.bind_address
// is not configured yet (as at boot before DHCP or a network manager adds
// it) and adds the address 5 s later. vipd must not exit: it logs that it
// waits and says so in its systemd STATUS, sends no READY=1 while waiting,
// and once the address is there it joins the two running nodes, becomes
// ready, and can hold the VIP (the two others withdraw, so it must).
func TestBindAddressAddedLater(t *testing.T) {
	l := netlab.New(t, netlab.Options{Client: new(bool)})
	x := l.Nodes[2]
	rest := l.Others(x)
	if err := ip(x, "addr", "del", x.IP.String()+"/24", "dev", netlab.Iface); err != nil {
		t.Fatal(err)
	}
	for _, n := range rest {
		l.StartVipd(n, netlab.VipdOptions{})
	}
	vip := l.DefaultVIPs()[0]
	if _, err := l.WaitOneHolder(vip, l.Settle, rest...); err != nil {
		t.Fatal(err)
	}

	notify := listenNotify(t, filepath.Join(x.Dir, "notify.sock"))
	started := time.Now()
	v, err := l.StartVipdNoWait(x, l.VipdConfig(x, netlab.VipdOptions{}), "NOTIFY_SOCKET="+filepath.Join(x.Dir, "notify.sock"))
	if err != nil {
		t.Fatal(err)
	}
	line, ok := waitLog(t, x, 0, bindLater-time.Second, "waiting for cluster.bind_address", x.IP.String())
	if !ok {
		t.Fatalf("%s: no \"waiting for cluster.bind_address\" line within %v (running %t, exit %v):\n%s", x.Name, bindLater-time.Second, v.Running(), v.ExitErr(), x.MustVipdLog(t))
	}
	t.Logf("%s logged: %s", x.Name, strings.TrimSpace(line))
	if ok, _ := netlab.Eventually(time.Second, 20*time.Millisecond, func() (bool, string) {
		_, ok := notify.first("STATUS=waiting for cluster.bind_address")
		return ok, ""
	}); !ok {
		t.Errorf("%s: no STATUS=waiting for cluster.bind_address... notification: %q", x.Name, notify.all())
	}
	time.Sleep(time.Until(started.Add(bindLater)))
	if !v.Running() {
		t.Fatalf("%s: vipd exited while waiting for its bind address: %v\n%s", x.Name, v.ExitErr(), x.MustVipdLog(t))
	}
	if m, ok := notify.first("READY=1"); ok {
		t.Errorf("%s: READY=1 at %v, before its bind address existed", x.Name, m.at.Sub(started))
	}

	added := time.Now()
	if err := ip(x, "addr", "add", x.IP.String()+"/24", "dev", netlab.Iface); err != nil {
		t.Fatal(err)
	}
	var ready notification
	if ok, _ := netlab.Eventually(l.Settle, 20*time.Millisecond, func() (bool, string) {
		var ok bool
		ready, ok = notify.first("READY=1")
		return ok, ""
	}); !ok {
		t.Fatalf("%s: no READY=1 within %v of adding its address:\n%s", x.Name, l.Settle, x.MustVipdLog(t))
	}
	if _, ok := waitLog(t, x, 0, time.Second, "cluster.bind_address is configured now"); !ok {
		t.Errorf("%s: no \"cluster.bind_address is configured now\" line", x.Name)
	}
	if err := l.WaitAlive(x, l.Nodes, l.Settle); err != nil {
		t.Fatalf("%s after its address appeared: %v", x.Name, err)
	}
	alive := time.Since(added)
	t.Logf("%s: address added %v after start; READY=1 %v later, alive on every node %v later",
		x.Name, added.Sub(started).Round(time.Millisecond), ready.at.Sub(added).Round(time.Millisecond), alive.Round(time.Millisecond))

	for _, n := range rest {
		if out, err := l.Vipctl(n, "withdraw"); err != nil {
			t.Fatalf("vipctl withdraw on %s: %v %s", n.Name, err, out)
		}
	}
	if h, err := l.WaitOneHolder(vip, l.Settle); err != nil || h != x.Name {
		t.Fatalf("with %s withdrawn: holder %q (%v), want %s", rest[0].Name+" and "+rest[1].Name, h, err, x.Name)
	}
	t.Logf("%s holds %s once the others withdrew", x.Name, vip.Address)
}
