// Package clients runs real vipd processes in a network-namespace lab
// (lab/netlab) and checks what an idle TCP client of the VIP sees when the
// VIP's holder is lost: with [connections] reset (the default) the new
// holder resets the client's dead connection at once; without it the
// client hears nothing (issue 27). The tests need root and
// VIPD_NETNS_TESTS=1 (make netns-test).
package clients

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

const (
	// resetWithin bounds the time from the fault to the client's reset:
	// the lease takes the holder for gone within about 0.5 s, then the
	// claim, the pokes and the client's answer.
	resetWithin = 3 * time.Second
	// silentFor is how long the control waits for a reset that must not
	// come.
	silentFor = 5 * time.Second
	// metricsPort is api.metrics_address's port in every node namespace.
	metricsPort = 9471
)

// spec is a cluster of three nodes serving HTTP on :6443 and vipd with
// the given [connections] table and /metrics on metricsPort.
func spec(connections string) netlab.Spec {
	return netlab.Spec{HTTP: true, Vipd: netlab.VipdOptions{Extra: connections},
		Edits: []string{`(?m)^(socket = .*)$`, fmt.Sprintf("$1\nmetrics_address = \"127.0.0.1:%d\"", metricsPort)}}
}

// idleClient opens a TCP connection from the client namespace to the VIP's
// port 6443 and leaves it idle (no keepalive), closed at cleanup.
func idleClient(t *testing.T, l *netlab.Lab, vip netlab.VIP) net.Conn {
	t.Helper()
	var c net.Conn
	if err := l.InNamespace(l.Client, func() (err error) {
		d := net.Dialer{Timeout: 2 * time.Second, KeepAlive: -1}
		c, err = d.Dial("tcp", net.JoinHostPort(vip.Address.String(), "6443"))
		return err
	}); err != nil {
		t.Fatalf("client connection to %s: %v", vip.Address, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitKnown waits (bounded) until every node other than holder has the
// holder's list with the client's connection in it.
func waitKnown(t *testing.T, l *netlab.Lab, holder *netlab.Host) {
	t.Helper()
	for _, n := range l.Others(holder) {
		ok, why := netlab.Eventually(10*time.Second, 100*time.Millisecond, func() (bool, string) {
			text, err := l.Metrics(n, metricsPort)
			if err != nil {
				return false, err.Error()
			}
			v, _ := netlab.Metric(text, "vipd_client_connections_known", "node="+holder.Name)
			return v == 1, fmt.Sprintf("vipd_client_connections_known{node=%q} = %v", holder.Name, v)
		})
		if !ok {
			t.Fatalf("%s does not know %s's client connection: %s", n.Name, holder.Name, why)
		}
	}
}

// readResult waits for c to fail or until deadline and says how.
func readResult(c net.Conn, deadline time.Time) error {
	if err := c.SetReadDeadline(deadline); err != nil {
		return err
	}
	_, err := c.Read(make([]byte, 1))
	if err == nil {
		return errors.New("data arrived")
	}
	return err
}

// TestIdleClientResetWhenHolderLost: the holder's link goes down, or its
// vipd is killed while its server hangs (SIGSTOP: its sockets stay open
// and send nothing, as on a machine that froze; a server that exits sends
// its clients a FIN itself) and vipd cleanup removes the address, as the
// systemd unit's ExecStopPost does; the new holder resets the client's
// dead connection within resetWithin, and the client that connects again
// is counted as reconnected on the new holder.
func TestIdleClientResetWhenHolderLost(t *testing.T) {
	for _, fault := range []string{"link down", "vipd killed, server hung"} {
		t.Run(fault, func(t *testing.T) {
			l, vip, holder := netlab.StartCluster(t, spec("[connections]\nports = [6443]\n"))
			c := idleClient(t, l, vip)
			waitKnown(t, l, holder)

			start := time.Now()
			switch fault {
			case "link down":
				l.LinkDown(holder)
			case "vipd killed, server hung":
				// Then what systemd's ExecStopPost does: vipd cleanup
				// removes the address.
				v := l.Vipd(holder)
				v.Kill()
				server := l.HTTP(holder)
				if err := server.Signal(syscall.SIGSTOP); err != nil {
					t.Fatalf("stopping the server on %s: %v", holder.Name, err)
				}
				t.Cleanup(func() { server.Signal(syscall.SIGCONT) })
				if out, err := l.Exec(holder, l.Tools.Vipd, "cleanup", "--config", v.Config); err != nil {
					t.Fatalf("vipd cleanup on %s: %v: %s", holder.Name, err, out)
				}
			}
			err := readResult(c, start.Add(resetWithin))
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("client after %s of %s: %v, want a reset within %v", fault, holder.Name, err, resetWithin)
			}
			t.Logf("client reset %v after the %s", time.Since(start).Round(time.Millisecond), fault)

			next, err := l.WaitMoved(vip, holder.Name, l.Settle, l.Others(holder)...)
			if err != nil {
				t.Fatal(err)
			}
			events := l.VipdEvents(t, l.Node(next), "clients")
			if len(events) == 0 {
				t.Errorf("no clients event on the new holder %s", next)
			}
			// The client reconnects; the new holder sees it.
			idleClient(t, l, vip)
			ok, why := netlab.Eventually(5*time.Second, 100*time.Millisecond, func() (bool, string) {
				text, err := l.Metrics(l.Node(next), metricsPort)
				if err != nil {
					return false, err.Error()
				}
				v, _ := netlab.Metric(text, "vipd_client_reconnects_total", "vip="+vip.Name)
				return v >= 1, fmt.Sprintf("vipd_client_reconnects_total = %v", v)
			})
			if !ok {
				t.Errorf("the new holder %s does not count the client's reconnect: %s", next, why)
			}
		})
	}
}

// TestIdleClientSilentWithoutReset is the control: with reset = false the
// client's connection to the lost holder stays silent.
func TestIdleClientSilentWithoutReset(t *testing.T) {
	l, vip, holder := netlab.StartCluster(t, spec("[connections]\nreset = false\n"))
	c := idleClient(t, l, vip)
	start := time.Now()
	l.LinkDown(holder)
	if _, err := l.WaitMoved(vip, holder.Name, l.Settle, l.Others(holder)...); err != nil {
		t.Fatal(err)
	}
	err := readResult(c, start.Add(silentFor))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("client without reset: %v after %v, want still waiting after %v", err, time.Since(start).Round(time.Millisecond), silentFor)
	}
}
