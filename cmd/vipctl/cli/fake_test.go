package cli

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/apipb"
)

// fakeVipd answers the API with canned responses and records requests; it
// runs on a real unix socket so vipctl's dialing and error handling are the
// real ones.
type fakeVipd struct {
	apipb.UnimplementedVipdServer

	mu           sync.Mutex
	status       *apipb.StatusResponse
	statusErr    error
	withdrawResp *apipb.WithdrawResponse
	withdrawErr  error
	restoreErr   error
	forgetErr    error
	events       []*apipb.Event
	withdrawReq  *apipb.WithdrawRequest
	forgot       string
	// hang, when not nil, makes every unary call answer nothing until it
	// is closed (a vipd that is stuck), and then fail.
	hang chan struct{}
}

// stall waits, when f hangs, until hang is closed, and says the call
// failed then; the caller has given up long before.
func (f *fakeVipd) stall() error {
	if f.hang == nil {
		return nil
	}
	<-f.hang
	return status.Error(codes.Unavailable, "fake vipd: released")
}

func (f *fakeVipd) Status(context.Context, *apipb.StatusRequest) (*apipb.StatusResponse, error) {
	if err := f.stall(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.statusErr != nil {
		return nil, f.statusErr
	}
	if f.status == nil {
		return &apipb.StatusResponse{Node: "cp-1"}, nil
	}
	return f.status, nil
}

func (f *fakeVipd) Withdraw(_ context.Context, req *apipb.WithdrawRequest) (*apipb.WithdrawResponse, error) {
	if err := f.stall(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.withdrawReq = req
	if f.withdrawErr != nil {
		return nil, f.withdrawErr
	}
	if f.withdrawResp == nil {
		return &apipb.WithdrawResponse{Message: "withdrawn", Persisted: true}, nil
	}
	return f.withdrawResp, nil
}

func (f *fakeVipd) Restore(context.Context, *apipb.RestoreRequest) (*apipb.RestoreResponse, error) {
	if err := f.stall(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return &apipb.RestoreResponse{}, f.restoreErr
}

func (f *fakeVipd) Forget(_ context.Context, req *apipb.ForgetRequest) (*apipb.ForgetResponse, error) {
	if err := f.stall(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot = req.GetNode()
	return &apipb.ForgetResponse{}, f.forgetErr
}

func (f *fakeVipd) Events(_ *apipb.EventsRequest, stream apipb.Vipd_EventsServer) error {
	f.mu.Lock()
	evs := f.events
	f.mu.Unlock()
	for _, e := range evs {
		if err := stream.Send(e); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeVipd) lastWithdraw() *apipb.WithdrawRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.withdrawReq
}

// serve runs f on a socket in a new directory and returns the socket path.
func serve(t *testing.T, f *fakeVipd) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "vipd.sock")
	serveAt(t, f, sock)
	return sock
}

func serveAt(t *testing.T, f *fakeVipd, sock string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	apipb.RegisterVipdServer(srv, f)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("fake vipd: %v", err)
		}
	})
}

// testNow is the clock of in-process runs: times print in UTC.
func testNow() time.Time { return time.Date(2026, 5, 4, 12, 5, 0, 0, time.UTC) }

// vipctl runs vipctl in-process and returns its exit code and output.
func vipctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return vipctlTimeout(t, 0, args...)
}

// vipctlTimeout is vipctl with each call bounded by timeout instead of
// defaultCallTimeout.
func vipctlTimeout(t *testing.T, timeout time.Duration, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e := &env{stdout: &stdout, stderr: &stderr, ctx: context.Background(), now: testNow, loc: time.UTC, timeout: timeout}
	code := e.run(args, "test")
	return code, stdout.String(), stderr.String()
}

// buildBinaries builds the named commands (vipctl, vipd) into a directory
// every user may read and run, for tests that exec them as another user or
// from the drain hooks, and returns it.
func buildBinaries(t *testing.T, names ...string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vipctl-test-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), "github.com/vipd/vipd/cmd/"+name).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %s: %v: %s", name, err, out)
		}
	}
	return dir
}
