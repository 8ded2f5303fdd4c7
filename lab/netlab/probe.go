package netlab

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Probe is one result of the lab prober (lab/netlab/cmd/probe), which
// prints one line per probe: "UNIX_MS ok SERVER" or "UNIX_MS fail - DETAIL".
type Probe struct {
	// Start is when the probe started (millisecond resolution).
	Start time.Time
	// OK: TCP connect and an HTTP 200 answer within the timeout.
	OK bool
	// Server is the body's first word: the node that answered.
	Server string
	// Detail is the rest of the line (latency or error).
	Detail string
}

// ParseProbe parses one prober output line.
func ParseProbe(line string) (Probe, error) {
	f := strings.SplitN(strings.TrimSpace(line), " ", 4)
	if len(f) < 3 {
		return Probe{}, fmt.Errorf("probe line %q: want UNIX_MS ok|fail SERVER [DETAIL]", line)
	}
	ms, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return Probe{}, fmt.Errorf("probe line %q: %w", line, err)
	}
	p := Probe{Start: time.UnixMilli(ms), Server: f[2]}
	switch f[1] {
	case "ok":
		p.OK = true
	case "fail":
		p.Server = ""
	default:
		return Probe{}, fmt.Errorf("probe line %q: want ok or fail, got %q", line, f[1])
	}
	if len(f) == 4 {
		p.Detail = f[3]
	}
	return p, nil
}

// ParseProbes reads prober output and returns the probes sorted by start
// time (the prober prints them as they finish, so slightly out of order).
func ParseProbes(r io.Reader) ([]Probe, error) {
	var ps []Probe
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		p, err := ParseProbe(sc.Text())
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	sortProbes(ps)
	return ps, sc.Err()
}

func sortProbes(ps []Probe) {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Start.Before(ps[j].Start) })
}

// Event is something a test or script did while probing, e.g. "withdraw n1".
type Event struct {
	Time  time.Time
	Label string
}

// ParseEvents reads lines "UNIX_MS LABEL..." (the demo's events file).
func ParseEvents(r io.Reader) ([]Event, error) {
	var es []Event
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		ms, label, _ := strings.Cut(line, " ")
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("event line %q: %w", line, err)
		}
		es = append(es, Event{time.UnixMilli(n), label})
	}
	sort.SliceStable(es, func(i, j int) bool { return es[i].Time.Before(es[j].Time) })
	return es, sc.Err()
}

// Gap is what the client saw after one event, up to the next event.
type Gap struct {
	Event Event
	// Probes and Failed count the probes in the window.
	Probes, Failed int
	// Before is the node that served the last successful probe before
	// the event ("" when none did).
	Before string
	// After is the first other node that served a probe after the event
	// ("" when the VIP did not move).
	After string
	// ToNewNode is the time from the event to the first probe served by
	// After (valid when After is set).
	ToNewNode time.Duration
	// LongestRun is the longest run of consecutive failed probes.
	LongestRun int
	// Outage is that run's duration: from its first probe to the next
	// successful one (or to the window's end plus one interval when no
	// probe succeeded after it).
	Outage time.Duration
	// Recovered: the window's last probe succeeded.
	Recovered bool
}

// Analyze splits probes (sorted by start) into one window per event, from
// the event to the next one, and measures each. interval is the probe
// interval.
func Analyze(probes []Probe, events []Event, interval time.Duration) []Gap {
	gaps := make([]Gap, 0, len(events))
	for i, e := range events {
		end := time.Time{}
		if i+1 < len(events) {
			end = events[i+1].Time
		}
		g := Gap{Event: e}
		var window []Probe
		for _, p := range probes {
			switch {
			case p.Start.Before(e.Time):
				if p.OK {
					g.Before = p.Server
				}
			case end.IsZero() || p.Start.Before(end):
				window = append(window, p)
			}
		}
		g.Probes = len(window)
		g.LongestRun, g.Outage = longestFailure(window, interval)
		for _, p := range window {
			if !p.OK {
				g.Failed++
				continue
			}
			if g.After == "" && p.Server != g.Before {
				g.After, g.ToNewNode = p.Server, p.Start.Sub(e.Time)
			}
		}
		g.Recovered = len(window) > 0 && window[len(window)-1].OK
		gaps = append(gaps, g)
	}
	return gaps
}

// LongestFailure returns the longest run of failed probes in probes
// (sorted by start) and its duration, as in Gap.Outage.
func LongestFailure(probes []Probe, interval time.Duration) (int, time.Duration) {
	return longestFailure(probes, interval)
}

