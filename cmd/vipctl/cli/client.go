package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/apipb"
)

// conn is one connection to vipd. It remembers the last error of dialing the
// socket, which gRPC reduces to "Unavailable": that error is what tells
// "permission denied" from "not running".
type conn struct {
	socket string
	cc     *grpc.ClientConn
	client apipb.VipdClient

	mu      sync.Mutex
	dialErr error
}

func (e *env) dial() (*conn, error) {
	c := &conn{socket: e.socket}
	// The target only names the connection; dialSocket ignores it and dials
	// the socket path as given (relative paths too).
	cc, err := grpc.NewClient("passthrough:///localhost",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(c.dialSocket))
	if err != nil {
		return nil, &exitError{code: ExitError, msg: fmt.Sprintf("vipctl: %v", err)}
	}
	c.cc, c.client = cc, apipb.NewVipdClient(cc)
	return c, nil
}

func (c *conn) dialSocket(ctx context.Context, _ string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", c.socket)
	c.mu.Lock()
	c.dialErr = err
	c.mu.Unlock()
	return nc, err
}

func (c *conn) lastDialErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dialErr
}

func (c *conn) close() { c.cc.Close() }

// fail turns the error of an API call into the message and exit code of
// vipctl WHAT (docs/operations.md, "Error messages"). ctx is the call's
// context, to tell vipd's own deadline from vipd not answering.
func (c *conn) fail(ctx context.Context, what string, err error) *exitError {
	st, _ := status.FromError(err)
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable:
		return c.unavailable(what, msg)
	case codes.PermissionDenied:
		return &exitError{code: ExitDenied, msg: fmt.Sprintf("vipctl %s: %s: %s", what, msg, deniedHint(c.socket))}
	case codes.FailedPrecondition:
		return &exitError{code: ExitRefused, msg: fmt.Sprintf("vipctl %s: %s", what, msg)}
	case codes.DeadlineExceeded:
		if callExpired(ctx) {
			return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("vipctl %s: vipd did not answer on %s in time; is it stuck? (systemctl status vipd, journalctl -u vipd)", what, c.socket)}
		}
		return &exitError{code: ExitTimeout, msg: fmt.Sprintf("vipctl %s: %s", what, msg)}
	case codes.Canceled:
		return &exitError{code: ExitError, msg: fmt.Sprintf("vipctl %s: interrupted", what)}
	}
	return &exitError{code: ExitError, msg: fmt.Sprintf("vipctl %s: %s", what, msg)}
}

// callExpired reports whether the call's own deadline has passed: its
// context ended, or its deadline is behind us while the timer that ends
// the context has yet to run (vipd's gRPC server enforces the same
// deadline and may reset the stream first).
func callExpired(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// unavailable explains why the socket could not be used.
func (c *conn) unavailable(what, msg string) *exitError {
	derr := c.lastDialErr()
	switch {
	case derr == nil:
		// Connected, then lost: vipd stopped during the call.
		return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("vipctl %s: lost the connection to vipd on %s (%s); is it restarting? (systemctl status vipd)", what, c.socket, msg)}
	case errors.Is(derr, syscall.EACCES), errors.Is(derr, syscall.EPERM):
		return &exitError{code: ExitDenied, msg: fmt.Sprintf("vipctl %s: permission denied on %s: %s", what, c.socket, deniedHint(c.socket))}
	case errors.Is(derr, syscall.ENOENT), errors.Is(derr, syscall.ENOTDIR):
		return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("vipctl %s: vipd is not running: no socket at %s (start it: systemctl start vipd; or pass --socket)", what, c.socket)}
	case errors.Is(derr, syscall.ECONNREFUSED):
		return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("vipctl %s: vipd is not running: nothing listens on %s (start it: systemctl start vipd)", what, c.socket)}
	}
	return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("vipctl %s: cannot connect to vipd on %s: %v", what, c.socket, derr)}
}

// deniedHint says what gets a user through a permission denied on socket:
// the group that owns it (read from the socket, or from its directory when
// the socket itself cannot be seen), else root.
func deniedHint(socket string) string {
	who := "your user"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	gid, ok := ownerGroup(socket)
	if !ok {
		return fmt.Sprintf("run as root, or add %s to the socket's group (usermod -aG GROUP %s, then log in again)", who, who)
	}
	if gid == 0 {
		return "run as root (the socket belongs to group root: set api.socket_group in vipd.toml to let a group use vipctl)"
	}
	name := strconv.Itoa(gid)
	if g, err := user.LookupGroupId(name); err == nil {
		name = g.Name
	}
	if inGroupNotSession(gid) {
		return fmt.Sprintf("%s is in group %s but this session is not yet: log in again (or run: newgrp %s), or run as root", who, name, name)
	}
	return fmt.Sprintf("add %s to group %s (usermod -aG %s %s, then log in again) or run as root", who, name, name, who)
}

// ownerGroup is the group of socket, or of its directory when the socket
// cannot be examined (a directory the user may not search).
func ownerGroup(socket string) (int, bool) {
	for _, p := range []string{socket, filepath.Dir(socket)} {
		if fi, err := os.Stat(p); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				return int(st.Gid), true
			}
		}
	}
	return 0, false
}

// inGroupNotSession reports whether the user is listed in group gid but
// the running process does not have it (added without logging in again).
func inGroupNotSession(gid int) bool {
	if os.Getgid() == gid {
		return false
	}
	groups, err := os.Getgroups()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if g == gid {
			return false
		}
	}
	u, err := user.Current()
	return err == nil && apipb.InGroup(u, gid)
}
