package config

import (
	"testing"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/conns"
)

// TestDefaultsAreTheirOwners: the defaults this package writes again,
// because it links neither the API's gRPC code nor conns, are their
// owners' values.
func TestDefaultsAreTheirOwners(t *testing.T) {
	if DefaultSocket != apipb.DefaultSocket {
		t.Errorf("DefaultSocket %q, the API's %q", DefaultSocket, apipb.DefaultSocket)
	}
	if DefaultPokeRate != conns.DefaultPokeRate || DefaultPokeTimeout != conns.DefaultPokeTimeout {
		t.Errorf("poke rate %d timeout %s, conns' %d %s", DefaultPokeRate, DefaultPokeTimeout, conns.DefaultPokeRate, conns.DefaultPokeTimeout)
	}
}
