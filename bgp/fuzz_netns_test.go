package bgp

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/netnstest"
	"github.com/vipd/vipd/internal/netnstest/routers"
)

// TestPeerFuzz is a BGP peer fuzzer for the speaker vipd embeds: peers in
// a namespace of their own, on real TCP sessions, send the malformed OPEN
// and UPDATE shapes of GoBGP's 2026 advisories (advisoryShapes), then
// randomised mutations of valid messages for VIPD_BGP_FUZZ_DURATION (5s
// unless set: make bgp-fuzz runs 10 minutes; VIPD_BGP_FUZZ_SEED repeats a
// run's messages). After every message the speaker process must still run,
// its other session (BIRD over IPv6) must stay established without a reset
// and BIRD must keep the VIP route. A fuzzed session may end with a
// NOTIFICATION and come back: that is how BGP handles a malformed message.
// Several fuzz peers run at once, since each reset session costs the
// speaker's 5 s idle hold before it reconnects.
func TestPeerFuzz(t *testing.T) {
	netnstest.SkipUnlessEnabled(t, "bird", "birdc")
	duration := 5 * time.Second
	if v := os.Getenv("VIPD_BGP_FUZZ_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("VIPD_BGP_FUZZ_DURATION: %v", err)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("VIPD_BGP_FUZZ_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("VIPD_BGP_FUZZ_SEED: %v", err)
		}
		seed = s
	}

	rns, sns := lab(t, "z")
	fns := netnstest.NewNS(t, netnstest.Name("bgp", "zf"))
	var addrs []string
	for _, a := range fuzzPeerAddrs {
		addrs = append(addrs, a.String()+"/24")
	}
	netnstest.Veth(t, fns, "eth0", addrs, sns, "eth1", []string{"198.51.100.200/24"})
	bird := routers.StartBIRD(t, rns, fuzzBirdConf)
	peers := []Peer{{Address: routerV6, ASN: routerASN, HoldTime: 3 * time.Second}}
	for _, a := range fuzzPeerAddrs {
		peers = append(peers, Peer{Address: a, ASN: fuzzASN, HoldTime: 9 * time.Second})
	}
	log := &tailBuffer{max: 64 << 10}
	spk := startSpeakerProcLog(t, sns, speakerConfig(peers...), log)
	netnstest.Eventually(t, 20*time.Second, 200*time.Millisecond, "bird spk6 established", func() (bool, string) {
		return bird.Established("spk6")
	})
	spk.do(t, "announce "+vip6.Addr().String())
	spk.do(t, "announce "+vip4.Addr().String())
	waitRoute(t, bird, vip6, speakerV6, "bird has the ipv6 vip", noGshut)

	w := &fuzzWatch{spk: spk, bird: bird, log: log}
	if err := w.check("the start", nil, true); err != nil {
		t.Fatal(err)
	}
	fps := make([]*fuzzPeer, len(fuzzPeerAddrs))
	for i, a := range fuzzPeerAddrs {
		fps[i] = &fuzzPeer{addr: a, ln: listenIn(t, fns, netip.AddrPortFrom(a, 179)), w: w}
	}
	// each runs f on every fuzz peer at once and fails t with their
	// errors.
	each := func(f func(i int, fp *fuzzPeer) error) {
		var wg sync.WaitGroup
		errs := make([]error, len(fps))
		for i, fp := range fps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = f(i, fp)
				if errs[i] != nil {
					w.stop()
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}

	// The advisories' shapes, each once, spread over the peers, with
	// what the speaker did.
	shapes := advisoryShapes(fuzzASN)
	outcomes := make([]string, len(shapes))
	each(func(i int, fp *fuzzPeer) error {
		for j := i; j < len(shapes) && !w.stopped(); j += len(fps) {
			s := shapes[j]
			var err error
			if s.open {
				outcomes[j], err = fp.sendOpen(s.msg)
			} else {
				outcomes[j], err = fp.sendUpdate(s.msg)
			}
			if err == nil {
				err = w.check(s.advisory+" "+s.name, s.msg, true)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	for j, s := range shapes {
		t.Logf("%s: %s: %s", s.advisory, s.name, outcomes[j])
	}

	// Mutations of valid messages until the duration ends.
	t.Logf("mutations for %v on %d sessions, seed %d (VIPD_BGP_FUZZ_SEED repeats the messages)", duration, len(fps), seed)
	bases := validUpdates(fuzzASN)
	end := time.Now().Add(duration)
	counts := make([]map[string]int, len(fps))
	each(func(i int, fp *fuzzPeer) error {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		counts[i] = map[string]int{}
		for n := 0; time.Now().Before(end) && !w.stopped(); n++ {
			var msg []byte
			var outcome string
			var err error
			if r.IntN(25) == 0 {
				msg = mutate(r, openMsg(fuzzASN, 9, fp.addr, validCaps(fuzzASN)...))
				outcome, err = fp.sendOpen(msg)
				outcome = "open: " + outcome
			} else {
				msg = mutate(r, bases[r.IntN(len(bases))])
				outcome, err = fp.sendUpdate(msg)
				outcome = "update: " + outcome
			}
			if err == nil {
				err = w.check(fmt.Sprintf("mutation %d of peer %s", n, fp.addr), msg, n%10 == 0)
			}
			if err != nil {
				return err
			}
			counts[i][outcomeKind(outcome)]++
		}
		return nil
	})
	if err := w.check("the end", nil, true); err != nil {
		t.Fatal(err)
	}
	total := map[string]int{}
	for _, c := range counts {
		for k, v := range c {
			total[k] += v
		}
	}
	t.Logf("mutations sent, by what the speaker did: %v", total)
}

const fuzzASN = 65002

const fuzzBirdConf = `
router id 192.0.2.1;
protocol device { scan time 1; }
protocol bgp spk6 {
	local 2001:db8:1::1 as 65000;
	neighbor 2001:db8:1::2 as 65001;
	passive on;
	error wait time 1, 5;
	hold time 3;
	ipv6 { import all; export none; };
}
`

// validUpdates are the valid UPDATEs mutations start from: a plain IPv4
// announcement, a withdrawal, one with MP_REACH_NLRI, AS4_PATH, AGGREGATOR
// and communities, and one with IPv6 address specific extended communities.
func validUpdates(asn uint32) [][]byte {
	origin, asPath, nextHop := validAttrs(asn)
	as4 := attr(flagOptional|flagTransitive, attrAS4Path, binary.BigEndian.AppendUint32([]byte{2, 1}, asn))
	aggr := attr(flagOptional|flagTransitive, 7, binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, asn), 0xc6336401))
	comms := attr(flagOptional|flagTransitive, 8, []byte{0xfd, 0xea, 0, 100, 0xff, 0xff, 0, 0})
	mp := attr(flagOptional, attrMPReach, concat([]byte{0, 1, 1, 4}, fuzzPeerAddr.AsSlice(), []byte{0, 24, 203, 0, 113}))
	ext6 := attr(flagOptional|flagTransitive, attrIP6ExtComms, append([]byte{0, 2}, make([]byte, 18)...))
	return [][]byte{
		validUpdate(asn),
		updateMsg(fuzzNLRI, nil, nil),
		updateMsg(nil, concat(origin, asPath, nextHop, as4, aggr, comms, mp), fuzzNLRI),
		updateMsg(nil, concat(origin, asPath, nextHop, ext6), fuzzNLRI),
	}
}

// outcomeKind is an outcome without its details in parentheses.
func outcomeKind(o string) string {
	kind, _, _ := strings.Cut(o, " (")
	return kind
}

// fuzzPeer is the fuzzing side of one session: it listens in its
// namespace (the speaker connects), and holds at most one established
// session.
type fuzzPeer struct {
	addr netip.Addr
	ln   *net.TCPListener
	w    *fuzzWatch
	conn net.Conn
	br   *bufio.Reader
}

// accept waits (at most 30s: the speaker retries 5s after a reset) for the
// speaker's next connection and reads its OPEN.
func (f *fuzzPeer) accept() error {
	f.drop()
	f.ln.SetDeadline(time.Now().Add(30 * time.Second))
	c, err := f.ln.Accept()
	if err != nil {
		if err := f.w.alive("waiting for a connection to " + f.addr.String()); err != nil {
			return err
		}
		return fmt.Errorf("the speaker did not connect to the fuzz peer %s within 30s: %w", f.addr, err)
	}
	f.conn, f.br = c, bufio.NewReader(c)
	if typ, _, err := f.read(10 * time.Second); err != nil || typ != msgOpen {
		return fmt.Errorf("speaker's first message to %s: type %d, %v (want OPEN)", f.addr, typ, err)
	}
	return nil
}

func (f *fuzzPeer) drop() {
	if f.conn != nil {
		f.conn.Close()
		f.conn, f.br = nil, nil
	}
}

// read returns the next message's type and body, waiting at most d.
func (f *fuzzPeer) read(d time.Duration) (byte, []byte, error) {
	f.conn.SetReadDeadline(time.Now().Add(d))
	var h [19]byte
	if _, err := io.ReadFull(f.br, h[:]); err != nil {
		return 0, nil, err
	}
	l := int(binary.BigEndian.Uint16(h[16:]))
	if l < 19 {
		return 0, nil, fmt.Errorf("speaker sent a header of length %d", l)
	}
	body := make([]byte, l-19)
	if _, err := io.ReadFull(f.br, body); err != nil {
		return 0, nil, err
	}
	return h[18], body, nil
}

// await reads until a message of type want arrives (true), or a
// NOTIFICATION, the end of the session or d passes (false, and what).
func (f *fuzzPeer) await(want byte, d time.Duration) (bool, string) {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return false, "session kept"
		}
		typ, body, err := f.read(left)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return false, "session kept"
		case err != nil:
			return false, "connection closed (" + err.Error() + ")"
		case typ == want:
			return true, ""
		case typ == msgNotification && len(body) >= 2:
			return false, fmt.Sprintf("NOTIFICATION (code %d subcode %d)", body[0], body[1])
		}
	}
}