func longestFailure(probes []Probe, interval time.Duration) (int, time.Duration) {
	best, bestDur := 0, time.Duration(0)
	run, start := 0, time.Time{}
	for i, p := range probes {
		if !p.OK {
			if run == 0 {
				start = p.Start
			}
			run++
			if i == len(probes)-1 {
				if d := p.Start.Add(interval).Sub(start); d > bestDur {
					best, bestDur = run, d
				}
			}
			continue
		}
		if run > 0 {
			if d := p.Start.Sub(start); d > bestDur {
				best, bestDur = run, d
			}
		}
		run = 0
	}
	return best, bestDur
}

// FormatTimeline writes one line per gap, times relative to the first
// event.
func FormatTimeline(w io.Writer, gaps []Gap) {
	if len(gaps) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	t0 := gaps[0].Event.Time
	for _, g := range gaps {
		moved := "VIP stayed on " + orDash(g.Before)
		if g.After != "" {
			moved = fmt.Sprintf("%s -> %s after %v", orDash(g.Before), g.After, g.ToNewNode.Round(time.Millisecond))
		}
		rec := ""
		if !g.Recovered {
			rec = " NOT RECOVERED by the next event"
		}
		fmt.Fprintf(w, "+%7.3fs  %-22s %s; longest gap %v (%d failed in a row; %d of %d probes failed)%s\n",
			g.Event.Time.Sub(t0).Seconds(), g.Event.Label, moved, g.Outage.Round(time.Millisecond),
			g.LongestRun, g.Failed, g.Probes, rec)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ProbeOptions shape a Prober.
type ProbeOptions struct {
	// Target is the VIP and port probed. [VIP4:HTTPPort]
	Target netip.AddrPort
	// Interval between probe starts. [20ms]
	Interval time.Duration
	// Timeout of one probe (connect + HTTP answer). [200ms]
	Timeout time.Duration
	// Duration bounds the whole run. [60s]
	Duration time.Duration
	// Hold sends every probe on one held keep-alive connection, as a
	// kubelet's watch (a new one after it breaks): a reset shows as a
	// failed probe. [a new connection per probe]
	Hold bool
}

// Prober runs the lab prober in the client namespace and collects its
// results as they arrive.
type Prober struct {
	*Proc
	// Options as applied.
	Options ProbeOptions

	mu     sync.Mutex
	probes []Probe
	events []Event
	bad    []string
	buf    bytes.Buffer
	log    io.Writer
}

// StartProber starts probing from the client namespace. It is stopped at
// teardown if still running.
func (l *Lab) StartProber(o ProbeOptions) *Prober {
	l.t.Helper()
	if l.Client == nil {
		l.t.Fatal("netlab: StartProber needs the client namespace")
	}
	if !o.Target.IsValid() {
		o.Target = netip.AddrPortFrom(VIP4, HTTPPort)
	}
	if o.Interval == 0 {
		o.Interval = 20 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = 200 * time.Millisecond
	}
	if o.Duration == 0 {
		o.Duration = 60 * time.Second
	}
	f, err := os.OpenFile(filepath.Join(l.Client.Dir, "probes.txt"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		l.t.Fatalf("netlab: %v", err)
	}
	pr := &Prober{Options: o, log: f}
	argv := []string{l.Tools.Probe, "-target", o.Target.String(), "-interval", o.Interval.String(), "-timeout", o.Timeout.String(),
		"-duration", o.Duration.String()}
	if o.Hold {
		argv = append(argv, "-hold")
	}
	p, err := l.Start(l.Client, "probe", filepath.Join(l.Client.Dir, "probe.log"), pr, argv...)
	if err != nil {
		f.Close()
		l.t.Fatalf("netlab: %v", err)
	}
	p.closers = append(p.closers, f)
	pr.Proc = p
	return pr
}

// Write takes the prober's stdout.
func (pr *Prober) Write(b []byte) (int, error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.log.Write(b)
	pr.buf.Write(b)
	for {
		line, err := pr.buf.ReadString('\n')
		if err != nil {
			pr.buf.Reset()
			pr.buf.WriteString(line)
			return len(b), nil
		}
		p, perr := ParseProbe(line)
		if perr != nil {
			pr.bad = append(pr.bad, perr.Error())
			continue
		}
		pr.probes = append(pr.probes, p)
	}
}

// Mark records an event now and returns it.
func (pr *Prober) Mark(label string) Event {
	e := Event{time.Now(), label}
	pr.mu.Lock()
	pr.events = append(pr.events, e)
	pr.mu.Unlock()
	return e
}

// Probes returns the results so far, sorted by start.
func (pr *Prober) Probes() []Probe {
	pr.mu.Lock()
	ps := append([]Probe(nil), pr.probes...)
	pr.mu.Unlock()
	sortProbes(ps)
	return ps
}

// Stop ends the prober (it finishes probes in flight) and returns every
// result.
func (pr *Prober) Stop() []Probe {
	if err := pr.Proc.Stop(syscall.SIGTERM, pr.Options.Timeout+5*time.Second); err != nil {
		pr.mu.Lock()
		pr.bad = append(pr.bad, err.Error())
		pr.mu.Unlock()
	}
	return pr.Probes()
}

// Problems returns unparsable output lines and stop errors, if any.
func (pr *Prober) Problems() []string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return append([]string(nil), pr.bad...)
}

// Gaps analyzes the results so far against the marked events.
func (pr *Prober) Gaps() []Gap {
	pr.mu.Lock()
	es := append([]Event(nil), pr.events...)
	pr.mu.Unlock()
	return Analyze(pr.Probes(), es, pr.Options.Interval)
}

// WaitServedBy waits up to timeout until n probes in a row that started
// after since were answered by node name. It returns an error with a
// summary of the recent probes when that does not happen.
func (pr *Prober) WaitServedBy(name string, n int, since time.Time, timeout time.Duration) error {
	var last string
	ok, _ := Eventually(timeout, 20*time.Millisecond, func() (bool, string) {
		run := 0
		var tail []Probe
		for _, p := range pr.Probes() {
			if p.Start.Before(since) {
				continue
			}
			tail = append(tail, p)
			if p.OK && p.Server == name {
				run++
				if run >= n {
					return true, ""
				}
			} else {
				run = 0
			}
		}
		last = summarize(tail)
		return false, ""
	})
	if !ok {
		if !pr.Running() {
			last += fmt.Sprintf(" (prober exited: %v)", pr.ExitErr())
		}
		return fmt.Errorf("want %d probes in a row served by %s within %v, saw %s", n, name, timeout, last)
	}
	return nil
}

// summarize counts probes per result: "n1:40 fail:12 n2:3 (55 probes)".
func summarize(ps []Probe) string {
	var parts []string
	cur, cnt := "", 0
	flush := func() {
		if cnt > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", cur, cnt))
		}
	}
	for _, p := range ps {
		k := "fail"
		if p.OK {
			k = p.Server
		}
		if k != cur {
			flush()
			cur, cnt = k, 0
		}
		cnt++
	}
	flush()
	if len(parts) > 20 {
		parts = append([]string{"..."}, parts[len(parts)-20:]...)
	}
	return fmt.Sprintf("%s (%d probes)", strings.Join(parts, " "), len(ps))
}

// WithdrawAndFollow runs `vipctl withdraw` on owner, marked on pr as
// "withdraw OWNER", waits up to timeout for vip to move to another node,
// then up to 5 s (Scaled) for pr to be served by it 25 times, then stops pr. It returns the new
// holder and what the client saw from the withdraw on (pr.Gaps()[0]).
func (l *Lab) WithdrawAndFollow(pr *Prober, owner *Host, vip VIP, timeout time.Duration) (string, Gap, error) {
	ev := pr.Mark("withdraw " + owner.Name)
	if out, err := l.Vipctl(owner, "withdraw"); err != nil {
		return "", Gap{}, fmt.Errorf("vipctl withdraw on %s: %w: %s", owner.Name, err, out)
	}
	next, err := l.WaitMoved(vip, owner.Name, timeout)
	if err != nil {
		return "", Gap{}, fmt.Errorf("after withdraw: want %s to leave %s: %w", vip.Address, owner.Name, err)
	}
	// 5 s on a real machine (0.1 s is usual), scaled with the machine: in
	// lab/vm's emulated one the first answer from the new holder comes
	// 2-7 s after the withdraw.
	if err := pr.WaitServedBy(next, 25, ev.Time, Scaled(5*time.Second)); err != nil {
		return next, Gap{}, fmt.Errorf("after withdraw: %w", err)
	}
	pr.Stop()
	return next, pr.Gaps()[0], nil
}
