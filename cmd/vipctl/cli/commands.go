package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/apipb"
)

// defaultCallTimeout bounds every call but withdraw --wait and events --follow.
const defaultCallTimeout = 10 * time.Second

// call is every command's preamble: it dials vipd and runs f with the
// connection and a context that ends after timeout (none when timeout is
// 0), and closes the connection when f returns.
func (e *env) call(timeout time.Duration, f func(ctx context.Context, c *conn) error) error {
	c, err := e.dial()
	if err != nil {
		return err
	}
	defer c.close()
	ctx := e.ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return f(ctx, c)
}

// callTimeout is how long a call may take: defaultCallTimeout unless a test
// shortened it.
func (e *env) callTimeout() time.Duration {
	if e.timeout > 0 {
		return e.timeout
	}
	return defaultCallTimeout
}

func (e *env) status(asJSON bool) error {
	return e.call(e.callTimeout(), func(ctx context.Context, c *conn) error {
		st, err := c.client.Status(ctx, &apipb.StatusRequest{})
		if err != nil {
			return c.fail(ctx, "status", err)
		}
		if asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(st.ToJSON()); err != nil {
				return &exitError{code: ExitError, msg: fmt.Sprintf("vipctl status: %v", err)}
			}
			return nil
		}
		e.printer().status(e.stdout, st)
		return nil
	})
}

type withdrawOpts struct {
	wait, force, noPersist bool
	timeout                time.Duration
}

func (e *env) withdraw(o withdrawOpts) error {
	return e.call(o.timeout+e.callTimeout(), func(ctx context.Context, c *conn) error {
		resp, err := c.client.Withdraw(ctx, &apipb.WithdrawRequest{
			Wait: o.wait, TimeoutMs: o.timeout.Milliseconds(), Force: o.force, NoPersist: o.noPersist,
		})
		if err != nil {
			xe := c.fail(ctx, "withdraw", err)
			switch xe.code {
			case ExitRefused, ExitTimeout:
				xe.msg += e.whyNotTakenOver(c, xe.msg)
			case ExitError:
				if st, _ := status.FromError(err); st.Code() == codes.Aborted {
					xe.msg += "\nvipctl withdraw: fix state_dir (full disk? read-only? see journalctl -u vipd), or run 'vipctl withdraw --no-persist' to withdraw until vipd restarts only"
				}
			}
			return xe
		}
		fmt.Fprintln(e.stdout, resp.GetMessage())
		if len(resp.GetHandedOver()) > 0 {
			fmt.Fprintln(e.stdout, "handed over:", strings.Join(resp.GetHandedOver(), ", "))
		}
		if o.noPersist && !resp.GetPersisted() {
			fmt.Fprintln(e.stdout, "not saved (--no-persist): this node becomes eligible again when vipd restarts")
		}
		return nil
	})
}

// whyNotTakenOver asks vipd, after a refused or timed-out withdraw, why the
// other nodes do not take over the VIPs that are still here or held by
// nobody, and returns one line per such VIP ("apiserver: cp-2: unhealthy
// since 12:03:10; cp-3: withdrawn"). Lines vipd's message already carries
// are left out; nothing when vipd does not report eligibility.
func (e *env) whyNotTakenOver(c *conn, msg string) string {
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
	defer cancel()
	st, err := c.client.Status(ctx, &apipb.StatusRequest{})
	if err != nil {
		return ""
	}
	p := e.printer()
	var b strings.Builder
	for _, v := range st.GetVips() {
		elsewhere := false
		for _, h := range v.GetHolders() {
			if h != st.GetNode() {
				elsewhere = true
			}
		}
		if !v.GetHeld() && elsewhere {
			continue
		}
		var parts []string
		missing := false
		for _, el := range v.GetEligibility() {
			if el.GetNode() == st.GetNode() {
				continue
			}
			part := el.GetNode() + ": " + p.eligibility(el)
			said := el.GetNode() + ": " + el.GetReason()
			if el.GetEligible() {
				part += holdsIt(v, el.GetNode())
				said = el.GetNode() + ": eligible"
			}
			if !strings.Contains(msg, said) {
				missing = true
			}
			parts = append(parts, part)
		}
		switch {
		case len(parts) == 0 && len(v.GetEligibility()) > 0:
			fmt.Fprintf(&b, "\nvipctl withdraw: %s: no other member known", v.GetName())
		case missing:
			fmt.Fprintf(&b, "\nvipctl withdraw: %s: %s", v.GetName(), strings.Join(parts, "; "))
		}
	}
	if b.Len() > 0 {
		return "\nvipctl withdraw: why no other node has taken over:" + b.String()
	}
	return ""
}

func (e *env) restore() error {
	return e.call(e.callTimeout(), func(ctx context.Context, c *conn) error {
		if _, err := c.client.Restore(ctx, &apipb.RestoreRequest{}); err != nil {
			return c.fail(ctx, "restore", err)
		}
		fmt.Fprintln(e.stdout, "restored: this node is eligible again")
		return nil
	})
}

func (e *env) forget(node string) error {
	return e.call(e.callTimeout(), func(ctx context.Context, c *conn) error {
		if _, err := c.client.Forget(ctx, &apipb.ForgetRequest{Node: node}); err != nil {
			return c.fail(ctx, "forget", err)
		}
		fmt.Fprintf(e.stdout, "forgot %s on this node\n", node)
		return nil
	})
}

// decommission forgets this node itself: vipd marks it removed for good.
func (e *env) decommission() error {
	return e.call(e.callTimeout(), func(ctx context.Context, c *conn) error {
		st, err := c.client.Status(ctx, &apipb.StatusRequest{})
		if err != nil {
			return c.fail(ctx, "decommission", err)
		}
		if _, err := c.client.Forget(ctx, &apipb.ForgetRequest{Node: st.GetNode()}); err != nil {
			return c.fail(ctx, "decommission", err)
		}
		fmt.Fprintf(e.stdout, "decommissioned %s: the other nodes forget it once vipd stops here\n", sanitizeName(st.GetNode()))
		return nil
	})
}

// forgettable lists the members forget accepts (dead or left), for shell
// completion; nothing when vipd cannot be asked.
func (e *env) forgettable() []string {
	var out []string
	_ = e.call(2*time.Second, func(ctx context.Context, c *conn) error {
		st, err := c.client.Status(ctx, &apipb.StatusRequest{})
		if err != nil {
			return err
		}
		for _, m := range st.GetMembers() {
			if !m.GetSelf() && (m.GetState() == "dead" || m.GetState() == "left") {
				out = append(out, m.GetName()+"\t"+m.GetState())
			}
		}
		return nil
	})
	return out
}

// events streams vipd's events; the call has no timeout (--follow runs
// until interrupted).
func (e *env) events(follow, asJSON bool) error {
	return e.call(0, func(ctx context.Context, c *conn) error {
		stream, err := c.client.Events(ctx, &apipb.EventsRequest{Follow: follow})
		if err != nil {
			return c.fail(ctx, "events", err)
		}
		enc := json.NewEncoder(e.stdout)
		p := e.printer()
		for {
			ev, err := stream.Recv()
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return c.fail(ctx, "events", err)
			}
			if asJSON {
				if err := enc.Encode(ev.ToJSON()); err != nil {
					return &exitError{code: ExitError, msg: fmt.Sprintf("vipctl events: %v", err)}
				}
				continue
			}
			fmt.Fprintln(e.stdout, p.event(ev))
		}
	})
}
