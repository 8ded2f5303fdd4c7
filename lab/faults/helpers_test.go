package faults

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

const (
	// sampleEvery is the holder sampling interval.
	sampleEvery = 20 * time.Millisecond
)

// spec is the faults labs' cluster: 3 nodes, no client namespace, and
// vipd on every node with the configuration config returns for it (nil:
// netlab's default).
func spec(config func(l *netlab.Lab, h *netlab.Host) string) netlab.Spec {
	return netlab.Spec{Options: netlab.Options{Client: new(bool)}, Config: config}
}

// memberState is name's state in st, "absent" when st does not list it.
func memberState(st netlab.Status, name string) string {
	if m, ok := st.Member(name); ok {
		return m.State
	}
	return "absent"
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

// sampler records the VIP's holders (addresses on every lab node) every
// sampleEvery, for at most max, so moments a final check would miss are
// counted: a netlab.HolderRecorder, its samples in the form stats reads.
type sampler struct {
	r *netlab.HolderRecorder
}

func startSampler(t *testing.T, l *netlab.Lab, vip netlab.VIP, max time.Duration) *sampler {
	t.Helper()
	s := &sampler{r: l.RecordHolders(vip.Address, sampleEvery, max)}
	t.Cleanup(func() { s.stop() })
	return s
}

// stop ends sampling and returns every sample, each standing until the
// next one.
func (s *sampler) stop() []sample {
	hs, _ := s.r.Stop()
	ss := make([]sample, len(hs))
	for i, h := range hs {
		ss[i] = sample{at: h.At, holders: h.Holders, dur: sampleEvery}
		if len(h.Errs) > 0 {
			ss[i].err = errors.New(strings.Join(h.Errs, "; "))
		}
		if i+1 < len(hs) {
			ss[i].dur = hs[i+1].At.Sub(h.At)
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
