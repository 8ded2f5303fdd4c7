package agent

import (
	"testing"

	"github.com/vipd/vipd/internal/deptest"
)

// TestDeps turns the layering into a test: the backends (l2, bgp, bfd) and
// the agent's own packages never import the agent, the lease and conns
// import nothing of vipd's, the lifecycle nothing but the lease, and
// the agent reaches the backends only through the
// Announcer interface (cmd/vipd builds them, and brings their rules to
// agent/config, which links none of them, directly or through another
// package).
func TestDeps(t *testing.T) {
	backend := map[string]string{"github.com/vipd/vipd/agent/...": "a backend knows nothing of the agent: the agent calls it through Announcer"}
	part := map[string]string{"github.com/vipd/vipd/agent": "a part of the agent with its own API: the agent uses it, not the other way round"}
	// The configuration is a leaf: it reads the file and places problems,
	// and cmd/vipd brings the backends' rules (config.BackendRules), so
	// reading a file links no announcer (nor GoBGP, netlink, nftables).
	cfg := map[string]string{
		"github.com/vipd/vipd/agent":       part["github.com/vipd/vipd/agent"],
		"github.com/vipd/vipd/bgp/...":     "the configuration is a leaf: cmd/vipd converts the [bgp] section for the speaker and brings its rules (config.BackendRules)",
		"github.com/vipd/vipd/l2/...":      "the configuration is a leaf: cmd/vipd converts a VIP for its announcer and brings the l2 rules (config.BackendRules)",
		"github.com/vipd/vipd/bfd/...":     "the configuration is a leaf: BFD comes with the BGP speaker",
		"github.com/osrg/gobgp/...":        "the configuration is a leaf: GoBGP comes with the BGP speaker",
		"github.com/vipd/vipd/agent/apipb": "the configuration is a leaf: the API's gRPC code is the agent's and vipctl's (apipb.DefaultSocket is written again, and tested equal)",
		"google.golang.org/grpc/...":       "the configuration is a leaf: gRPC is the API's",
		"github.com/vipd/vipd/conns":       "the configuration is a leaf: conns' sockets are the agent's (its defaults are written again, and tested equal)",
	}
	bottom := map[string]string{"github.com/vipd/vipd/...": "the lease is the safety argument: it stands on nothing else of vipd's, so it can be read alone"}
	leaf := map[string]string{"github.com/vipd/vipd/...": "conns (the clients' connections) is a leaf: the agent uses it, and it is tested alone"}
	for pkg, bad := range map[string]map[string]string{"../l2": backend, "../bgp": backend, "../bfd": backend, "../conns": leaf, "./config": cfg, "./membership": part, "./lease": bottom} {
		t.Run(pkg, func(t *testing.T) {
			deptest.DepChecker{Pkg: pkg, BadDeps: bad}.Check(t)
		})
	}
	// The lifecycle decides; the agent executes: it stands on nothing of
	// vipd's but the lease, so it can be read, tested and simulated alone.
	t.Run("./lifecycle", func(t *testing.T) {
		deptest.DepChecker{Pkg: "./lifecycle", BadDeps: map[string]string{
			"github.com/vipd/vipd/...": "the lifecycle is pure: the agent gathers its inputs and executes its effects",
		}, AllowDeps: []string{"github.com/vipd/vipd/agent/lease"}}.Check(t)
	})
	t.Run("agent", func(t *testing.T) {
		deptest.DepChecker{BadImports: map[string]string{
			"github.com/vipd/vipd/l2":  "the agent announces through Announcer; cmd/vipd builds the l2 announcers",
			"github.com/vipd/vipd/bgp": "the agent announces through Announcer; cmd/vipd builds the BGP speaker",
		}}.Check(t)
	})
}
