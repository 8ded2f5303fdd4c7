package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/apipb"
)

// Drain scripts rely on these exit codes (docs/drain.md, docs/operations.md).
func TestFailExitCodes(t *testing.T) {
	tests := []struct {
		code codes.Code
		want int
		says string
	}{
		{codes.FailedPrecondition, exitRefused, "refusing"},
		{codes.DeadlineExceeded, exitTimeout, "timed out"},
		{codes.Unavailable, exitUnavailable, "cannot reach vipd"},
		{codes.PermissionDenied, exitDenied, "refused for uid"},
		{codes.Internal, exitError, "boom"},
	}
	for _, tt := range tests {
		var stderr bytes.Buffer
		msg := map[codes.Code]string{codes.FailedPrecondition: "refusing to withdraw", codes.DeadlineExceeded: "timed out", codes.PermissionDenied: "withdraw refused for uid 1000", codes.Internal: "boom"}[tt.code]
		got := fail(&stderr, "/run/vipd/vipd.sock", "withdraw", status.Error(tt.code, msg))
		if got != tt.want || !strings.Contains(stderr.String(), tt.says) {
			t.Errorf("%v: exit %d (%q), want %d mentioning %q", tt.code, got, stderr.String(), tt.want, tt.says)
		}
	}
}

func TestUnreachableSocket(t *testing.T) {
	var stdout, stderr bytes.Buffer
	sock := filepath.Join(t.TempDir(), "none.sock")
	if got := run([]string{"--socket", sock, "status"}, &stdout, &stderr); got != exitUnavailable {
		t.Errorf("status on a missing socket: exit %d, want %d (%s)", got, exitUnavailable, stderr.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"frobnicate"}, {"status", "extra"}, {"withdraw", "--timeout", "soon"}} {
		var stdout, stderr bytes.Buffer
		if got := run(args, &stdout, &stderr); got != exitUsage {
			t.Errorf("vipctl %v: exit %d, want %d", args, got, exitUsage)
		}
	}
}

// TestStatusJSONStable pins the field names of `vipctl status --json`:
// scripts parse them; changing one is a breaking change.
func TestStatusJSONStable(t *testing.T) {
	st := &apipb.StatusResponse{
		Node: "cp-1", Version: "v1", Quorum: true, Healthy: true,
		Members:  []*apipb.MemberStatus{{Name: "cp-1", Address: "192.0.2.11:7946", State: "alive", Healthy: true, Self: true}},
		Vips:     []*apipb.VIPStatus{{Name: "apiserver", Address: "192.0.2.10", Mode: "l2", Owner: "cp-1", Held: true, Holders: []string{"cp-1"}, Healthy: true, Reason: "r"}},
		BgpPeers: []*apipb.BGPPeerStatus{{Address: "192.0.2.1", Asn: 64512, State: "established", UptimeSeconds: 5, Received: 0, Advertised: 1}},
	}
	b, err := json.Marshal(st.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"node":"cp-1","version":"v1","withdrawn":false,"healthy":true,"quorum":true,` +
		`"members":[{"name":"cp-1","address":"192.0.2.11:7946","state":"alive","withdrawn":false,"healthy":true,"self":true}],` +
		`"vips":[{"name":"apiserver","address":"192.0.2.10","mode":"l2","owner":"cp-1","held":true,"holders":["cp-1"],"healthy":true,"reason":"r"}],` +
		`"bgp_peers":[{"address":"192.0.2.1","asn":64512,"state":"established","uptime_seconds":5,"received":0,"advertised":1}]}`
	if string(b) != want {
		t.Errorf("status JSON changed:\n got %s\nwant %s", b, want)
	}
	// Empty lists are [] not null.
	b, _ = json.Marshal((&apipb.StatusResponse{Node: "x"}).ToJSON())
	if !strings.Contains(string(b), `"members":[]`) || !strings.Contains(string(b), `"bgp_peers":[]`) {
		t.Errorf("empty lists not [] in %s", b)
	}
}
