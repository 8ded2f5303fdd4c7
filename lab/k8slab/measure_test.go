package k8slab

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// synth builds a run: the writer creates an object every 100 ms from 0 to
// dur (ms), each answered after 2 ms unless failing(t) says it fails; each
// informer delivers an object 5 ms after it exists, unless blind(w, t)
// says the informer is blind at that moment, in which case it delivers
// the object when its blindness ends (endOfBlind(w)) or never (-1).
type synth struct {
	dur        int64
	watches    []string
	failing    func(ms int64) bool
	blind      func(w string, ms int64) bool
	endOfBlind func(w string) int64
	extra      []Record
}

const t0 = int64(1_000_000_000_000_000) // µs

func (s synth) records() []Record {
	recs := []Record{{Kind: "ready", T: t0 - 1000}}
	for _, w := range s.watches {
		recs = append(recs, Record{Kind: "list", W: w, T: t0 - 2000})
	}
	seq := 0
	for ms := int64(0); ms < s.dur; ms += 100 {
		seq++
		at := t0 + ms*1000
		if s.failing != nil && s.failing(ms) {
			recs = append(recs, Record{Kind: "write", Seq: seq, T: at, D: 10_000_000, E: "context deadline exceeded"})
			continue
		}
		recs = append(recs, Record{Kind: "write", Seq: seq, T: at, D: 2000})
		for _, w := range s.watches {
			d := ms + 2 + 5
			if s.blind != nil && s.blind(w, d) {
				d = s.endOfBlind(w)
				if d < 0 {
					continue
				}
			}
			recs = append(recs, Record{Kind: "ev", W: w, Seq: seq, T: t0 + d*1000})
		}
	}
	recs = append(recs, s.extra...)
	recs = append(recs, Record{Kind: "end", T: t0 + s.dur*1000})
	return recs
}

func ms(n int64) time.Time { return us(t0 + n*1000) }

func near(got, want, tol time.Duration) bool { return got >= want-tol && got <= want+tol }

