package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/apipb"
)

// DefaultSocketGroup owns the API socket when api.socket_group is unset and
// the group exists.
const DefaultSocketGroup = apipb.DefaultSocketGroup

type apiServer struct {
	apipb.UnimplementedVipdServer
	a      *Agent
	srv    *grpc.Server
	gid    int // group allowed to use the API; -1: root only
	socket string
}

func (s *apiServer) stop() {
	s.srv.Stop()
	os.Remove(s.socket)
}

// serveAPI listens on the unix socket and serves the API until stop.
func (a *Agent) serveAPI(ctx context.Context) (*apiServer, error) {
	path := a.st.cfg.API.Socket
	gid, err := socketGroup(a.st.cfg.API.SocketGroup)
	if err != nil {
		return nil, err
	}
	if err := socketDir(filepath.Dir(path), gid); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale api socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("api socket: %w", err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api socket mode: %w", err)
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil { // group only: vipd may run as a non-root user
			ln.Close()
			return nil, fmt.Errorf("api socket group: %w", err)
		}
	}
	s := &apiServer{a: a, gid: gid, socket: path}
	s.srv = grpc.NewServer(grpc.Creds(peerCredTransport{}))
	apipb.RegisterVipdServer(s.srv, s)
	a.goroutines.Go(func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			a.log.Error("api server", "err", err)
		}
	})
	a.log.Info("api listening", "socket", path)
	return s, nil
}

// socketGroup resolves api.socket_group: a name or number; empty selects
// the vipd group if it exists. -1 means no group (root only).
func socketGroup(name string) (int, error) {
	explicit := name != ""
	if !explicit {
		name = DefaultSocketGroup
	}
	if n, err := strconv.Atoi(name); err == nil {
		return n, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		if explicit {
			return 0, fmt.Errorf("api.socket_group %q does not exist on this host (%v): create it (groupadd --system %s) or leave socket_group out (then the %s group if it exists, else root only)", name, err, name, DefaultSocketGroup)
		}
		return -1, nil
	}
	return strconv.Atoi(g.Gid)
}

// authorize checks the caller's SO_PEERCRED credentials: root and members
// of the socket group may call anything (the socket's 0660 mode already
// keeps others out; this is the second check, and names what was refused).
func (s *apiServer) authorize(ctx context.Context, what string) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s: caller unknown", what)
	}
	ai, ok := p.AuthInfo.(peerCred)
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s: caller credentials unavailable", what)
	}
	if ai.UID == 0 {
		return nil
	}
	if s.gid >= 0 && inGroup(ai, s.gid) {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "%s refused for uid %d: only root or members of the API socket group may call it", what, ai.UID)
}

// inGroup reports whether the caller runs with group gid or its user
// belongs to it (apipb.InGroup).
func inGroup(c peerCred, gid int) bool {
	if int(c.GID) == gid {
		return true
	}
	u, err := user.LookupId(strconv.Itoa(int(c.UID)))
	return err == nil && apipb.InGroup(u, gid)
}

// Status implements apipb.VipdServer.
func (s *apiServer) Status(ctx context.Context, _ *apipb.StatusRequest) (*apipb.StatusResponse, error) {
	if err := s.authorize(ctx, "status"); err != nil {
		return nil, err
	}
	snap := s.a.snapshot.Load()
	if snap == nil {
		return nil, status.Error(codes.Unavailable, "vipd is starting: no status yet")
	}
	resp := snap.response()
	// BGP sessions are read here, outside the loop: a slow speaker must not
	// hold up reconciling.
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp.BgpPeers = s.a.backends.BGPPeers(bctx)
	return resp, nil
}

