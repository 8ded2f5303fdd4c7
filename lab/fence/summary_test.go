package fence

import (
	"strings"
	"testing"
	"time"
)

// These tests need no root: they check the fence-proof summary's
// rendering and how a direction's section replaces its earlier one.

func TestUpsertSection(t *testing.T) {
	doc := upsertSection("", "symmetric", "S1\n")
	if !strings.HasPrefix(doc, summaryHeader) || !strings.Contains(doc, "<!-- section symmetric -->\nS1\n<!-- end symmetric -->\n") {
		t.Fatalf("new document:\n%s", doc)
	}
	doc = upsertSection(doc, "in-only", "I1\n")
	doc = upsertSection(doc, "symmetric", "S2\n")
	if strings.Contains(doc, "S1") || !strings.Contains(doc, "S2") || !strings.Contains(doc, "I1") {
		t.Fatalf("replacing symmetric lost or kept the wrong section:\n%s", doc)
	}
	if strings.Index(doc, "S2") > strings.Index(doc, "I1") {
		t.Errorf("a replaced section moved:\n%s", doc)
	}
	if n := strings.Count(doc, "<!-- section symmetric -->"); n != 1 {
		t.Errorf("%d symmetric sections, want 1:\n%s", n, doc)
	}
	if n := strings.Count(doc, "# Fence proof"); n != 1 {
		t.Errorf("%d headers, want 1", n)
	}
}

func TestSummarySection(t *testing.T) {
	d := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	rs := []cutRun{
		{run: 1, owner: "n1", to: "n2", gap: d(180), release: d(310), claim: d(450), samplesCut: 990, samplesHeal: 700, maxStep: d(14)},
		{run: 2, owner: "n2", to: "n3", gap: d(240), release: d(300), claim: d(520), twoHeal: 2, samplesCut: 985, samplesHeal: 690, maxStep: d(12)},
		{run: 3, owner: "n3", gap: d(700), release: -1, claim: -1, samplesCut: 980, samplesHeal: 650, maxStep: d(11)},
	}
	s := summarySection(cutVariants[1], rs, 10*time.Second, "vipd 1.0", true, time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC))
	for _, want := range []string{
		"## in-only: only the owner's incoming",
		"2026-01-02 03:04 UTC, vipd 1.0, 3 runs, cut 10s.",
		"| 1 | n1 | n2 | 180 ms | 310 ms | 450 ms | 0 / 0 | 990 / 700 | 14 ms |",
		"| 3 | n3 | - | 700 ms | never | never | 0 / 0 | 980 / 650 | 11 ms |",
		"Client gap median 240 ms, longest 700 ms; samples with two holders: 2. Result: FAILED.",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
}

func TestMedian(t *testing.T) {
	d := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
	}{{nil, 0}, {[]time.Duration{d(5)}, d(5)}, {[]time.Duration{d(30), d(10), d(20)}, d(20)}, {[]time.Duration{d(40), d(10), d(20), d(30)}, d(25)}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestCounter(t *testing.T) {
	s := "pattern=udd served=12 failed=8"
	if got := counter(s, "failed"); got != 8 {
		t.Errorf("failed = %d, want 8", got)
	}
	if got := counter(s, "served"); got != 12 {
		t.Errorf("served = %d, want 12", got)
	}
	if got := counter(s, "pattern"); got != -1 {
		t.Errorf("pattern (not a number) = %d, want -1", got)
	}
	if got := counter(s, "missing"); got != -1 {
		t.Errorf("missing = %d, want -1", got)
	}
}
