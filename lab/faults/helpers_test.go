package faults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/vipd/vipd/lab/netlab"
)

const (
	// rejoinInterval is cluster.rejoin_interval in every test config.
	rejoinInterval = 5 * time.Second
	// settle bounds convergence after start and after every event.
	settle = 15 * time.Second
	// stopTimeout bounds a SIGTERM shutdown (handoff_timeout is 10s by
	// default).
	stopTimeout = 20 * time.Second
	// sampleEvery is the holder sampling interval.
	sampleEvery = 20 * time.Millisecond
)

var opts = netlab.VipdOptions{RejoinInterval: rejoinInterval.String()}

// cluster starts a 3-node lab and vipd on every node with the
// configuration config returns for it (nil: netlab's default with opts),
// waits until every node sees every other alive and exactly one holds the
// VIP, and returns the lab, the VIP and its holder.
func cluster(t *testing.T, config func(l *netlab.Lab, h *netlab.Host) string) (*netlab.Lab, netlab.VIP, *netlab.Host) {
	t.Helper()
	l := netlab.New(t, netlab.Options{Client: new(bool)})
	for _, n := range l.Nodes {
		if config == nil {
			l.StartVipd(n, opts)
		} else {
			l.StartVipdConfig(n, config(l, n))
		}
	}
	vip := l.DefaultVIPs()[0]
	holder, err := l.WaitSteady(vip, settle)
	if err != nil {
		t.Fatal(err)
	}
	return l, vip, holder
}

// memberState is name's state in st, "absent" when st does not list it.
func memberState(st netlab.Status, name string) string {
	if m, ok := st.Member(name); ok {
		return m.State
	}
	return "absent"
}

// stop sends SIGTERM to h's vipd and waits for a clean exit.
func stop(t *testing.T, l *netlab.Lab, h *netlab.Host) {
	t.Helper()
	if err := l.StopVipd(h, syscall.SIGTERM, stopTimeout); err != nil {
		t.Fatalf("stop vipd on %s: %v", h.Name, err)
	}
	if err := l.Vipd(h).ExitErr(); err != nil {
		t.Errorf("vipd on %s exit after SIGTERM: %v, want 0", h.Name, err)
	}
}

// config renders h's netlab configuration with opts and applies edits, each
// a regular expression and its replacement, failing the test when one does
// not match (so an edit cannot silently do nothing).
func config(t *testing.T, l *netlab.Lab, h *netlab.Host, o netlab.VipdOptions, edits ...string) string {
	t.Helper()
	cfg := l.VipdConfig(h, o)
	for i := 0; i+1 < len(edits); i += 2 {
		re := regexp.MustCompile(edits[i])
		if !re.MatchString(cfg) {
			t.Fatalf("config edit %q does not match the configuration of %s:\n%s", edits[i], h.Name, cfg)
		}
		cfg = re.ReplaceAllString(cfg, edits[i+1])
	}
	return cfg
}

// logOf returns h's vipd log so far.
func logOf(t *testing.T, h *netlab.Host) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.Dir, "vipd.log"))
	if err != nil {
		t.Fatalf("read vipd log of %s: %v", h.Name, err)
	}
	return string(b)
}