// Withdraw implements apipb.VipdServer.
func (s *apiServer) Withdraw(ctx context.Context, req *apipb.WithdrawRequest) (*apipb.WithdrawResponse, error) {
	if err := s.authorize(ctx, "withdraw"); err != nil {
		return nil, err
	}
	timeout := time.Duration(req.GetTimeoutMs()) * time.Millisecond
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	var (
		w    *withdrawWaiter
		resp *apipb.WithdrawResponse
		werr error
	)
	wr := withdrawRequest{wait: req.GetWait(), force: req.GetForce(), noPersist: req.GetNoPersist(), timeout: timeout}
	err := s.a.do(ctx, func() { w, resp, werr = s.a.withdraw(wr) })
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	if werr != nil {
		return nil, werr
	}
	if w == nil {
		return resp, nil
	}
	select {
	case err := <-w.reply:
		if err != nil {
			return nil, err
		}
		resp.HandedOver = w.vips
		resp.Message = "every VIP this node held is now held elsewhere"
		if w.force {
			resp.Message = "every VIP this node held is released here (forced: another node may not hold it)"
		}
		return resp, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// Restore implements apipb.VipdServer.
func (s *apiServer) Restore(ctx context.Context, _ *apipb.RestoreRequest) (*apipb.RestoreResponse, error) {
	if err := s.authorize(ctx, "restore"); err != nil {
		return nil, err
	}
	var rerr error
	if err := s.a.do(ctx, func() { rerr = s.a.restore() }); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	if rerr != nil {
		return nil, rerr
	}
	return &apipb.RestoreResponse{}, nil
}

// Forget implements apipb.VipdServer.
func (s *apiServer) Forget(ctx context.Context, req *apipb.ForgetRequest) (*apipb.ForgetResponse, error) {
	if err := s.authorize(ctx, "forget"); err != nil {
		return nil, err
	}
	var ferr error
	if err := s.a.do(ctx, func() { ferr = s.a.forget(req.GetNode()) }); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	if ferr != nil {
		return nil, ferr
	}
	return &apipb.ForgetResponse{}, nil
}

// Events implements apipb.VipdServer.
func (s *apiServer) Events(req *apipb.EventsRequest, stream apipb.Vipd_EventsServer) error {
	if err := s.authorize(stream.Context(), "events"); err != nil {
		return err
	}
	backlog, ch, cancel := s.a.events.subscribe()
	defer cancel()
	for _, e := range backlog {
		if err := stream.Send(e); err != nil {
			return err
		}
	}
	if !req.GetFollow() {
		return nil
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case e := <-ch:
			if err := stream.Send(e); err != nil {
				return err
			}
		}
	}
}

// peerCred is the credentials of the process at the other end of the unix
// socket.
type peerCred struct {
	credentials.CommonAuthInfo
	UID, GID uint32
	PID      int32
}

func (peerCred) AuthType() string { return "peercred" }

// peerCredTransport reads SO_PEERCRED at connection time; it adds no
// encryption (the socket is local).
type peerCredTransport struct{}

func (peerCredTransport) ClientHandshake(_ context.Context, _ string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c, peerCred{}, nil
}

func (peerCredTransport) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, nil, errors.New("api: not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, nil, fmt.Errorf("api: peer credentials: %w", err)
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, nil, fmt.Errorf("api: peer credentials: %w", err)
	}
	if cerr != nil {
		return nil, nil, fmt.Errorf("api: peer credentials: %w", cerr)
	}
	return c, peerCred{
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity},
		UID:            cred.Uid, GID: cred.Gid, PID: cred.Pid,
	}, nil
}

func (peerCredTransport) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}

func (t peerCredTransport) Clone() credentials.TransportCredentials { return t }

func (peerCredTransport) OverrideServerName(string) error { return nil }

// socketDir creates the socket's directory, or takes one systemd created
// (RuntimeDirectory=), and makes sure the socket group can reach the socket
// in it: a directory owned by this process's user is given to the socket
// group with mode 0750 (under a root drop-in, systemd creates /run/vipd
// root:root 0750, which would lock the group out). Shared directories (/run,
// /tmp) are left as they are.
func socketDir(dir string, gid int) error {
	if err := makeDir(dir, 0o750); err != nil {
		return fmt.Errorf("api socket directory %s: %w", dir, err)
	}
	if gid < 0 {
		return nil
	}
	switch filepath.Clean(dir) {
	case "/", "/run", "/var/run", "/tmp", "/var/tmp", "/dev/shm":
		return nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("api socket directory %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() {
		return nil // not ours to change
	}
	if int(st.Gid) != gid {
		if err := os.Chown(dir, -1, gid); err != nil {
			return fmt.Errorf("api socket directory %s: give it to the socket group (gid %d): %w", dir, gid, err)
		}
	}
	if fi.Mode().Perm()&0o050 != 0o050 {
		if err := os.Chmod(dir, fi.Mode().Perm()|0o050); err != nil {
			return fmt.Errorf("api socket directory %s: %w", dir, err)
		}
	}
	return nil
}
