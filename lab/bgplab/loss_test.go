package bgplab

import "testing"

// TestPlannedLoss runs without root: the rule the planned steps are held to.
func TestPlannedLoss(t *testing.T) {
	reset := `12:00:00.020 Get "http://203.0.113.10:6443/": read tcp 198.51.100.100:5->203.0.113.10:6443: read: connection reset by peer`
	timeout := `12:00:00.040 Get "http://203.0.113.10:6443/": context deadline exceeded`
	unreachable := `12:00:00.060 dial tcp 203.0.113.10:6443: connect: no route to host`
	for _, tc := range []struct {
		name  string
		fails []string
		bad   bool
	}{
		{"none", nil, false},
		{"one reset", []string{reset}, false},
		{"two resets", []string{reset, reset}, true},
		{"one timeout", []string{timeout}, true},
		{"one unreachable", []string{unreachable}, true},
		{"reset and timeout", []string{reset, timeout}, true},
	} {
		if bad, why := plannedLoss(tc.fails); bad != tc.bad {
			t.Errorf("%s: plannedLoss = %t (%s), want %t", tc.name, bad, why, tc.bad)
		}
	}
}