// establish makes sure a session is up: the speaker's connection accepted,
// a valid OPEN and KEEPALIVE sent, its KEEPALIVE received.
func (f *fuzzPeer) establish() error {
	for attempt := 0; f.conn == nil; attempt++ {
		if attempt == 5 {
			return fmt.Errorf("no established session between the speaker and %s after 5 connections", f.addr)
		}
		if err := f.accept(); err != nil {
			return err
		}
		f.write(concat(openMsg(fuzzASN, 9, f.addr, validCaps(fuzzASN)...), bgpMsg(msgKeepalive, nil)))
		if f.conn == nil {
			continue
		}
		if ok, _ := f.await(msgKeepalive, 10*time.Second); !ok {
			f.drop()
		}
	}
	return nil
}

func (f *fuzzPeer) write(b []byte) {
	f.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := f.conn.Write(b); err != nil {
		f.drop()
	}
}

// sendOpen answers the speaker's next connection with open and reports
// what the speaker did.
func (f *fuzzPeer) sendOpen(open []byte) (string, error) {
	if err := f.accept(); err != nil {
		return "", err
	}
	f.write(concat(open, bgpMsg(msgKeepalive, nil)))
	if f.conn == nil {
		return "connection closed (write)", nil
	}
	ok, what := f.await(msgKeepalive, 3*time.Second)
	f.drop() // the next message starts from a new session either way
	if ok {
		return "accepted", nil
	}
	return what, nil
}

