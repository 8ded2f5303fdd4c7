package agent

import (
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/internal/backendconfig"
)

// TestReload: SIGHUP with a valid file applies it (a new VIP is elected and
// held; a removed one is released); an invalid file is refused, every
// problem logged at its place, and the running configuration stays; so is
// a file only a backend's rule refuses (Options.ConfigRules), as vipd
// --check refuses it.
func TestReload(t *testing.T) {
	c := newTestCluster(t, "solo")
	c.rules = backendconfig.Rules()
	c.start("solo")
	c.waitHolders(10*time.Second, exactlyOne, "initial")
	path := c.nodes["solo"].cfg.Path
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	second := netip.MustParseAddr("192.0.2.20")
	added := string(orig) + "[[vip]]\nname = \"second\"\naddress = \"192.0.2.20\"\ninterface = \"fake0\"\n"
	if err := os.WriteFile(path, []byte(added), 0o644); err != nil {
		t.Fatal(err)
	}
	c.nodes["solo"].agent.Reload()
	waitFor(t, 5*time.Second, "second VIP held after reload", func() bool { return len(c.w.holdersOf(second)) == 1 })

	// An invalid file: the running configuration (two VIPs) stays.
	bad := strings.Replace(added, `address = "192.0.2.20"`, `address = "192.0.2.300"`, 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	c.nodes["solo"].agent.Reload()
	waitFor(t, 5*time.Second, "invalid file refused", func() bool {
		return c.log.count("reload refused, keeping running configuration", path+":", `invalid address \"192.0.2.300\"`) > 0
	})
	st, err := c.client("solo").Status(t.Context(), &apipb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Vips) != 2 || len(c.w.holdersOf(second)) != 1 {
		t.Fatalf("invalid reload changed the running configuration: %v, holders %v", st.Vips, c.w.holdersOf(second))
	}

	// A refresh the l2 announcers refuse, which the configuration's own
	// rules let through: refused at its key all the same.
	if err := os.WriteFile(path, []byte(added+"[l2]\nrefresh_interval = \"500ms\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.nodes["solo"].agent.Reload()
	waitFor(t, 5*time.Second, "refresh the announcers refuse refused", func() bool {
		return c.log.count("reload refused, keeping running configuration", path+":", "refresh_interval must be 0 (off) or at least 1s") > 0
	})

	// Removing the VIP from the file releases it.
	if err := os.WriteFile(path, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	c.nodes["solo"].agent.Reload()
	waitFor(t, 5*time.Second, "second VIP released after removal", func() bool { return len(c.w.holdersOf(second)) == 0 })
	if h := c.w.holdersOf(c.vip); len(h) != 1 {
		t.Errorf("first VIP holders after reload: %v", h)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ok() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s", what, d)
}
