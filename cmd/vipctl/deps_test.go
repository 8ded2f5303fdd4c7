package main

import (
	"testing"

	"github.com/vipd/vipd/internal/deptest"
)

// TestDeps: vipctl speaks to vipd over its local API only. It links the
// API's generated code (agent/apipb) and its own commands, no daemon code
// and none of the daemon's libraries: a drain hook runs it on a node whose
// vipd may be broken, and it must not change when the daemon does.
func TestDeps(t *testing.T) {
	deptest.DepChecker{
		BadDeps: map[string]string{
			"github.com/vipd/vipd/...":         "vipctl links no daemon code; it talks to vipd over the API",
			"github.com/hashicorp/memberlist":  "membership is the daemon's",
			"github.com/osrg/gobgp/v4/...":     "BGP is the daemon's",
			"github.com/vishvananda/netlink":   "the network is the daemon's",
			"github.com/coreos/go-systemd/...": "systemd notifications are the daemon's",
			"k8s.io/...":                       "the Node watch (nodewatch) is the daemon's",
			"sigs.k8s.io/...":                  "the Node watch (nodewatch) is the daemon's",
			"gopkg.in/yaml.v3":                 "kubeconfig parsing (nodewatch) is the daemon's",
		},
		AllowDeps: []string{"github.com/vipd/vipd/agent/apipb", "github.com/vipd/vipd/cmd/vipctl/..."},
	}.Check(t)
}
