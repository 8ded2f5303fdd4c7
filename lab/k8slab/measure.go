package k8slab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// LagLimit is how far behind the cluster an informer may be and still count
// as working: an object delivered later than this after it existed is a
// watch that was not (the target: every watch delivering again
// within 1 s).
const LagLimit = time.Second

// Record is one line of the clients tool's output (lab/k8s/cmd/clients
// documents them); times are Unix microseconds.
type Record struct {
	// Kind: ready, write, req, ev, list, watch, werr, end.
	Kind string `json:"k"`
	// T is when it happened (a request's start).
	T int64 `json:"t"`
	// Seq is the writer's object (write, ev).
	Seq int `json:"s,omitempty"`
	// D is a request's duration.
	D int64 `json:"d,omitempty"`
	// E is a request's or a watch's error ("" for success).
	E string `json:"e,omitempty"`
	// W is the informer (ev, list, watch, werr).
	W string `json:"w,omitempty"`
	// C is a request loop: fresh or long.
	C string `json:"c,omitempty"`
	// A is the audit ID a request sent with each of its attempts.
	A []string `json:"a,omitempty"`
}

// ParseRecords reads the clients tool's output. A torn last line (the tool
// was killed) is ignored.
func ParseRecords(r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var bad error
	for sc.Scan() {
		if bad != nil {
			return nil, bad
		}
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			bad = fmt.Errorf("clients record %q: %w", sc.Text(), err)
			continue
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

func us(t int64) time.Time { return time.UnixMicro(t) }

// ClientStats is what the clients saw in a window of a run: from an event
// (a failover) to the end of the run. JSON for the tests and make bench.
type ClientStats struct {
	// Watches is the number of informers.
	Watches int
	// Requests counts the writer's creates and the two request loops'
	// gets that ended in the window; Failed those of them that failed (an
	// error or the tool's per-request bound), by client in FailedBy
	// (write, fresh, long).
	Requests, Failed int
	FailedBy         map[string]int `json:",omitempty"`
	// WriteResets counts the failed writes (the writer's creates, the
	// lease renewals, the controller's creates) whose error was a connection reset: a write on a
	// connection as it was closed under it, which client-go does not send
	// again (a read it does send again).
	WriteResets int `json:",omitempty"`
	// FirstError is the first failed request's error.
	FirstError string `json:",omitempty"`
	// LongestRequest is the slowest of those requests.
	LongestRequest time.Duration
	// LongestOutside is the longest time one of those requests spent
	// outside the apiserver: its duration less the apiserver's time on
	// its attempts (Run.Audit; audit.go). What a failover costs a client,
	// without the apiserver's own slowness. OutsideRequest describes that
	// request; AuditMissing counts the requests whose audit ID is not in
	// Run.Audit (no apiserver logged an attempt: all their time counts as
	// outside).
	LongestOutside time.Duration
	OutsideRequest string `json:",omitempty"`
	AuditMissing   int    `json:",omitempty"`
	// Stall is the longest time any informer delivered no event while an
	// object it had not delivered yet existed (the writer's create had
	// returned, or another informer had seen it): a watch blind to the
	// cluster. StallWatch is that informer.
	Stall      time.Duration
	StallWatch string `json:",omitempty"`
	// Stalled counts the informers whose stall was over LagLimit; Stalls
	// has their stalls.
	Stalled int
	Stalls  map[string]time.Duration `json:",omitempty"`
	// Back is from the event until every informer was back to delivering
	// each object within LagLimit of its existence, for good: the last
	// delivery that came later than that (0 when none did). NotBack
	// names the informers still behind by more than LagLimit at the end
	// of the window (Back is then the whole window).
	Back    time.Duration
	NotBack []string `json:",omitempty"`
	// Delivering is from the event until every informer had delivered an
	// object whose create started after the event: each watch delivering
	// events again (the VIP's move, the writer's recovery and the watch's
	// own all in it). NotDelivering names the informers that delivered
	// none such in the window (Delivering is then the whole window).
	Delivering    time.Duration
	NotDelivering []string `json:",omitempty"`
	// Relists counts the informers' lists (and watch-lists) in the
	// window; WatchErrors their watches that ended with an error.
	Relists, WatchErrors int
}

// Run is a parsed clients run.
type Run struct {
	// Ready is when every informer had synced; End when the tool ended
	// (its last record when it did not say).
	Ready, End time.Time

	writes   map[int]Record // by seq
	requests []Record       // write and req records
	// exists is when each object was known to exist: its create's
	// answer, or the first informer to deliver it.
	exists     map[int]time.Time
	deliveries map[string]map[int]time.Time // informer -> seq -> first delivery
	lists      []Record
	werrs      []Record

	// Audit is the apiserver's time on each answer, by audit ID (the
	// apiservers' audit logs, ControlPlane.Audit); without it every
	// request's time counts as outside the apiserver.
	Audit map[string]time.Duration
}

// NewRun indexes a run's records.
func NewRun(recs []Record) *Run {
	r := &Run{writes: map[int]Record{}, exists: map[int]time.Time{}, deliveries: map[string]map[int]time.Time{}}
	var last int64
	for _, rec := range recs {
		last = max(last, rec.T+rec.D)
		switch rec.Kind {
		case "ready":
			r.Ready = us(rec.T)
		case "end":
			r.End = us(rec.T)
		case "write":
			r.writes[rec.Seq] = rec
			r.requests = append(r.requests, rec)
			if rec.E == "" {
				r.known(rec.Seq, us(rec.T+rec.D))
			}
		case "req":
			r.requests = append(r.requests, rec)
		case "ev":
			d := r.deliveries[rec.W]
			if d == nil {
				d = map[int]time.Time{}
				r.deliveries[rec.W] = d
			}
			if _, ok := d[rec.Seq]; !ok {
				d[rec.Seq] = us(rec.T)
			}
			r.known(rec.Seq, us(rec.T))
		case "list":
			r.lists = append(r.lists, rec)
			if r.deliveries[rec.W] == nil {
				r.deliveries[rec.W] = map[int]time.Time{}
			}
		case "werr":
			r.werrs = append(r.werrs, rec)
		}
	}
	if r.End.IsZero() && last > 0 {
		r.End = us(last)
	}
	return r
}

// EndedBy returns r without the requests that had not ended by t.
func (r *Run) EndedBy(t time.Time) *Run {
	return r.WithRequests(func(_, end time.Time) bool { return end.Before(t) })
}

// WithRequests returns r with only the requests keep takes (given their
// start and end).
func (r *Run) WithRequests(keep func(start, end time.Time) bool) *Run {
	c := *r
	c.requests = nil
	for _, rec := range r.requests {
		if keep(us(rec.T), us(rec.T+rec.D)) {
			c.requests = append(c.requests, rec)
		}
	}
	return &c
}

func (r *Run) known(seq int, at time.Time) {
	if t, ok := r.exists[seq]; !ok || at.Before(t) {
		r.exists[seq] = at
	}
}

// Watches returns the informers' names, sorted.
func (r *Run) Watches() []string {
	var ws []string
	for w := range r.deliveries {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	return ws
}

// Stats measures the window [from, to) (zero to: the run's end).
func (r *Run) Stats(from, to time.Time) ClientStats {
	if to.IsZero() {
		to = r.End
	}
	s := ClientStats{Watches: len(r.deliveries), FailedBy: map[string]int{}}
	for _, rec := range r.requests {
		start, end := us(rec.T), us(rec.T+rec.D)
		if end.Before(from) || !start.Before(to) {
			continue
		}
		s.Requests++
		s.LongestRequest = max(s.LongestRequest, end.Sub(start))
		outside := end.Sub(start)
		var inside time.Duration
		for _, id := range rec.A {
			d, ok := r.Audit[id]
			if !ok {
				s.AuditMissing++
			}
			inside += d
		}
		outside -= inside
		if outside > s.LongestOutside {
			who := rec.C
			if rec.Kind == "write" {
				who = "write"
			}
			s.LongestOutside = outside
			s.OutsideRequest = fmt.Sprintf("%s at %s: %v, %v of it in the apiserver", who, start.UTC().Format("15:04:05.000"),
				end.Sub(start).Round(time.Millisecond), inside.Round(time.Millisecond))
			if rec.E != "" {
				s.OutsideRequest += ": " + rec.E
			}
		}
		if rec.E != "" {
			s.Failed++
			who := rec.C
			if rec.Kind == "write" {
				who = "write"
			}
			s.FailedBy[who]++
			if (who == "write" || who == "lease" || who == "controller") && strings.Contains(rec.E, "connection reset by peer") {
				s.WriteResets++
			}
			if s.FirstError == "" {
				s.FirstError = rec.E
			}
		}
	}
	if len(s.FailedBy) == 0 {
		s.FailedBy = nil
	}
	for _, rec := range r.lists {
		if t := us(rec.T); !t.Before(from) && t.Before(to) {
			s.Relists++
		}
	}
	for _, rec := range r.werrs {
		if t := us(rec.T); !t.Before(from) && t.Before(to) {
			s.WatchErrors++
		}
	}
	for _, w := range r.Watches() {
		st := r.stall(w, from, to)
		if st > s.Stall {
			s.Stall, s.StallWatch = st, w
		}
		if st > LagLimit {
			s.Stalled++
			if s.Stalls == nil {
				s.Stalls = map[string]time.Duration{}
			}
			s.Stalls[w] = st
		}
		back, ok := r.back(w, from, to)
		if !ok {
			s.NotBack = append(s.NotBack, w)
		}
		s.Back = max(s.Back, back)
		if d, ok := r.delivering(w, from, to); ok {
			s.Delivering = max(s.Delivering, d)
		} else {
			s.NotDelivering = append(s.NotDelivering, w)
			s.Delivering = to.Sub(from)
		}
	}
	return s
}

// delivering is from from until w's first delivery, before to, of an
// object whose create started at or after from; false when there was none.
func (r *Run) delivering(w string, from, to time.Time) (time.Duration, bool) {
	var first time.Time
	for seq, d := range r.deliveries[w] {
		wr, ok := r.writes[seq]
		if !ok || us(wr.T).Before(from) || !d.Before(to) {
			continue
		}
		if first.IsZero() || d.Before(first) {
			first = d
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return first.Sub(from), true
}

// stall is watch w's longest silence within [from, to) while an object it
// had not delivered existed: for each pair of its consecutive deliveries
// (the window's ends standing in before the first and after the last), the
// time from the later of the earlier delivery and the oldest object
// pending after it, to the next delivery.
func (r *Run) stall(w string, from, to time.Time) time.Duration {
	type obj struct{ exists, delivered time.Time } // delivered zero: never
	dl := r.deliveries[w]
	var objs []obj
	for seq, e := range r.exists {
		if e.After(to) {
			continue
		}
		objs = append(objs, obj{e, dl[seq]})
	}
	never := to.Add(time.Hour)
	at := func(o obj) time.Time {
		if o.delivered.IsZero() {
			return never
		}
		return o.delivered
	}
	sort.Slice(objs, func(i, j int) bool { return at(objs[i]).Before(at(objs[j])) })
	// minExists[i] is the oldest existence among objs[i:].
	minExists := make([]time.Time, len(objs)+1)
	minExists[len(objs)] = never
	for i := len(objs) - 1; i >= 0; i-- {
		minExists[i] = minExists[i+1]
		if objs[i].exists.Before(minExists[i]) {
			minExists[i] = objs[i].exists
		}
	}
	var times []time.Time
	for _, o := range objs {
		if !o.delivered.IsZero() {
			times = append(times, o.delivered)
		}
	}
	times = append(times, to)
	var longest time.Duration
	prev := time.Time{}
	for _, next := range times {
		// Objects not delivered by prev: the first index with a delivery
		// after prev.
		i := sort.Search(len(objs), func(i int) bool { return at(objs[i]).After(prev) })
		oldest := minExists[i]
		start := oldest
		if prev.After(start) {
			start = prev
		}
		if start.Before(from) {
			start = from
		}
		end := next
		if end.After(to) {
			end = to
		}
		if end.After(start) && !oldest.After(next) {
			longest = max(longest, end.Sub(start))
		}
		prev = next
	}
	return longest
}

// Stale returns the informers that delivered no object whose create
// started at or after since, before to: they have not shown that they
// follow the cluster since then (nor has the writer, if none did).
func (r *Run) Stale(since, to time.Time) []string {
	var out []string
	for _, w := range r.Watches() {
		fresh := false
		for seq, d := range r.deliveries[w] {
			if wr, ok := r.writes[seq]; ok && !us(wr.T).Before(since) && d.Before(to) {
				fresh = true
				break
			}
		}
		if !fresh {
			out = append(out, w)
		}
	}
	return out
}

// back is from from until w's last delivery within [from, to) that came
// more than LagLimit after its object existed (0 without one); false, and
// to - from, when an object that existed before to - LagLimit was still
// not delivered at to.
func (r *Run) back(w string, from, to time.Time) (time.Duration, bool) {
	dl := r.deliveries[w]
	var last time.Time
	for seq, e := range r.exists {
		d, ok := dl[seq]
		if !ok || !d.Before(to) {
			if e.Before(to.Add(-LagLimit)) {
				return to.Sub(from), false
			}
			continue
		}
		if d.Before(from) || d.Sub(e) <= LagLimit {
			continue
		}
		if d.After(last) {
			last = d
		}
	}
	if last.IsZero() {
		return 0, true
	}
	return last.Sub(from), true
}
