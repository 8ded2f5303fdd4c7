package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/internal/testkit"
)

// FuzzDecodeMeta: garbage metadata from a peer is rejected, never a panic;
// what decodes (any version) re-encodes to metadata that decodes to the same
// NodeMeta, every field and every VIP's flags, and that canonical form
// re-encodes to the same bytes.
func FuzzDecodeMeta(f *testing.F) {
	good, _ := NodeMeta{Valid: true, Withdrawn: true, VIPs: map[uint32]VIPMeta{1: {Healthy: true}, 7: {Held: true}}}.Encode()
	f.Add(good)
	all, _ := NodeMeta{Valid: true, Leaving: true, Fenced: true, Removed: true, NodeWithdrawn: true, VIPs: map[uint32]VIPMeta{2: {Down: true}, 9: {Healthy: true, Held: true}}}.Encode()
	f.Add(all)
	restarting, _ := NodeMeta{Valid: true, RestartAware: true, RestartGrace: 3 * time.Second, VIPs: map[uint32]VIPMeta{4: {Held: true}}}.Encode()
	f.Add(restarting)
	f.Add([]byte{})
	f.Add([]byte{1, 0})
	f.Add([]byte{1, 3, 0, 0, 0, 1, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			if m.Valid {
				t.Fatalf("invalid metadata marked valid")
			}
			return
		}
		// Duplicate keys collapse, so compare a canonical re-encoding.
		again, err := m.Encode()
		if err != nil && len(b) <= metaMaxSize {
			t.Fatalf("re-encode: %v", err)
		}
		if err == nil {
			m2, err := DecodeMeta(again)
			if err != nil || !reflect.DeepEqual(m2, m) {
				t.Fatalf("round trip changed metadata: %+v -> %+v (%v)", m, m2, err)
			}
			if third, err := m2.Encode(); err != nil || !bytes.Equal(third, again) {
				t.Fatalf("canonical form %x re-encodes to %x (%v)", again, third, err)
			}
		}
	})
}

// FuzzAPIHandlers feeds arbitrary protobuf bytes to every request handler
// of a running single-node agent (fake network). Handlers must answer with
// a response or a gRPC error of a documented kind, never panic or hang, and
// the answer must match the agent's state: a withdraw that succeeded shows
// in status as withdrawn (and persisted, the state_dir being writable), a
// restore shows as not withdrawn.
func FuzzAPIHandlers(f *testing.F) {
	seed := func(m proto.Message) []byte { b, _ := proto.Marshal(m); return b }
	f.Add(uint8(0), seed(&apipb.StatusRequest{}))
	f.Add(uint8(1), seed(&apipb.WithdrawRequest{Wait: true, TimeoutMs: 50}))
	f.Add(uint8(1), seed(&apipb.WithdrawRequest{Force: true, TimeoutMs: -5}))
	f.Add(uint8(1), seed(&apipb.WithdrawRequest{NoPersist: true}))
	f.Add(uint8(2), seed(&apipb.RestoreRequest{}))
	f.Add(uint8(1), []byte{0x08, 0x01, 0x10, 0xff, 0xff, 0xff, 0xff, 0x0f})
	s := startFuzzAgent(f)
	withdrawn := func(t *testing.T, ctx context.Context) bool {
		t.Helper()
		st, err := s.Status(ctx, &apipb.StatusRequest{})
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		return st.Withdrawn
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ctx = rootCaller(ctx)
		switch which % 3 {
		case 0:
			var req apipb.StatusRequest
			if proto.Unmarshal(b, &req) != nil {
				return
			}
			st, err := s.Status(ctx, &req)
			if err != nil {
				t.Fatalf("status: %v", err)
			}
			if st.Node != "solo" || len(st.Vips) != 1 {
				t.Fatalf("status names node %q with %d VIPs, want solo with 1", st.Node, len(st.Vips))
			}
		case 1:
			var req apipb.WithdrawRequest
			if proto.Unmarshal(b, &req) != nil {
				return
			}
			// Bound the wait the fuzzer can ask for.
			if req.TimeoutMs > 200 || req.TimeoutMs < 0 {
				req.TimeoutMs = 200
			}
			resp, err := s.Withdraw(ctx, &req)
			switch code := status.Code(err); {
			case err == nil:
				if !resp.Persisted || !withdrawn(t, ctx) {
					t.Fatalf("withdraw answered %v but status withdrawn=%v", resp, withdrawn(t, ctx))
				}
			case code == codes.FailedPrecondition || code == codes.DeadlineExceeded:
				// The only node has no one to hand over to.
			default:
				t.Fatalf("withdraw: unexpected error %v", err)
			}
			if _, err := s.Restore(ctx, &apipb.RestoreRequest{}); err != nil {
				t.Fatalf("restore after withdraw: %v", err)
			}
			if withdrawn(t, ctx) {
				t.Fatalf("still withdrawn after restore")
			}
		case 2:
			var req apipb.RestoreRequest
			if proto.Unmarshal(b, &req) != nil {
				return
			}
			if _, err := s.Restore(ctx, &req); err != nil {
				t.Fatalf("restore: %v", err)
			}
			if withdrawn(t, ctx) {
				t.Fatalf("withdrawn after restore")
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("handler did not answer within 5s")
		}
	})
}

// startFuzzAgent starts one agent for a fuzz target and stops it (Run
// returns) when the target ends.
func startFuzzAgent(f *testing.F) *apiServer {
	dir := f.TempDir()
	text := fmt.Sprintf("node_name = \"solo\"\nstate_dir = %q\n[api]\nsocket = %q\n[cluster]\nbind_address = \"127.0.0.1\"\nbind_port = %d\n[[vip]]\nname = \"apiserver\"\naddress = \"192.0.2.10\"\ninterface = \"fake0\"\n",
		filepath.Join(dir, "state"), filepath.Join(dir, "api.sock"), testkit.FreePort(f))
	cfg, err := config.Parse(filepath.Join(dir, "vipd.toml"), []byte(text))
	if err != nil {
		f.Fatal(err)
	}
	a, err := New(cfg, Options{
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Backends: fakeBackendsFor(newWire(), "solo", false),
		Notify:   func(string) {},
		Tick:     20 * time.Millisecond,
	})
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	f.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.Errorf("Run: %v", err)
		}
	})
	s := &apiServer{a: a, gid: -1}
	deadline := time.Now().Add(10 * time.Second)
	for a.snapshot.Load() == nil {
		if time.Now().After(deadline) {
			f.Fatal("agent published no status within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s
}
