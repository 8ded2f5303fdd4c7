package agent

import (
	"context"
	"os/user"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

func callerCtx(ctx context.Context, uid, gid uint32) context.Context {
	return peer.NewContext(ctx, &peer.Peer{AuthInfo: peerCred{UID: uid, GID: gid}})
}

func rootCaller(ctx context.Context) context.Context { return callerCtx(ctx, 0, 0) }

func TestAuthorize(t *testing.T) {
	s := &apiServer{gid: 4242}
	tests := []struct {
		name string
		ctx  context.Context
		ok   bool
	}{
		{"root", callerCtx(context.Background(), 0, 0), true},
		{"member of the socket group (primary gid)", callerCtx(context.Background(), 61234, 4242), true},
		{"other user", callerCtx(context.Background(), 61234, 61234), false},
		{"no peer credentials", context.Background(), false},
		{"credentials of another kind", peer.NewContext(context.Background(), &peer.Peer{}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.authorize(tt.ctx, "withdraw")
			if (err == nil) != tt.ok {
				t.Fatalf("authorize = %v, want ok=%v", err, tt.ok)
			}
			if err != nil {
				if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "withdraw") {
					t.Errorf("refusal %v does not say PermissionDenied and what was refused", err)
				}
			}
		})
	}
	// No group configured: only root.
	if err := (&apiServer{gid: -1}).authorize(callerCtx(context.Background(), 61234, 4242), "status"); err == nil {
		t.Errorf("non-root caller allowed without a socket group")
	}
}

func TestSocketGroup(t *testing.T) {
	if gid, err := socketGroup("0"); err != nil || gid != 0 {
		t.Errorf("socketGroup(0) = %d, %v", gid, err)
	}
	if _, err := socketGroup("no-such-group-vipd-test"); err == nil {
		t.Errorf("unknown explicit group accepted")
	}
	g, err := user.LookupGroupId("0")
	if err == nil {
		if gid, err := socketGroup(g.Name); err != nil || strconv.Itoa(gid) != g.Gid {
			t.Errorf("socketGroup(%s) = %d, %v", g.Name, gid, err)
		}
	}
}
