package netlab

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// HolderSample is one look at which nodes have an address.
type HolderSample struct {
	// At is when the sample was taken (after reading every node).
	At time.Time
	// Holders are the names of the nodes that had the address, in node
	// order.
	Holders []string
	// Errs are the nodes that could not be read for this sample, and why
	// (Holders then leaves them out).
	Errs []string
}

// HolderRecorder samples, through netlink sockets opened inside every node
// namespace (no process per sample, so a 20 ms interval is honest), which
// nodes have an address on any of their interfaces (so an interface deleted
// and created again, with a new index, is still seen). Unlike HolderWatch it keeps every sample, so a test
// can count samples with no holder, one, or several, and see when a change
// happened.
type HolderRecorder struct {
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	samples []HolderSample
	errs    []string
}

// RecordHolders samples addr's holders among the lab's nodes every interval
// until Stop, or until max passes. Failures to open the namespaces stop the
// test.
func (l *Lab) RecordHolders(addr netip.Addr, interval, max time.Duration) *HolderRecorder {
	l.t.Helper()
	var nodes []HolderNode
	for _, n := range l.Nodes {
		nodes = append(nodes, HolderNode{Name: n.Name, NS: n.NS})
	}
	return RecordHoldersIn(l.t, nodes, addr, interval, max)
}

// HolderNode is a node RecordHoldersIn samples: its name in the samples and
// its network namespace.
type HolderNode struct {
	Name string
	NS   string
}

// RecordHoldersIn is RecordHolders for namespaces of any lab (such as
// lab/bgplab's, whose nodes bind a BGP VIP on lo): it samples which of
// nodes have addr on any interface every interval until Stop, or until max
// passes. Failures to open the namespaces stop the test.
func RecordHoldersIn(t testing.TB, nodes []HolderNode, addr netip.Addr, interval, max time.Duration) *HolderRecorder {
	t.Helper()
	type handle struct {
		name string
		h    *netlink.Handle
	}
	var hs []handle
	closeAll := func() {
		for _, n := range hs {
			n.h.Close()
		}
	}
	for _, n := range nodes {
		nsh, err := netns.GetFromName(n.NS)
		if err != nil {
			closeAll()
			t.Fatalf("netlab: open namespace %s: %v", n.NS, err)
		}
		h, err := netlink.NewHandleAt(nsh)
		nsh.Close()
		if err != nil {
			closeAll()
			t.Fatalf("netlab: netlink socket in %s: %v", n.NS, err)
		}
		hs = append(hs, handle{n.Name, h})
	}
	r := &HolderRecorder{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer closeAll()
		deadline := time.Now().Add(max)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for time.Now().Before(deadline) {
			var s HolderSample
			var errs []string
			for _, n := range hs {
				addrs, err := n.h.AddrList(nil, netlink.FAMILY_ALL)
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v", n.name, err))
					continue
				}
				for _, a := range addrs {
					if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
						s.Holders = append(s.Holders, n.name)
						break
					}
				}
			}
			s.At, s.Errs = time.Now(), errs
			r.mu.Lock()
			r.samples = append(r.samples, s)
			r.errs = append(r.errs, errs...)
			r.mu.Unlock()
			select {
			case <-r.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return r
}

// Samples returns the samples taken so far.
func (r *HolderRecorder) Samples() HolderSamples {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(HolderSamples(nil), r.samples...)
}

// Stop ends the sampling and returns every sample and the sampling errors.
func (r *HolderRecorder) Stop() (HolderSamples, []string) {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(HolderSamples(nil), r.samples...), append([]string(nil), r.errs...)
}

// HolderSamples is a series of HolderSample, oldest first.
type HolderSamples []HolderSample

// Between returns the samples taken in [from, to); a zero to means no end.
func (ss HolderSamples) Between(from, to time.Time) HolderSamples {
	var out HolderSamples
	for _, s := range ss {
		if !s.At.Before(from) && (to.IsZero() || s.At.Before(to)) {
			out = append(out, s)
		}
	}
	return out
}

// Where returns the samples for which keep is true.
func (ss HolderSamples) Where(keep func(HolderSample) bool) HolderSamples {
	var out HolderSamples
	for _, s := range ss {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// First returns the first sample for which match is true.
func (ss HolderSamples) First(match func(HolderSample) bool) (HolderSample, bool) {
	for _, s := range ss {
		if match(s) {
			return s, true
		}
	}
	return HolderSample{}, false
}

// Count returns how many samples saw exactly n holders.
func (ss HolderSamples) Count(n int) int {
	c := 0
	for _, s := range ss {
		if len(s.Holders) == n {
			c++
		}
	}
	return c
}

// Has reports whether node name holds the address in s.
func (s HolderSample) Has(name string) bool {
	for _, h := range s.Holders {
		if h == name {
			return true
		}
	}
	return false
}

// Summary describes the series compactly: how many samples saw each set of
// holders, in order of first appearance ("[n1]:40 []:3 [n2]:80 (123
// samples over 2.46s)").
func (ss HolderSamples) Summary() string {
	if len(ss) == 0 {
		return "no samples"
	}
	counts := map[string]int{}
	var order []string
	for _, s := range ss {
		k := "[" + strings.Join(s.Holders, " ") + "]"
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	parts := make([]string, 0, len(order))
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%s:%d", k, counts[k]))
	}
	return fmt.Sprintf("%s (%d samples over %v)", strings.Join(parts, " "), len(ss),
		ss[len(ss)-1].At.Sub(ss[0].At).Round(time.Millisecond))
}

// Transitions lists the changes of holder set ("15:04:05.000 [n1] -> [n1
// n2]"), for failure messages and logs.
func (ss HolderSamples) Transitions() []string {
	var out []string
	prev := ""
	for i, s := range ss {
		k := "[" + strings.Join(s.Holders, " ") + "]"
		if i > 0 && k != prev {
			out = append(out, fmt.Sprintf("%s %s -> %s", s.At.Format("15:04:05.000"), prev, k))
		}
		prev = k
	}
	return out
}