// logBetween returns the lines of h's log stamped between from and to
// (slog's time=...Z) that contain any of words.
func logBetween(t *testing.T, h *netlab.Host, from, to time.Time, words ...string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(logOf(t, h), "\n") {
		ts, _, ok := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if !ok || !strings.HasPrefix(line, "time=") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || at.Before(from) || at.After(to) {
			continue
		}
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

// readPeerCache reads h's state_dir/peers.json and returns the names in it.
func readPeerCache(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "peers.json"))
	if err != nil {
		return nil, err
	}
	var f struct {
		Version int `json:"version"`
		Peers   []struct {
			Name    string `json:"name"`
			Address string `json:"address"`
		} `json:"peers"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("peers.json: %w: %q", err, b)
	}
	var names []string
	for _, p := range f.Peers {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names, nil
}

// sample is one look at which nodes have the VIP's address.
type sample struct {
	at      time.Time
	holders []string
	err     error
	// dur is how long the sample stands for: until the next sample.
	dur time.Duration
}

// addrReader lists the addresses in every node namespace over netlink
// sockets opened inside them: far cheaper than running ip(8) per node, so
// holders can really be sampled every sampleEvery on a busy 2-core host.
type addrReader struct {
	names   []string
	handles []*netlink.Handle
}

// openAddrReader opens a netlink socket in each node namespace of l; they
// are closed in t.Cleanup.
func openAddrReader(t *testing.T, l *netlab.Lab) *addrReader {
	t.Helper()
	r := &addrReader{}
	for _, n := range l.Nodes {
		ns, err := netns.GetFromName(n.NS)
		if err != nil {
			t.Fatalf("open namespace %s: %v", n.NS, err)
		}
		h, err := netlink.NewHandleAt(ns)
		ns.Close()
		if err != nil {
			t.Fatalf("netlink socket in %s: %v", n.NS, err)
		}
		t.Cleanup(h.Close)
		r.names = append(r.names, n.Name)
		r.handles = append(r.handles, h)
	}
	return r
}

// holders returns the names of the nodes that have addr on any interface.
func (r *addrReader) holders(addr netip.Addr) ([]string, error) {
	var out []string
	for i, h := range r.handles {
		as, err := h.AddrList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", r.names[i], err)
		}
		for _, a := range as {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
				out = append(out, r.names[i])
				break
			}
		}
	}
	return out, nil
}

// sampler records the VIP's holders (addresses on every lab node) every
// sampleEvery, for at most max, so moments a final check would miss are
// counted.
type sampler struct {
	mu      sync.Mutex
	samples []sample
	stopc   chan struct{}
	done    chan struct{}
}

func startSampler(t *testing.T, l *netlab.Lab, vip netlab.VIP, max time.Duration) *sampler {
	t.Helper()
	r := openAddrReader(t, l)
	s := &sampler{stopc: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { s.stop() })
	go func() {
		defer close(s.done)
		deadline := time.Now().Add(max)
		for time.Now().Before(deadline) {
			at := time.Now()
			hs, err := r.holders(vip.Address)
			s.mu.Lock()
			s.samples = append(s.samples, sample{at: at, holders: hs, err: err})
			s.mu.Unlock()
			select {
			case <-s.stopc:
				return
			case <-time.After(sampleEvery):
			}
		}
	}()
	return s
}

// stop ends sampling and returns every sample.
func (s *sampler) stop() []sample {
	select {
	case <-s.stopc:
	default:
		close(s.stopc)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := append([]sample(nil), s.samples...)
	for i := range ss {
		ss[i].dur = sampleEvery
		if i+1 < len(ss) {
			ss[i].dur = ss[i+1].at.Sub(ss[i].at)
		}
	}
	return ss
}

// window is a time range [from, to).
type window struct {
	label    string
	from, to time.Time
}

func (w window) contains(t time.Time) bool { return !t.Before(w.from) && t.Before(w.to) }

// holderStats summarizes samples: how many saw two or more holders and
// none, the cumulative time each lasted (a sample counts until the next
// one), the longest uninterrupted stretch of two or more holders, and the
// sampling errors.
type holderStats struct {
	samples               int
	multi, none           int
	multiTime, noneTime   time.Duration
	longestMulti          time.Duration
	firstMulti, lastMulti string
	errs                  []string
	span                  time.Duration
	meanInterval          time.Duration
	multiHolders          map[string]int
	// longestFrom and longestTo bound the longest stretch.
	longestFrom, longestTo time.Time
}

func stats(ss []sample) holderStats {
	st := holderStats{samples: len(ss), multiHolders: map[string]int{}}
	if len(ss) > 1 {
		st.span = ss[len(ss)-1].at.Sub(ss[0].at)
		st.meanInterval = st.span / time.Duration(len(ss)-1)
	}
	var run time.Duration
	var runFrom time.Time
	for i, s := range ss {
		d := s.dur
		if i > 0 && ss[i-1].at.Add(ss[i-1].dur).Before(s.at) {
			run = 0 // samples between the two are not in this set
		}
		switch {
		case s.err != nil:
			st.errs = append(st.errs, s.err.Error())
			run = 0
		case len(s.holders) > 1:
			st.multi++
			st.multiTime += d
			if run == 0 {
				runFrom = s.at
			}
			run += d
			if run > st.longestMulti {
				st.longestMulti, st.longestFrom, st.longestTo = run, runFrom, s.at.Add(d)
			}
			desc := fmt.Sprintf("%s %v", s.at.Format("15:04:05.000"), s.holders)
			if st.firstMulti == "" {
				st.firstMulti = desc
			}
			st.lastMulti = desc
			st.multiHolders[strings.Join(s.holders, "+")]++
		case len(s.holders) == 0:
			st.none++
			st.noneTime += d
			run = 0
		default:
			run = 0
		}
	}
	return st
}

func (st holderStats) String() string {
	s := fmt.Sprintf("%d samples over %v (every %v on average): %d with two or more holders (%v cumulative, longest %v), %d with none (%v cumulative)",
		st.samples, st.span.Round(time.Millisecond), st.meanInterval.Round(time.Millisecond), st.multi, st.multiTime.Round(time.Millisecond),
		st.longestMulti.Round(time.Millisecond), st.none, st.noneTime.Round(time.Millisecond))
	if st.multi > 0 {
		s += fmt.Sprintf("; first %s, last %s, by holders %v", st.firstMulti, st.lastMulti, st.multiHolders)
	}
	if len(st.errs) > 0 {
		s += fmt.Sprintf("; %d sampling errors, first: %s", len(st.errs), st.errs[0])
	}
	return s
}

// split returns the samples inside any of ws and the others.
func split(ss []sample, ws []window) (in, out []sample) {
	for _, s := range ss {
		inside := false
		for _, w := range ws {
			inside = inside || w.contains(s.at)
		}
		if inside {
			in = append(in, s)
		} else {
			out = append(out, s)
		}
	}
	return in, out
}

// lineCollector takes a process's stdout and hands out complete lines.
type lineCollector struct {
	mu    sync.Mutex
	buf   []byte
	lines []string
}

func (c *lineCollector) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = append(c.buf, b...)
	for {
		i := strings.IndexByte(string(c.buf), '\n')
		if i < 0 {
			return len(b), nil
		}
		c.lines = append(c.lines, string(c.buf[:i]))
		c.buf = c.buf[i+1:]
	}
}

func (c *lineCollector) Lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

// metricsPort is api.metrics_address's port inside every node namespace.
const metricsPort = 9470

// scrape fetches h's /metrics from inside its namespace.
func scrape(l *netlab.Lab, h *netlab.Host) (string, error) {
	return l.Exec(h, "curl", "-sS", "--max-time", "2", fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
}

// metric returns the sum of the samples of name whose labels include every
// label in want ("k=v"), and whether there was any.
func metric(text, name string, want ...string) (float64, bool) {
	sum, found := 0.0, false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		// The value is the last field: label values may contain spaces.
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		series, value := line[:i], line[i+1:]
		mname, labels, _ := strings.Cut(series, "{")
		if mname != name {
			continue
		}
		labels = strings.TrimSuffix(labels, "}")
		match := true
		for _, w := range want {
			k, v, _ := strings.Cut(w, "=")
			match = match && strings.Contains(","+labels+",", ","+k+"="+strconv.Quote(v)+",")
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		sum, found = sum+f, true
	}
	return sum, found
}
