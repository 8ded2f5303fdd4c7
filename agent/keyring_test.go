package agent

import (
	"bytes"
	"encoding/base64"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/internal/testkit"
)

// TestClusterEncryption: a node with the wrong key stays out; keys rotate
// across a running cluster with SIGHUP (Reload) without a split.
func TestClusterEncryption(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	k1, k2 := testkit.NewKey(t), testkit.NewKey(t)
	keyPath := func(n string) string { return filepath.Join(c.dir, n+".key") }
	for _, n := range []string{"a", "b"} {
		testkit.WriteKeyFile(t, keyPath(n), k1)
		c.nodes[n].cfg = c.config(n, "key_file = \""+keyPath(n)+"\"")
	}
	testkit.WriteKeyFile(t, keyPath("c"), k2) // wrong key
	c.nodes["c"].cfg = c.config("c", "key_file = \""+keyPath("c")+"\"")
	for _, n := range []string{"a", "b", "c"} {
		c.start(n)
	}
	c.waitMember("a", "b", StateAlive)
	c.waitMember("b", "a", StateAlive)
	// c keeps trying (rejoin every second) and never gets in: wait until it
	// has tried twice.
	waitFor(t, 10*time.Second, "c tried to rejoin twice", func() bool {
		return testutil.ToFloat64(c.nodes["c"].agent.metrics.rejoinAttempts) >= 2
	})
	for _, n := range []string{"a", "b"} {
		st, err := c.client(n).Status(t.Context(), &apipb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range st.Members {
			if m.Name == "c" {
				t.Fatalf("%s lists c (wrong key) as a member: %v", n, m)
			}
		}
	}
	// Rotate a and b to k2: install, use, remove; they stay together.
	for _, keys := range [][]string{{k1, k2}, {k2, k1}, {k2}} {
		for _, n := range []string{"a", "b"} {
			testkit.WriteKeyFile(t, keyPath(n), keys...)
			c.nodes[n].agent.Reload()
		}
		for _, n := range []string{"a", "b"} {
			kr := c.nodes[n].agent.keyring
			waitFor(t, 5*time.Second, n+" rotated its keys", func() bool {
				primary, _ := base64.StdEncoding.DecodeString(keys[0])
				return len(kr.GetKeys()) == len(keys) && bytes.Equal(kr.GetPrimaryKey(), primary)
			})
		}
		c.waitMember("a", "b", StateAlive)
	}
	// Now c's key is the cluster's: its rejoin gets it in.
	c.waitMember("a", "c", StateAlive)
	c.waitMember("c", "b", StateAlive)
	c.waitHolders(10*time.Second, exactlyOne, "after rotation")
}
