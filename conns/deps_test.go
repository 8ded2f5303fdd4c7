package conns

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps: conns is a leaf of vipd, like l2 and bgp: it never imports the
// agent (or any other vipd package), so the agent can use it and tests can
// run it alone.
func TestDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/vipd/vipd/") && p != "github.com/vipd/vipd/conns" {
			t.Errorf("conns imports %s", p)
		}
	}
}
