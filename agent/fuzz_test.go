package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/vipd/vipd/agent/apipb"
)

// FuzzParse: any input gives a config or a *ConfigError; never a panic, and
// every problem names the file.
func FuzzParse(f *testing.F) {
	f.Add([]byte(goodConfig))
	if b, err := os.ReadFile("../vipd.toml.example"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("[cluster]\nbind_address = \"192.0.2.300\"\n[[vip]]\nname=\"a\"\n[[vip]]\nname=\"a\"\n"))
	f.Add([]byte("[bgp]\nasn = 0\n[[bgp.peer]]\naddress = \"x\"\nhold_time = \"1s\"\n"))
	f.Add([]byte("a = \"\"\"\n[[x]]\n\"\"\"\nb = [\n1,\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.toml", data)
		if err == nil {
			if c == nil || len(c.VIPs) == 0 {
				t.Fatalf("Parse accepted a config without VIPs")
			}
			return
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if !strings.HasPrefix(line, "fuzz.toml") {
				t.Fatalf("problem without file name: %q", line)
			}
		}
	})
}

// FuzzDecodeMeta: garbage metadata from a peer is rejected, never a panic;
// what decodes re-encodes to the same bytes.
func FuzzDecodeMeta(f *testing.F) {
	good, _ := NodeMeta{Valid: true, Withdrawn: true, VIPs: map[uint32]VIPMeta{1: {Healthy: true}, 7: {Held: true}}}.Encode()
	f.Add(good)
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
			if err != nil || m2.Withdrawn != m.Withdrawn || m2.Leaving != m.Leaving || len(m2.VIPs) != len(m.VIPs) {
				t.Fatalf("round trip changed metadata: %+v -> %+v (%v)", m, m2, err)
			}
		}
	})
}

// FuzzKeyIndex: the position scanner survives any text.
func FuzzKeyIndex(f *testing.F) {
	f.Add([]byte(goodConfig))
	f.Add([]byte("[[a.b]]\n[a.b.c]\n'x.y'.z = 1\n\"\"\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ki := indexKeys(data)
		for path := range ki.pos {
			if _, ok := ki.lookup(path); !ok {
				t.Fatalf("indexed path %q not found", path)
			}
		}
	})
}

var (
	fuzzAgentOnce sync.Once
	fuzzAgent     *apiServer
	fuzzAgentErr  error
)

// FuzzAPIHandlers feeds arbitrary protobuf bytes to every request handler
// of a running single-node agent (fake network). Handlers must answer with
// a response or a gRPC error, never panic or hang.
func FuzzAPIHandlers(f *testing.F) {
	seed := func(m proto.Message) []byte { b, _ := proto.Marshal(m); return b }
	f.Add(uint8(0), seed(&apipb.StatusRequest{}))
	f.Add(uint8(1), seed(&apipb.WithdrawRequest{Wait: true, TimeoutMs: 50}))
	f.Add(uint8(1), seed(&apipb.WithdrawRequest{Force: true, TimeoutMs: -5}))
	f.Add(uint8(2), seed(&apipb.RestoreRequest{}))
	f.Add(uint8(1), []byte{0x08, 0x01, 0x10, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		s := startFuzzAgent(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ctx = rootCaller(ctx)
		switch which % 3 {
		case 0:
			var req apipb.StatusRequest
			if proto.Unmarshal(b, &req) != nil {
				return
			}
			if _, err := s.Status(ctx, &req); err != nil {
				t.Fatalf("status: %v", err)
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
			s.Withdraw(ctx, &req)
			if _, err := s.Restore(ctx, &apipb.RestoreRequest{}); err != nil {
				t.Fatalf("restore after withdraw: %v", err)
			}
		case 2:
			var req apipb.RestoreRequest
			if proto.Unmarshal(b, &req) != nil {
				return
			}
			if _, err := s.Restore(ctx, &req); err != nil {
				t.Fatalf("restore: %v", err)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("handler did not answer within 5s")
		}
	})
}

// startFuzzAgent starts one agent for the whole fuzz run (the fuzzing
// process ends it).
func startFuzzAgent(t *testing.T) *apiServer {
	fuzzAgentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "vipd-fuzz-")
		if err != nil {
			fuzzAgentErr = err
			return
		}
		text := fmt.Sprintf("node_name = \"solo\"\nstate_dir = %q\n[api]\nsocket = %q\n[cluster]\nbind_address = \"127.0.0.1\"\nbind_port = %d\n[[vip]]\nname = \"apiserver\"\naddress = \"192.0.2.10\"\ninterface = \"fake0\"\n",
			filepath.Join(dir, "state"), filepath.Join(dir, "api.sock"), freePort(t))
		cfg, err := Parse(filepath.Join(dir, "vipd.toml"), []byte(text))
		if err != nil {
			fuzzAgentErr = err
			return
		}
		a, err := New(cfg, Options{
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			Backends: fakeBackendsFor(newWire(), "solo"),
			Notify:   func(string) {},
			Tick:     20 * time.Millisecond,
			LinkUp:   func(string) bool { return true },
		})
		if err != nil {
			fuzzAgentErr = err
			return
		}
		go a.Run(context.Background())
		fuzzAgent = &apiServer{a: a, gid: -1}
	})
	if fuzzAgentErr != nil {
		t.Fatal(fuzzAgentErr)
	}
	return fuzzAgent
}
