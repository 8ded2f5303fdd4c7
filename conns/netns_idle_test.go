//go:build linux

package conns

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
)

// idleLab is a host h with the VIP 192.0.2.10 (and 192.0.2.1) and a
// client c (192.0.2.2) on one veth pair.
func idleLab(t *testing.T) (h, c string) {
	t.Helper()
	h, c, hIf := hostAndClient(t)
	netnstest.MustRun(t, "ip", "-n", h, "addr", "add", "192.0.2.1/24", "dev", hIf)
	netnstest.MustRun(t, "ip", "-n", h, "addr", "add", "192.0.2.10/32", "dev", hIf)
	netnstest.MustRun(t, "ip", "-n", c, "addr", "add", "192.0.2.2/24", "dev", "eth0")
	netnstest.MustRun(t, "ip", "-n", h, "link", "set", hIf, "up")
	netnstest.MustRun(t, "ip", "-n", c, "link", "set", "eth0", "up")
	return h, c
}

var vipFilter = Filter{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.10")}, Ports: []uint16{6443}}

// destroyIdle closes f's connections at idle moments as the agent does
// (polled every 5 ms, each quiet for 40 ms), those still busy at until
// anyway.
func destroyIdle(tab *Table, f Filter, until time.Time) (DestroyResult, error) {
	return tab.DestroyIdle(context.Background(), f, IdleConfig{Poll: 5 * time.Millisecond, Quiet: 40 * time.Millisecond, Until: until})
}

// TestNetnsDestroyIdleCalledOff: when ctx ends (the handoff is called
// off), DestroyIdle returns at once and leaves the busy connection open:
// it goes on working.
func TestNetnsDestroyIdleCalledOff(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	h, c := idleLab(t)
	var l net.Listener
	netnstest.MustIn(t, h, func() (err error) { l, err = net.Listen("tcp", "192.0.2.10:6443"); return err })
	t.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		k, err := l.Accept()
		if err == nil {
			accepted <- k
		}
	}()
	k := dial(t, c, "192.0.2.10:6443")
	var srv net.Conn
	select {
	case srv = <-accepted:
		t.Cleanup(func() { srv.Close() })
	case <-time.After(2 * time.Second):
		t.Fatal("nothing accepted")
	}
	// A request the server has not read yet: busy.
	if _, err := k.Write([]byte("request\n")); err != nil {
		t.Fatal(err)
	}
	tab := openTableIn(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	res, err := tab.DestroyIdle(ctx, vipFilter, IdleConfig{Poll: 5 * time.Millisecond, Until: time.Now().Add(10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if res != (DestroyResult{Left: 1}) {
		t.Errorf("DestroyIdle called off = %+v, want the busy connection left open", res)
	}
	// The connection still works: the request is read and answered.
	_ = srv.SetDeadline(time.Now().Add(2 * time.Second))
	if line, err := bufio.NewReader(srv).ReadString('\n'); err != nil || line != "request\n" {
		t.Fatalf("server read %q, %v", line, err)
	}
	if _, err := srv.Write([]byte("answer\n")); err != nil {
		t.Fatal(err)
	}
	_ = k.SetDeadline(time.Now().Add(2 * time.Second))
	if line, err := bufio.NewReader(k).ReadString('\n'); err != nil || line != "answer\n" {
		t.Errorf("after DestroyIdle was called off the client read %q, %v; want the answer", line, err)
	}
}

// TestNetnsDestroyIdleSendQueue: an answer the host has written but the
// client has not received yet (a large LIST in the socket's send queue,
// the client reading slowly) is not an idle moment: DestroyIdle waits
// until the client has all of it. Closing it earlier drops the rest of the
// answer (the kernel discards the send queue and resets the client).
func TestNetnsDestroyIdleSendQueue(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	h, c := idleLab(t)
	const size = 16 << 20 // far more than the socket buffers hold
	answer := bytes.Repeat([]byte("x"), size)
	var l net.Listener
	netnstest.MustIn(t, h, func() (err error) { l, err = net.Listen("tcp", "192.0.2.10:6443"); return err })
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		k, err := l.Accept()
		if err != nil {
			return
		}
		defer k.Close()
		r := bufio.NewReader(k)
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
		_, _ = k.Write(answer)
		// Then waits for the next request, as an HTTP server keeps its
		// connection.
		_, _ = r.ReadString('\n')
	})
	k := dial(t, c, "192.0.2.10:6443")
	if _, err := k.Write([]byte("list\n")); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing for a while: the answer fills its receive
	// buffer and the host's send queue.
	time.Sleep(100 * time.Millisecond)
	got := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond) // DestroyIdle is running
		_ = k.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.ReadFull(k, make([]byte, size))
		if err != nil {
			err = fmt.Errorf("read %d of %d bytes: %w", n, size, err)
		}
		got <- err
	}()

	tab := openTableIn(t, h)
	start := time.Now()
	res, err := destroyIdle(tab, vipFilter, start.Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DestroyIdle: %+v in %v", res, time.Since(start).Round(time.Millisecond))
	if err := <-got; err != nil {
		t.Errorf("the client's answer: %v (closed before the send queue had drained)", err)
	}
	if res.Idle != 1 || res.Busy != 0 {
		t.Errorf("DestroyIdle = %+v, want the connection closed idle once the answer was out", res)
	}
}

// TestNetnsDestroyIdleHTTP2: one HTTP/2 connection over TLS (Go's
// net/http server and client, as kube-apiserver and client-go) carries a
// watch and a write every 100 ms, as a kubelet's does. The server answers
// a write after its commit (20 ms), and sends the write's watch event on
// the watch's stream 20 ms before the answer, as an apiserver's watch
// cache can. DestroyIdle starts right after such an event went out, the
// write still unanswered: the host's last data went out after the
// client's last, yet a request is in flight. No write may fail; the
// connection is closed at an idle moment between writes, and the client's
// next write goes out on a new connection.
func TestNetnsDestroyIdleHTTP2(t *testing.T) {
	netnstest.SkipUnlessEnabled(t)
	h, c := idleLab(t)
	const (
		commit      = 20 * time.Millisecond
		answerAfter = 20 * time.Millisecond
		writeEvery  = 100 * time.Millisecond
	)
	cert, pool := selfSigned(t, netip.MustParseAddr("192.0.2.10"))

	// The server: /watch streams events (each write's, and one every
	// 300 ms of its own); /write commits, has its event sent, answers.
	var mu sync.Mutex
	var watchers []chan string
	eventSent := make(chan struct{}, 64) // a write's event has been flushed
	mux := http.NewServeMux()
	mux.HandleFunc("/watch", func(w http.ResponseWriter, r *http.Request) {
		ev := make(chan string, 16)
		mu.Lock()
		watchers = append(watchers, ev)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			line, write := "", false
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
				line = "other\n"
			case line = <-ev:
				write = true
			}
			if _, err := io.WriteString(w, line); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			if write {
				select {
				case eventSent <- struct{}{}:
				default:
				}
			}
		}
	})
	mux.HandleFunc("/write", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		time.Sleep(commit)
		mu.Lock()
		for _, ev := range watchers {
			select {
			case ev <- "event " + string(body) + "\n":
			default:
			}
		}
		mu.Unlock()
		time.Sleep(answerAfter)
		fmt.Fprintf(w, "wrote %s\n", body)
	})
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	var l net.Listener
	netnstest.MustIn(t, h, func() (err error) { l, err = net.Listen("tcp", "192.0.2.10:6443"); return err })
	var served sync.WaitGroup
	served.Go(func() { _ = srv.ServeTLS(l, "", "") })
	t.Cleanup(func() { srv.Close(); served.Wait() })

	// The client: one transport, so one connection for everything.
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
		DialContext:       dialIn(c),
	}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	ctx, stop := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	t.Cleanup(func() { stop(); clients.Wait() })
	clients.Go(func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://192.0.2.10:6443/watch", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body) // until the connection is closed
	})
	type result struct {
		at   time.Time
		err  error
		prot string
	}
	var rmu sync.Mutex
	var results []result
	clients.Go(func() {
		tick := time.NewTicker(writeEvery)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			req, _ := http.NewRequestWithContext(rctx, http.MethodPost, "https://192.0.2.10:6443/write", strings.NewReader(fmt.Sprint(n)))
			resp, err := hc.Do(req)
			r := result{at: time.Now(), err: err}
			if err == nil {
				r.prot = resp.Proto
				b, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rerr == nil && string(b) != fmt.Sprintf("wrote %d\n", n) {
					rerr = fmt.Errorf("answer %q", b)
				}
				r.err = rerr
			}
			cancel()
			rmu.Lock()
			results = append(results, r)
			rmu.Unlock()
		}
	})

	tab := openTableIn(t, h)
	// A few writes first, then DestroyIdle right after a write's event
	// went out, its answer still to come.
	for range 3 {
		select {
		case <-eventSent:
		case <-time.After(5 * time.Second):
			t.Fatal("no write's event went out")
		}
	}
	start := time.Now()
	res, err := destroyIdle(tab, vipFilter, start.Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := time.Now()
	t.Logf("DestroyIdle: %+v in %v", res, done.Sub(start).Round(time.Millisecond))
	time.Sleep(5 * writeEvery) // writes on the next connection
	stop()
	clients.Wait()

	rmu.Lock()
	defer rmu.Unlock()
	var failed []string
	after := 0
	for _, r := range results {
		switch {
		case r.err != nil:
			failed = append(failed, r.err.Error())
		case r.prot != "HTTP/2.0":
			t.Errorf("a write went over %s, want HTTP/2", r.prot)
		case r.at.After(done):
			after++
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d writes failed (closed with a request in flight): %s", len(failed), len(results), failed[0])
	}
	if res.Idle != 1 || res.Busy != 0 {
		t.Errorf("DestroyIdle = %+v, want the one connection closed at an idle moment", res)
	}
	if after == 0 {
		t.Error("no write succeeded after the close: the client did not go on on a new connection")
	}
}

// dialIn returns a DialContext that opens its connections in namespace ns.
func dialIn(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (k net.Conn, err error) {
		err = netnstest.In(ns, func() (err error) {
			d := net.Dialer{Timeout: 2 * time.Second}
			k, err = d.DialContext(ctx, network, addr)
			return err
		})
		return k, err
	}
}

// selfSigned returns a certificate for addr and a pool that trusts it.
func selfSigned(t *testing.T, addr netip.Addr) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		IPAddresses:  []net.IP{addr.AsSlice()},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