// sendUpdate sends msg (and a KEEPALIVE) on an established session and
// reports what the speaker did within 500ms.
func (f *fuzzPeer) sendUpdate(msg []byte) (string, error) {
	if err := f.establish(); err != nil {
		return "", err
	}
	f.write(concat(msg, bgpMsg(msgKeepalive, nil)))
	if f.conn == nil {
		return "connection closed (write)", nil
	}
	// No message has type 0: read until the session ends or 500ms pass.
	_, what := f.await(0, 500*time.Millisecond)
	if what != "session kept" {
		f.drop()
	}
	return what, nil
}

// fuzzWatch checks, for all fuzz peers, what must survive their messages.
type fuzzWatch struct {
	spk  *speakerProc
	bird routers.Router
	log  *tailBuffer

	mu      sync.Mutex // serialises the speaker helper's line protocol
	uptime  time.Duration
	stopReq bool
}

func (w *fuzzWatch) stop() {
	w.mu.Lock()
	w.stopReq = true
	w.mu.Unlock()
}

func (w *fuzzWatch) stopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopReq
}

// alive returns an error when the speaker process has exited.
func (w *fuzzWatch) alive(after string) error {
	select {
	case <-w.spk.done:
		return fmt.Errorf("the speaker exited after %s; its log ends with:\n%s", after, w.log.String())
	default:
		return nil
	}
}

