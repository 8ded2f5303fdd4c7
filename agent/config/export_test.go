package config

import (
	"testing"

	"github.com/vipd/vipd/bgp"
	"github.com/vipd/vipd/l2"
)

// The backends' rules and conversions (package backendconfig) for the
// tests of this package, which cannot import backendconfig (it imports
// this package): backend_test.go, in package config_test, sets them
// before any test runs. The tests parse with rules, so every message they
// expect from a backend's rule is the backend's own.
var (
	rules     BackendRules
	toSpeaker func(BGPSpeaker) bgp.Config
	toL2      func(L2Announcer) l2.Config
)

// SetBackends sets rules, toSpeaker and toL2.
func SetBackends(r BackendRules, speaker func(BGPSpeaker) bgp.Config, announcer func(L2Announcer) l2.Config) {
	rules, toSpeaker, toL2 = r, speaker, announcer
}

// TestBackendsSet: the tests run with the backends' rules; without them
// every test that expects a backend's message would fail for a reason
// that is not its own.
func TestBackendsSet(t *testing.T) {
	if rules.BGP == nil || rules.L2RefreshInterval == nil || toSpeaker == nil || toL2 == nil {
		t.Fatal("the backends' rules are not set (backend_test.go)")
	}
}
