// Package cli is vipctl: its commands and flags, how it talks to the local
// vipd, and how every failure becomes a message that says what to do and a
// documented exit code. cmd/vipctl runs it; cmd/docgen builds the vipctl(8)
// page and the shell completions from the same command tree.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vipd/vipd/agent/apipb"
)

// Exit codes; drain scripts rely on them (docs/operations.md).
const (
	ExitOK          = 0
	ExitError       = 1 // anything else
	ExitUsage       = 2
	ExitRefused     = 3 // refused: no other eligible node (withdraw), member alive (forget)
	ExitTimeout     = 4 // withdraw --wait: the VIP was not taken over in time
	ExitUnavailable = 5 // vipd is not running: no socket, or nothing listening on it
	ExitDenied      = 6 // permission denied on the socket or by vipd
)

// exitError carries an exit code and the message printed before exiting.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// env is what a vipctl run depends on besides its arguments; tests replace
// the clock, the time zone and the call timeout.
type env struct {
	stdout, stderr io.Writer
	ctx            context.Context
	now            func() time.Time
	loc            *time.Location
	socket         string
	// timeout bounds each call but withdraw --wait's wait and events; zero
	// means defaultCallTimeout.
	timeout time.Duration
}

// Run runs vipctl with args (without the program name) and returns its
// exit code.
func Run(args []string, stdout, stderr io.Writer, version string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	e := &env{stdout: stdout, stderr: stderr, ctx: ctx, now: time.Now, loc: time.Local}
	return e.run(args, version)
}

func (e *env) run(args []string, version string) int {
	root := e.command(version)
	if len(args) == 0 {
		// Without a command: the help, as a usage error.
		root.SetOut(e.stderr)
		root.Help()
		return ExitUsage
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	var xe *exitError
	code, msg := ExitOK, ""
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &xe):
		code, msg = xe.code, xe.msg
	default:
		// cobra's own errors: unknown command, bad flag, wrong arguments.
		code, msg = ExitUsage, fmt.Sprintf("vipctl: %v\nSee 'vipctl --help'.", err)
	}
	if msg != "" {
		fmt.Fprintln(e.stderr, msg)
	}
	if f := cmd.Flags().Lookup("json"); f != nil && f.Value.String() == "true" {
		// A script reading --json output reads the failure too.
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"exit_code": code, "message": msg}})
		fmt.Fprintf(e.stdout, "%s\n", b)
	}
	return code
}

// Command returns vipctl's command tree, for documentation and completion
// scripts; running it talks to vipd like vipctl does.
func Command(version string) *cobra.Command {
	e := &env{stdout: os.Stdout, stderr: os.Stderr, ctx: context.Background(), now: time.Now, loc: time.Local}
	return e.command(version)
}

// Long descriptions are markdown: cmd/docgen renders them into vipctl(8).
const rootLong = `vipctl talks to the vipd on this host over its unix socket: it shows what
vipd sees (members, VIPs, who may own each VIP and why not), withdraws this
node from every VIP before maintenance and restores it, forgets a member that
is gone for good, marks this node itself as removed for good before it goes
(decommission), and streams events.

Every node answers with its own view of the cluster; when nodes disagree, ask
every node.

Exit codes: 0 ok, 1 error, 2 usage, 3 refused (withdraw: no other eligible
node, --force overrides; forget: the member is alive), 4 withdraw --wait
timed out, 5 vipd is not running (no socket, or nothing listening on it),
6 permission denied (not root and not in the socket's group).`

func (e *env) command(version string) *cobra.Command {
	root := &cobra.Command{
		Use:           "vipctl",
		Short:         "control the local vipd",
		Long:          rootLong,
		Version:       version,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetVersionTemplate("vipctl {{.Version}}\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, msg: fmt.Sprintf("%s: %v\nSee '%s --help'.", cmd.CommandPath(), err, cmd.CommandPath())}
	})
	root.PersistentFlags().StringVar(&e.socket, "socket", apipb.DefaultSocket, "the `PATH` of vipd's API socket")
	root.MarkPersistentFlagFilename("socket", "sock")
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(e.statusCmd(), e.withdrawCmd(), e.restoreCmd(), e.forgetCmd(), e.decommissionCmd(), e.eventsCmd(), e.completionCmd(root))
	return root
}

// noArgs refuses arguments with a usage error naming the command.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return &exitError{code: ExitUsage, msg: fmt.Sprintf("%s: unexpected argument %q (see '%s --help')", cmd.CommandPath(), args[0], cmd.CommandPath())}
	}
	return nil
}

func (e *env) statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "show members, VIPs, who may own each VIP, and BGP sessions",
		Long: `Shows this node's view: the quorum and fence, what its Kubernetes Node says
("kubernetes: node cp-1 cordoned → withdrawn") and any warning, every VIP
(owner, whether this node holds it, every holder), for every VIP each node's
eligibility with the reason when it is not eligible (withdrawn, withdrawn by
its Node, unhealthy since, interface down, leaving, dead, left, no quorum,
metadata unreadable), the members, and the BGP sessions. --json prints the
stable format documented in docs/operations.md.`,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.status(asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the stable JSON format (docs/operations.md)")
	return cmd
}