func TestRunStats(t *testing.T) {
	ws := []string{"sep-0", "n1-0", "n1-1"}
	for _, tc := range []struct {
		name  string
		s     synth
		from  int64
		check func(t *testing.T, st ClientStats)
	}{
		{
			name: "steady: nothing failed, watches a few ms behind",
			s:    synth{dur: 5000, watches: ws},
			from: 1000,
			check: func(t *testing.T, st ClientStats) {
				if st.Failed != 0 || st.Relists != 0 || len(st.NotBack) != 0 {
					t.Errorf("stats %+v", st)
				}
				if !near(st.Stall, 5*time.Millisecond, time.Millisecond) {
					t.Errorf("stall %v, want the 5 ms from the create's answer to the delivery", st.Stall)
				}
				if st.Back != 0 || st.Stalled != 0 {
					t.Errorf("back %v, %d stalled: no informer was ever behind", st.Back, st.Stalled)
				}
				if st.Delivering != 7*time.Millisecond || len(st.NotDelivering) != 0 {
					t.Errorf("delivering %v %v, want 7ms: the create at 1000 ms delivered 7 ms later", st.Delivering, st.NotDelivering)
				}
				if st.Watches != 3 || st.Requests != 40 {
					t.Errorf("watches %d requests %d, want 3 and 40", st.Watches, st.Requests)
				}
			},
		},
		{
			name: "one informer blind for 3 s catches up at once",
			s: synth{dur: 8000, watches: ws,
				blind:      func(w string, ms int64) bool { return w == "n1-1" && ms >= 2000 && ms < 5000 },
				endOfBlind: func(string) int64 { return 5000 },
				extra:      []Record{{Kind: "werr", W: "n1-1", T: t0 + 4_900_000, E: "EOF"}, {Kind: "list", W: "n1-1", T: t0 + 4_950_000}}},
			from: 1550,
			check: func(t *testing.T, st ClientStats) {
				// Pending from the object that existed at 2002 ms to the
				// catch-up at 5000 ms.
				if !near(st.Stall, 2998*time.Millisecond, 2*time.Millisecond) || st.StallWatch != "n1-1" {
					t.Errorf("stall %v on %s, want 2998ms on n1-1", st.Stall, st.StallWatch)
				}
				if st.Relists != 1 || st.WatchErrors != 1 || st.Failed != 0 {
					t.Errorf("stats %+v", st)
				}
				// Back with the catch-up at 5000 ms.
				if st.Back != 3450*time.Millisecond || st.Stalled != 1 {
					t.Errorf("back %v, %d stalled, want 3450ms and 1", st.Back, st.Stalled)
				}
			},
		},
		{
			name: "one informer blind from the event on for 3 s: delivering again after 3 s",
			s: synth{dur: 8000, watches: ws,
				blind:      func(w string, ms int64) bool { return w == "n1-1" && ms >= 2000 && ms < 5000 },
				endOfBlind: func(string) int64 { return 5000 }},
			from: 2000,
			check: func(t *testing.T, st ClientStats) {
				if st.Delivering != 3000*time.Millisecond || len(st.NotDelivering) != 0 {
					t.Errorf("delivering %v %v, want 3s (n1-1's first delivery after the event)", st.Delivering, st.NotDelivering)
				}
			},
		},
		{
			name: "the writer fails for 2 s: failed requests, no stall",
			s: synth{dur: 6000, watches: ws,
				failing: func(ms int64) bool { return ms >= 2000 && ms < 4000 }},
			from: 1950,
			check: func(t *testing.T, st ClientStats) {
				if st.Failed != 20 || st.FailedBy["write"] != 20 || !strings.Contains(st.FirstError, "deadline") {
					t.Errorf("failed %d %v %q, want 20 writes", st.Failed, st.FailedBy, st.FirstError)
				}
				if st.LongestRequest != 10*time.Second {
					t.Errorf("longest request %v", st.LongestRequest)
				}
				if st.Stall > 10*time.Millisecond {
					t.Errorf("stall %v: nothing existed to deliver", st.Stall)
				}
				// The first create after the event that succeeded started
				// at 4000 ms and was delivered at 4007 ms.
				if st.Delivering != 2057*time.Millisecond {
					t.Errorf("delivering %v, want 2057ms (the writer's recovery counts)", st.Delivering)
				}
				// Nothing was ever late: the watches did not fail.
				if st.Back != 0 || st.Stalled != 0 {
					t.Errorf("back %v, %d stalled", st.Back, st.Stalled)
				}
			},
		},
		{
			name: "an informer that never comes back",
			s: synth{dur: 5000, watches: ws,
				blind:      func(w string, ms int64) bool { return w == "sep-0" && ms >= 1000 },
				endOfBlind: func(string) int64 { return -1 }},
			from: 1500,
			check: func(t *testing.T, st ClientStats) {
				if !slices.Equal(st.NotBack, []string{"sep-0"}) || st.Back != 3500*time.Millisecond {
					t.Errorf("not back %v, back %v, want [sep-0] and the rest of the run", st.NotBack, st.Back)
				}
				// Blind since before the window: the whole window.
				if st.Stall != 3500*time.Millisecond || st.StallWatch != "sep-0" {
					t.Errorf("stall %v on %s, want to the end of the run", st.Stall, st.StallWatch)
				}
				if !slices.Equal(st.NotDelivering, []string{"sep-0"}) || st.Delivering != 3500*time.Millisecond {
					t.Errorf("not delivering %v, delivering %v, want [sep-0] and the rest of the run", st.NotDelivering, st.Delivering)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRun(tc.s.records())
			tc.check(t, r.Stats(ms(tc.from), time.Time{}))
		})
	}
}

func TestStale(t *testing.T) {
	// sep-0 is blind from 1 s on; the writer fails from 3 s on.
	s := synth{dur: 5000, watches: []string{"sep-0", "n1-0"},
		failing:    func(ms int64) bool { return ms >= 3000 },
		blind:      func(w string, ms int64) bool { return w == "sep-0" && ms >= 1000 },
		endOfBlind: func(string) int64 { return -1 }}
	r := NewRun(s.records())
	if got := r.Stale(ms(1000), ms(2000)); !slices.Equal(got, []string{"sep-0"}) {
		t.Errorf("Stale(1s, 2s) = %v, want [sep-0]", got)
	}
	// Nothing was created after 3 s: no informer shows it follows.
	if got := r.Stale(ms(3000), ms(5000)); !slices.Equal(got, []string{"n1-0", "sep-0"}) {
		t.Errorf("Stale(3s, 5s) = %v, want both", got)
	}
}

func TestParseRecords(t *testing.T) {
	in := `{"k":"ready","t":5}
{"k":"write","s":1,"t":10,"d":3,"e":""}
{"k":"ev","w":"sep-0","s":1,"t":14}
{"k":"wri`
	recs, err := ParseRecords(strings.NewReader(in))
	if err != nil {
		t.Fatalf("a torn last line must be ignored: %v", err)
	}
	if len(recs) != 3 || recs[2].W != "sep-0" || recs[1].D != 3 {
		t.Errorf("records %+v", recs)
	}
	if _, err := ParseRecords(strings.NewReader("garbage\n{\"k\":\"end\",\"t\":1}\n")); err == nil {
		t.Error("a bad line before the end must be an error")
	}
}

// TestWriteResetsAndCheckPlanned: Stats counts the writes (creates, lease
// renewals) that failed with a connection reset apart, and checkPlanned
// lets a planned move have no failed request, not even one write reset at
// the switch.
func TestWriteResetsAndCheckPlanned(t *testing.T) {
	const reset = `Post "https://192.0.2.10:6443/api/v1/namespaces/vipd-lab/configmaps": write tcp 192.0.2.100:38132->192.0.2.10:6443: write: connection reset by peer`
	recs := []Record{
		{Kind: "ready", T: 0},
		{Kind: "write", T: 1000, D: 5000, Seq: 1, E: reset},
		{Kind: "req", T: 2000, D: 5000, C: "lease", E: reset},
		{Kind: "req", T: 3000, D: 5000, C: "long", E: reset},
		{Kind: "write", T: 4000, D: 5000, Seq: 2, E: "context deadline exceeded"},
		{Kind: "write", T: 5000, D: 5000, Seq: 3},
		{Kind: "end", T: 100000},
	}
	st := NewRun(recs).Stats(us(0), time.Time{})
	if st.Failed != 4 || st.WriteResets != 2 {
		t.Fatalf("failed %d, write resets %d (%v), want 4 and 2 (a read's reset and a timeout are not)", st.Failed, st.WriteResets, st.FailedBy)
	}
	if msg := checkPlanned(st); !strings.Contains(msg, "4 requests failed") || !strings.Contains(msg, "2 of them writes reset") {
		t.Errorf("checkPlanned = %q", msg)
	}
	if msg := checkPlanned(ClientStats{Failed: 1, WriteResets: 1}); msg == "" {
		t.Error("checkPlanned accepts a write reset at the switch")
	}
	if msg := checkPlanned(ClientStats{Failed: 2, WriteResets: 2}); msg == "" {
		t.Error("checkPlanned accepts two write resets")
	}
	if msg := checkPlanned(ClientStats{Failed: 1}); msg == "" {
		t.Error("checkPlanned accepts a failed read")
	}
	if msg := checkPlanned(ClientStats{Requests: 60}); msg != "" {
		t.Errorf("checkPlanned(no failure) = %q", msg)
	}
}