// check returns an error unless the speaker still runs and its BIRD
// session is established without a reset since the start; withRoute also
// asks BIRD for the VIP route.
func (w *fuzzWatch) check(after string, msg []byte, withRoute bool) error {
	if err := w.alive(fmt.Sprintf("%s (message %x)", after, msg)); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	up, err := w.otherSession()
	if err != nil {
		if err := w.alive(fmt.Sprintf("%s (message %x)", after, msg)); err != nil {
			return err
		}
		return fmt.Errorf("after %s (message %x): %w", after, msg, err)
	}
	if up < w.uptime {
		return fmt.Errorf("after %s (message %x): the BIRD session was reset (uptime %v, was %v)", after, msg, up, w.uptime)
	}
	w.uptime = up
	if withRoute {
		rs, err := w.bird.Routes(vip6)
		if err != nil || len(rs) == 0 {
			return fmt.Errorf("after %s (message %x): BIRD lost the VIP route: %v %v", after, msg, rs, err)
		}
	}
	return nil
}

// otherSession returns the BIRD session's uptime, or an error unless it is
// established. The caller holds w.mu.
func (w *fuzzWatch) otherSession() (time.Duration, error) {
	if _, err := fmt.Fprintln(w.spk.in, "peers"); err != nil {
		return 0, fmt.Errorf("speaker helper: %w", err)
	}
	var reply string
	select {
	case l, ok := <-w.spk.lines:
		if !ok {
			return 0, errors.New("speaker helper exited")
		}
		reply = l
	case <-time.After(10 * time.Second):
		return 0, errors.New("speaker helper: no reply to peers within 10s")
	}
	payload, ok := strings.CutPrefix(reply, "ok ")
	if !ok {
		return 0, fmt.Errorf("speaker helper peers: %s", reply)
	}
	var ps []PeerStatus
	if err := json.Unmarshal([]byte(payload), &ps); err != nil {
		return 0, err
	}
	for _, p := range ps {
		if p.Address == routerV6 {
			if p.State != "established" {
				return 0, fmt.Errorf("the BIRD session is %s, want established", p.State)
			}
			return p.Uptime, nil
		}
	}
	return 0, errors.New("the speaker has no BIRD peer")
}

// listenIn listens on TCP addr inside namespace ns; the listener is closed
// in t.Cleanup.
func listenIn(t *testing.T, ns string, addr netip.AddrPort) *net.TCPListener {
	t.Helper()
	var ln *net.TCPListener
	netnstest.MustIn(t, ns, func() (err error) {
		ln, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(addr))
		return err
	})
	t.Cleanup(func() { ln.Close() })
	return ln
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > w.max {
		w.b = append([]byte(nil), w.b[len(w.b)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