func (e *env) withdrawCmd() *cobra.Command {
	var o withdrawOpts
	cmd := &cobra.Command{
		Use:   "withdraw",
		Short: "make this node ineligible for every VIP; a peer takes over",
		Long: `Makes this node ineligible for every VIP; a peer takes them over. The
withdraw flag is saved in state_dir and survives restarts until "vipctl
restore"; when it cannot be saved, withdraw fails (exit 1) unless --no-persist
is given. --wait returns only when every VIP this node held is held by another
node (make-before-break); --timeout bounds the wait. Withdraw is refused
(exit 3) when no other node is eligible for a VIP this node holds; --force
withdraws anyway and the VIP goes down. When it is refused or times out,
vipctl prints why each other node cannot take the VIP over.`,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withdraw(o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.wait, "wait", false, "return only when another node holds every VIP this node held")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "with --wait: how long to wait")
	f.BoolVar(&o.force, "force", false, "withdraw even when no other node is eligible (the VIP goes down)")
	f.BoolVar(&o.noPersist, "no-persist", false, "withdraw even when the flag cannot be saved (until vipd restarts only)")
	return cmd
}

func (e *env) restoreCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "restore",
		Short: "clear the withdraw flag: this node is eligible again",
		Long: `Clears the withdraw flag. With preempt = false (the default) the VIP does
not move back to this node; it becomes a candidate for the next failover.
Restoring a node that is not withdrawn succeeds.`,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.restore()
		},
	}
}

func (e *env) forgetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "forget NODE",
		Short: "drop a dead or left member from this node's membership and peer cache",
		Long: `Drops a dead or left member from this node's membership table and peer
cache, so a host removed without a clean stop no longer counts towards quorum
nor gets rejoined. Run it on every remaining node. It is refused (exit 3) for
a member that is alive.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: ExitUsage, msg: "vipctl forget: name the node to forget (see 'vipctl forget --help')"}
			}
			return nil
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return e.forgettable(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.forget(args[0])
		},
	}
}

func (e *env) decommissionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "decommission",
		Short: "mark this node as removed for good: the others forget it once it stops",
		Long: `Marks this node as being removed from the cluster for good (kubeadm reset,
a Machine deleted by Cluster API, a host retired). It keeps running as it
was; once vipd stops on it, every other node forgets it, as "vipctl forget"
run on each of them would, so it no longer counts in the quorum base. Run it
after "vipctl withdraw --wait" (the kubeadm and Cluster API hooks do), not
for maintenance: a node stopped for maintenance stays in the quorum base.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.decommission()
		},
	}
}

func (e *env) eventsCmd() *cobra.Command {
	var follow, asJSON bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "recent ownership, membership and health events",
		Long: `Prints this node's recent events, by kind: ownership, hold, release,
membership, health, withdraw, conflict, drift (a held VIP found missing and
announced again), clients (the VIP's clients reset or closed when it moved),
fence, node (what its Kubernetes Node says), restart (a restart in
place) and hook (how a run of the [hooks] command ended); docs/operations.md lists what each says. --follow keeps streaming
new ones, --json prints one JSON object per line.`,
		Args:              noArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.events(follow, asJSON)
		},
	}
	cmd.Flags().BoolVar(&follow, "follow", false, "keep streaming new events")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line (docs/operations.md)")
	return cmd
}

// Shells lists the shells `vipctl completion` writes scripts for.
func Shells() []string { return []string{"bash", "zsh", "fish"} }

// WriteCompletion writes root's completion script for shell to w.
func WriteCompletion(root *cobra.Command, shell string, w io.Writer) error {
	switch shell {
	case "bash":
		return root.GenBashCompletionV2(w, true)
	case "zsh":
		return root.GenZshCompletion(w)
	case "fish":
		return root.GenFishCompletion(w, true)
	}
	return fmt.Errorf("no completion for shell %q (want one of %s)", shell, strings.Join(Shells(), ", "))
}

func (e *env) completionCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "print the shell completion script",
		Long: `Prints the completion script for bash, zsh or fish. The packages install
them (/usr/share/bash-completion/completions/vipctl, the zsh vendor or
site-functions directory, /usr/share/fish/vendor_completions.d/vipctl.fish);
to load it by hand: source <(vipctl completion bash). "vipctl forget" completes
the dead and left members of the running vipd.`,
		ValidArgs: Shells(),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || !slices.Contains(Shells(), args[0]) {
				return &exitError{code: ExitUsage, msg: fmt.Sprintf("vipctl completion: name one shell: %s", strings.Join(Shells(), ", "))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := WriteCompletion(root, args[0], e.stdout); err != nil {
				return &exitError{code: ExitError, msg: "vipctl completion: " + err.Error()}
			}
			return nil
		},
	}
}
