// Command vipctl talks to the local vipd over its unix socket: status,
// withdraw (for drain hooks), restore and events.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/apipb"
)

var version = "dev"

// Exit codes; drain scripts rely on them.
const (
	exitOK          = 0
	exitError       = 1 // anything else
	exitUsage       = 2
	exitRefused     = 3 // withdraw refused: no other eligible node (use --force)
	exitTimeout     = 4 // withdraw --wait: the VIP was not taken over in time
	exitUnavailable = 5 // vipd is not running or the socket is unreachable
	exitDenied      = 6 // permission denied
)

const usage = `vipctl controls the local vipd.

Usage:
  vipctl [--socket PATH] status [--json]
  vipctl [--socket PATH] withdraw [--wait] [--timeout 30s] [--force]
  vipctl [--socket PATH] restore
  vipctl [--socket PATH] forget NODE
  vipctl [--socket PATH] events [--follow] [--json]
  vipctl --version

Commands:
  status     members (state, withdrawn, healthy) and VIPs (owner, whether this
             node holds them), BGP sessions. --json prints the stable format
             documented in docs/operations.md.
  withdraw   make this node ineligible for every VIP; a peer takes over. The
             flag is persisted and survives restarts until "vipctl restore".
             --wait returns only when every VIP this node held is held by
             another node (make-before-break), --timeout bounds the wait,
             --force withdraws even when no other node is eligible (the VIP
             goes down).
  restore    clear the withdraw flag.
  forget     drop a dead or left member from this node's membership and peer
             cache (a host removed without a clean stop otherwise counts
             towards quorum and is rejoined forever). Run it on every node.
  events     recent ownership, membership and health events; --follow keeps
             streaming.

Exit codes: 0 ok, 1 error, 2 usage, 3 withdraw refused (no other eligible
node; --force overrides), 4 withdraw --wait timed out, 5 vipd unreachable,
6 permission denied.

Flags:
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vipctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	socket := fs.String("socket", apipb.DefaultSocket, "vipd API socket")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *showVersion {
		fmt.Fprintln(stdout, "vipctl", version)
		return exitOK
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	sub := flag.NewFlagSet("vipctl "+cmd, flag.ContinueOnError)
	sub.SetOutput(stderr)
	asJSON := sub.Bool("json", false, "print JSON")
	wait := sub.Bool("wait", false, "withdraw: wait until another node holds every VIP this node held")
	timeout := sub.Duration("timeout", 30*time.Second, "withdraw --wait: how long to wait")
	force := sub.Bool("force", false, "withdraw: even when no other node is eligible")
	follow := sub.Bool("follow", false, "events: keep streaming")
	if err := sub.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	var forgetNode string
	if cmd == "forget" {
		if sub.NArg() != 1 {
			fmt.Fprintln(stderr, "vipctl forget: name the node to forget")
			return exitUsage
		}
		forgetNode = sub.Arg(0)
	} else if sub.NArg() > 0 {
		fmt.Fprintf(stderr, "vipctl %s: unexpected argument %q\n", cmd, sub.Arg(0))
		return exitUsage
	}

	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(stderr, "vipctl: %v\n", err)
		return exitError
	}
	defer conn.Close()
	client := apipb.NewVipdClient(conn)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	switch cmd {
	case "status":
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st, err := client.Status(cctx, &apipb.StatusRequest{})
		if err != nil {
			return fail(stderr, *socket, "status", err)
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(st.ToJSON()); err != nil {
				return fail(stderr, *socket, "status", err)
			}
			return exitOK
		}
		printStatus(stdout, st)
	case "withdraw":
		cctx, cancel := context.WithTimeout(ctx, *timeout+5*time.Second)
		defer cancel()
		resp, err := client.Withdraw(cctx, &apipb.WithdrawRequest{Wait: *wait, TimeoutMs: timeout.Milliseconds(), Force: *force})
		if err != nil {
			return fail(stderr, *socket, "withdraw", err)
		}
		fmt.Fprintln(stdout, resp.GetMessage())
		if len(resp.GetHandedOver()) > 0 {
			fmt.Fprintln(stdout, "handed over:", strings.Join(resp.GetHandedOver(), ", "))
		}
	case "restore":
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := client.Restore(cctx, &apipb.RestoreRequest{}); err != nil {
			return fail(stderr, *socket, "restore", err)
		}
		fmt.Fprintln(stdout, "restored: this node is eligible again")
	case "forget":
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := client.Forget(cctx, &apipb.ForgetRequest{Node: forgetNode}); err != nil {
			return fail(stderr, *socket, "forget", err)
		}
		fmt.Fprintf(stdout, "forgot %s on this node\n", forgetNode)
	case "events":
		stream, err := client.Events(ctx, &apipb.EventsRequest{Follow: *follow})
		if err != nil {
			return fail(stderr, *socket, "events", err)
		}
		enc := json.NewEncoder(stdout)
		for {
			e, err := stream.Recv()
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return exitOK
			}
			if err != nil {
				return fail(stderr, *socket, "events", err)
			}
			if *asJSON {
				enc.Encode(e.ToJSON())
				continue
			}
			fmt.Fprintln(stdout, formatEvent(e))
		}
	default:
		fmt.Fprintf(stderr, "vipctl: unknown command %q (see vipctl --help)\n", cmd)
		return exitUsage
	}
	return exitOK
}

// fail prints an error that says what failed and why, and maps it to an
// exit code.
func fail(stderr io.Writer, socket, what string, err error) int {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unavailable:
		fmt.Fprintf(stderr, "vipctl %s: cannot reach vipd at %s: is it running? (%s)\n", what, socket, st.Message())
		return exitUnavailable
	case codes.PermissionDenied:
		fmt.Fprintf(stderr, "vipctl %s: %s\n", what, st.Message())
		return exitDenied
	case codes.FailedPrecondition:
		fmt.Fprintf(stderr, "vipctl %s: %s\n", what, st.Message())
		return exitRefused
	case codes.DeadlineExceeded:
		fmt.Fprintf(stderr, "vipctl %s: %s\n", what, st.Message())
		return exitTimeout
	}
	fmt.Fprintf(stderr, "vipctl %s: %s\n", what, st.Message())
	return exitError
}

func printStatus(w io.Writer, st *apipb.StatusResponse) {
	flags := []string{}
	if st.GetWithdrawn() {
		flags = append(flags, "WITHDRAWN")
	}
	if !st.GetQuorum() {
		flags = append(flags, "NO QUORUM")
	}
	if !st.GetHealthy() {
		flags = append(flags, "unhealthy")
	}
	fmt.Fprintf(w, "node %s (vipd %s) %s\n\n", st.GetNode(), st.GetVersion(), strings.Join(flags, " "))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VIP\tADDRESS\tMODE\tOWNER\tHELD HERE\tHOLDERS")
	for _, v := range st.GetVips() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.GetName(), v.GetAddress(), v.GetMode(), orDash(v.GetOwner()), yesNo(v.GetHeld()), orDash(strings.Join(v.GetHolders(), ",")))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tADDRESS\tSTATE\tWITHDRAWN\tHEALTHY")
	for _, m := range st.GetMembers() {
		name := m.GetName()
		if m.GetSelf() {
			name += " (this node)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, m.GetAddress(), m.GetState(), yesNo(m.GetWithdrawn()), yesNo(m.GetHealthy()))
	}
	tw.Flush()
	if len(st.GetBgpPeers()) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "BGP PEER\tASN\tSTATE\tUPTIME\tRECEIVED\tADVERTISED")
		for _, p := range st.GetBgpPeers() {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\n", p.GetAddress(), p.GetAsn(), p.GetState(), time.Duration(p.GetUptimeSeconds())*time.Second, p.GetReceived(), p.GetAdvertised())
		}
		tw.Flush()
	}
}

func formatEvent(e *apipb.Event) string {
	t := time.Unix(0, e.GetUnixNano()).Format(time.RFC3339Nano)
	parts := []string{t, e.GetKind()}
	for _, kv := range [][2]string{{"vip", e.GetVip()}, {"node", e.GetNode()}, {"from", e.GetFrom()}, {"to", e.GetTo()}, {"reason", e.GetReason()}, {"message", e.GetMessage()}} {
		if kv[1] != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", kv[0], kv[1]))
		}
	}
	return strings.Join(parts, " ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
