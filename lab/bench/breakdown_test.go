package bench

import (
	"testing"
	"time"
)

func TestBreakdown(t *testing.T) {
	ev := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	logs := map[string]string{
		// The old owner's own ownership change does not count, nor lines
		// before the event.
		"n1": `time=2026-11-23T11:59:59.900Z level=INFO msg="ownership change" node=n1 vip=apiserver from=n1 to=n2 reason="x"
time=2026-11-23T12:00:00.050Z level=INFO msg="ownership change" node=n1 vip=apiserver from=n1 to=n2 reason="x"
`,
		"n2": `time=2026-11-23T11:59:59.950Z level=INFO msg="holding VIP" node=n2 vip=apiserver
time=2026-11-23T12:00:00.310Z level=INFO msg="ownership change" node=n2 vip=apiserver from=n1 to=n2 reason="highest ranked eligible node"
time=2026-11-23T12:00:00.312Z level=INFO msg="holding VIP" node=n2 vip=apiserver address=192.0.2.10 mode=l2 reason="highest ranked eligible node"
`,
		"n3": `time=2026-11-23T12:00:00.305Z level=INFO msg="ownership change" node=n3 vip=apiserver from=n1 to=n2 reason="highest ranked eligible node"
time=2026-11-23T12:00:00.400Z level=INFO msg="holding VIP" node=n3 vip=apiserver
not a log line
`,
	}
	elected, holding := breakdown(logs, "n1", "n2", ev)
	if elected != 305*time.Millisecond || holding != 312*time.Millisecond {
		t.Errorf("elected %v holding %v, want 305ms and 312ms", elected, holding)
	}
	if e, h := breakdown(logs, "n1", "", ev); e != 305*time.Millisecond || h != 0 {
		t.Errorf("without a new owner: elected %v holding %v, want 305ms and 0", e, h)
	}
}
