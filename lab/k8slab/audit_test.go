package k8slab

import (
	"maps"
	"os"
	"strings"
	"testing"
	"time"
)

// TestLongestOutsideTheApiserver: a request's time in the apiserver (its
// attempts' audit entries) is not the VIP's; the rest is.
func TestLongestOutsideTheApiserver(t *testing.T) {
	recs := synth{dur: 1000, watches: []string{"w"}}.records()
	recs = append(recs,
		// etcd's request timeout: 7 s, all but 3 ms of it in the apiserver.
		Record{Kind: "write", Seq: 100, T: t0 + 100_000, D: 7_003_000, E: "etcdserver: request timed out", A: []string{"slow"}},
		// A get reset with the lost holder, sent again by client-go a
		// second later: 1.3 s, 2 ms of it in the apiserver.
		Record{Kind: "req", C: "long", T: t0 + 200_000, D: 1_300_000, A: []string{"retried"}},
		// A fresh client's SYN sent again: 1.1 s, its answer's audit entry
		// not found (counted outside).
		Record{Kind: "req", C: "fresh", T: t0 + 300_000, D: 1_100_000, A: []string{"missing"}},
	)
	r := NewRun(recs)
	r.Audit = map[string]time.Duration{"slow": 7 * time.Second, "retried": 2 * time.Millisecond}
	st := r.Stats(ms(0), ms(10_000))
	if st.LongestRequest != 7_003*time.Millisecond {
		t.Errorf("LongestRequest = %v, want 7.003s", st.LongestRequest)
	}
	if st.LongestOutside != 1_298*time.Millisecond || !strings.HasPrefix(st.OutsideRequest, "long at ") {
		t.Errorf("LongestOutside = %v (%s), want 1.298s of the long client's get", st.LongestOutside, st.OutsideRequest)
	}
	if st.AuditMissing != 1 {
		t.Errorf("AuditMissing = %d, want 1", st.AuditMissing)
	}
	// Without the audit logs every request's time is outside.
	r.Audit = nil
	if st := r.Stats(ms(0), ms(10_000)); st.LongestOutside != 7_003*time.Millisecond {
		t.Errorf("without audit: LongestOutside = %v, want 7.003s", st.LongestOutside)
	}
}

// TestBaselineLeavesOutRequestsInFlight: a request that started before
// the event and failed after it is the event's, not the baseline's.
func TestBaselineLeavesOutRequestsInFlight(t *testing.T) {
	recs := synth{dur: 3000, watches: []string{"w"}}.records()
	recs = append(recs, Record{Kind: "write", Seq: 500, T: t0 + 1_999_900, D: 370_000, E: "read: connection reset by peer"})
	r := NewRun(recs)
	ev := ms(2000)
	if st := r.EndedBy(ev).Stats(ev.Add(-baseline), ev); st.Failed != 0 {
		t.Errorf("baseline: %d failed (%s), want 0: the request failed after the event", st.Failed, st.FirstError)
	}
	if st := r.Stats(ev, ms(3000)); st.Failed != 1 {
		t.Errorf("after the event: %d failed, want 1", st.Failed)
	}
}

// TestParseAudit reads what kube-apiserver v1.37.2 wrote in this lab with
// auditPolicy (testdata/audit.log: a create answered with etcd's request
// timeout, a get, a Lease update), and a torn last line.
func TestParseAudit(t *testing.T) {
	b, err := os.ReadFile("testdata/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]time.Duration{}
	if err := ParseAudit(strings.NewReader(string(b)+`{"kind":"Event","auditID":"torn`), got); err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{
		"9a54dc43-3e41-41c0-9704-15f60fd95970": 7_005_196 * time.Microsecond,
		"441cb386-0424-4d86-9516-c3ff74a96bcb": 10_561 * time.Microsecond,
		"2b2267c6-d0dd-437b-bf10-19871eb5aff8": 21_860 * time.Microsecond,
	}
	if !maps.Equal(got, want) {
		t.Errorf("ParseAudit = %v, want %v", got, want)
	}
}
