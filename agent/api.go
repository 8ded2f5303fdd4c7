package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
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
func (a *Agent) serveAPI(ctx context.Context, wg *sync.WaitGroup) (*apiServer, error) {
	path := a.cfg.API.Socket
	gid, err := socketGroup(a.cfg.API.SocketGroup)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("api socket dir: %w", err)
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
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			a.log.Error("api server", "err", err)
		}
	}()
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
			return 0, fmt.Errorf("api socket_group %q: %w", name, err)
		}
		return -1, nil
	}
	return strconv.Atoi(g.Gid)
}

// authorize checks the caller's SO_PEERCRED credentials: root may do
// anything, members of the socket group may read, and mutate when mutating
// is true too (the socket's 0660 mode already keeps others out; this is the
// second check, and names what was refused).
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

func inGroup(c peerCred, gid int) bool {
	if int(c.GID) == gid {
		return true
	}
	u, err := user.LookupId(strconv.Itoa(int(c.UID)))
	if err != nil {
		return false
	}
	gids, err := u.GroupIds()
	if err != nil {
		return false
	}
	for _, g := range gids {
		if g == strconv.Itoa(gid) {
			return true
		}
	}
	return false
}

// Status implements apipb.VipdServer.
func (s *apiServer) Status(ctx context.Context, _ *apipb.StatusRequest) (*apipb.StatusResponse, error) {
	if err := s.authorize(ctx, "status"); err != nil {
		return nil, err
	}
	var resp *apipb.StatusResponse
	err := s.a.do(ctx, func() { resp = s.a.status(ctx) })
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
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
	err := s.a.do(ctx, func() { w, resp, werr = s.a.withdraw(req.GetWait(), req.GetForce(), timeout) })
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

// forget drops a member that is not alive from the table and the cache.
func (a *Agent) forget(name string) error {
	if name == "" || name == a.self {
		return status.Errorf(codes.InvalidArgument, "forget: name another node, not %q", name)
	}
	known := false
	for _, m := range a.ml.snapshot() {
		if m.Name != name {
			continue
		}
		known = true
		if m.State == StateAlive || m.State == StateSuspect {
			return status.Errorf(codes.FailedPrecondition, "forget: %s is %s; stop it (or wait until it is dead) first", name, m.State)
		}
	}
	var next []CachedPeer
	for _, p := range a.getCache() {
		if p.Name == name {
			known = true
			continue
		}
		next = append(next, p)
	}
	if !known {
		return status.Errorf(codes.NotFound, "forget: no member named %q", name)
	}
	a.ml.forget(name)
	a.setCache(next)
	if err := savePeerCache(a.cfg.StateDir, next); err != nil {
		a.log.Error("save peer cache (kept in memory)", "err", err)
	}
	a.log.Info("member forgotten", "member", name)
	a.events.publish(&apipb.Event{Kind: "membership", Node: name, Message: "forgotten by " + a.self})
	return nil
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

// withdraw sets the withdraw flag (on the loop goroutine). With wait, it
// returns a waiter that is answered when every VIP this node held is held
// elsewhere, or at the deadline.
func (a *Agent) withdraw(wait, force bool, timeout time.Duration) (*withdrawWaiter, *apipb.WithdrawResponse, error) {
	view := a.view(a.ml.snapshot())
	var others []Member
	for _, m := range view {
		if m.Name != a.self {
			others = append(others, m)
		}
	}
	var held []string
	var stranded []string
	for name, v := range a.vips {
		if !v.held {
			continue
		}
		held = append(held, name)
		if len(Eligible(others, ElectionVIP{Name: name})) == 0 {
			stranded = append(stranded, name)
		}
	}
	sort.Strings(held)
	sort.Strings(stranded)
	if len(stranded) > 0 && !force {
		return nil, nil, status.Errorf(codes.FailedPrecondition,
			"refusing to withdraw: no other eligible node for %v (others are dead, withdrawn or unhealthy); use --force to drop the VIP anyway", stranded)
	}
	resp := &apipb.WithdrawResponse{Message: "withdrawn"}
	if err := saveWithdraw(a.cfg.StateDir, true); err != nil {
		a.log.Error("withdraw flag not persisted; the node is withdrawn until restart only", "err", err)
		resp.Message = "withdrawn, but the flag could not be saved and will not survive a restart: " + err.Error()
	}
	if !a.withdrawn {
		a.log.Info("withdrawn by vipctl", "held", held)
		a.events.publish(&apipb.Event{Kind: "withdraw", Node: a.self, Message: "withdrawn"})
	}
	a.withdrawn = true
	a.withdrawErr = nil
	a.reconcile()
	if !wait {
		return nil, resp, nil
	}
	w := &withdrawWaiter{vips: held, force: force, deadline: a.now().Add(timeout), reply: make(chan error, 1)}
	a.waiters = append(a.waiters, w)
	a.checkWaiters(view, a.now())
	return w, resp, nil
}

func (a *Agent) restore() error {
	if err := saveWithdraw(a.cfg.StateDir, false); err != nil {
		return status.Errorf(codes.Internal, "restore: %v", err)
	}
	if a.withdrawn {
		a.log.Info("restored by vipctl")
		a.events.publish(&apipb.Event{Kind: "withdraw", Node: a.self, Message: "restored"})
	}
	a.withdrawn = false
	a.withdrawErr = nil
	return nil
}

// checkWaiters answers withdraw --wait callers whose VIPs are now held
// elsewhere, or whose deadline passed.
func (a *Agent) checkWaiters(view []Member, now time.Time) {
	keep := a.waiters[:0]
	for _, w := range a.waiters {
		done := true
		var pending []string
		for _, name := range w.vips {
			v := a.vips[name]
			if v == nil {
				continue
			}
			if v.held || (v.cfg.Announce != "all" && !w.force && !heldElsewhere(a.self, name, view)) {
				done = false
				pending = append(pending, name)
			}
		}
		switch {
		case done:
			w.reply <- nil
		case !now.Before(w.deadline):
			w.reply <- status.Errorf(codes.DeadlineExceeded, "timed out: %v not yet held by another node", pending)
		default:
			keep = append(keep, w)
		}
	}
	a.waiters = keep
}

// heldElsewhere reports whether an alive (or suspect) member other than
// self reports holding vip.
func heldElsewhere(self, vip string, view []Member) bool {
	k := vipKey(vip)
	for _, m := range view {
		if m.Name != self && (m.State == StateAlive || m.State == StateSuspect) && m.Meta.VIP(k).Held {
			return true
		}
	}
	return false
}

// status builds the status answer (on the loop goroutine).
func (a *Agent) status(ctx context.Context) *apipb.StatusResponse {
	members := a.ml.snapshot()
	quorum, _, _, _ := hasQuorum(a.self, a.getCache(), members, a.cfg.Cluster.RequireQuorum)
	resp := &apipb.StatusResponse{Node: a.self, Withdrawn: a.withdrawn, Quorum: quorum, Version: a.opts.Version, Healthy: true}
	byName := map[string]memberInfo{}
	for _, m := range members {
		byName[m.Name] = m
	}
	view := a.view(members)
	for _, mb := range view {
		addr := byName[mb.Name].Address
		if mb.Name == a.self {
			addr = net.JoinHostPort(a.cfg.Cluster.bindAddr.String(), strconv.Itoa(a.cfg.Cluster.BindPort))
		}
		healthy := mb.Meta.Valid
		for _, v := range a.vips {
			if !mb.Meta.VIP(vipKey(v.cfg.Name)).Healthy {
				healthy = false
			}
		}
		resp.Members = append(resp.Members, &apipb.MemberStatus{
			Name: mb.Name, Address: addr, State: mb.State.String(),
			Withdrawn: mb.Meta.Withdrawn, Healthy: healthy, Self: mb.Name == a.self,
		})
	}
	sort.Slice(resp.Members, func(i, j int) bool { return resp.Members[i].Name < resp.Members[j].Name })
	for _, v := range a.vips {
		vs := &apipb.VIPStatus{
			Name: v.cfg.Name, Address: v.cfg.addr.String(), Mode: v.cfg.Mode,
			Owner: v.owner, Held: v.held, Healthy: v.healthy, Reason: v.reason,
		}
		if !v.healthy {
			resp.Healthy = false
		}
		for _, m := range view {
			if m.State <= StateSuspect && m.Meta.VIP(vipKey(v.cfg.Name)).Held {
				vs.Holders = append(vs.Holders, m.Name)
			}
		}
		sort.Strings(vs.Holders)
		resp.Vips = append(resp.Vips, vs)
	}
	sort.Slice(resp.Vips, func(i, j int) bool { return resp.Vips[i].Name < resp.Vips[j].Name })
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp.BgpPeers = a.backends.BGPPeers(bctx)
	return resp
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
