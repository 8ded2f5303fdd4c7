// Command vipd keeps a control-plane virtual IP reachable: it joins a
// membership cluster with its peers, elects an owner per VIP and announces
// the VIP by L2 (address + gratuitous ARP / unsolicited NA) or BGP.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/vipd/vipd/agent"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/internal/backendconfig"
	"github.com/vipd/vipd/internal/keepalived"
	"github.com/vipd/vipd/l2"
)

var version = "dev"

const usage = `vipd keeps a cluster's control-plane virtual IP reachable.

Usage:
  vipd [--config PATH]            run the daemon
  vipd [--config PATH] --check    validate the configuration and this host
                                  (interfaces, key file access, the sysctls
                                  an L2 VIP needs, the socket group and
                                  directories): every check the start runs
                                  short of binding, so vipd refuses nothing
                                  --check accepted; then exit
  vipd cleanup [--config PATH]    remove every VIP address vipd may have left on
                                  this host: those the configuration names and
                                  those recorded in state_dir (systemd runs it
                                  as ExecStopPost, so a crashed agent leaves
                                  nothing behind); needs no secrets and works
                                  with a broken configuration file
  vipd convert-keepalived FILE    print the vipd.toml that does what a
                                  keepalived.conf does (the kubeadm HA
                                  guide's shapes), and on standard error
                                  what it could not carry over
                                  (docs/keepalived.md)
  vipd --version

Signals: SIGTERM/SIGINT hand the held VIPs to a peer (make-before-break,
bounded by cluster.handoff_timeout), leave the cluster and exit; under
systemd, a SIGTERM that is part of a restart (systemctl restart or
try-restart, as the package scripts run) keeps them in place instead, for
the next process to take over within cluster.restart_grace (peers claim as
for a crash if it is not back by then). SIGUSR2 restarts in place for a
supervisor other than systemd: exit, leaving the VIPs for the vipd it starts
next (under systemd it hands off unless systemd's job is a restart: use
systemctl restart). SIGHUP reloads the configuration; an invalid file keeps the running
one and logs every problem.

Environment: GOMAXPROCS (default 1 for vipd: its goroutines wake on timers
and packets, and one scheduler thread keeps an idle node's CPU use down).

Files: the configuration (TOML, every key documented in vipd.toml.example),
state_dir (peer cache, withdraw flag), the API socket used by vipctl.

Flags:
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := ""
	if len(args) > 0 && args[0] == "cleanup" {
		cmd, args = "cleanup", args[1:]
	}
	if len(args) > 0 && args[0] == "convert-keepalived" {
		return convertKeepalived(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("vipd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below: --help to stdout, a bad flag's to stderr
	configPath := fs.String("config", config.DefaultConfigPath, "the configuration file, at `PATH`")
	check := fs.Bool("check", false, "validate the configuration: print \"configuration OK\" and exit 0, or list every problem as PATH:LINE:COL: message and exit 1")
	showVersion := fs.Bool("version", false, "print the version and exit")
	restartProtocol := fs.Bool("restart-protocol", false, "print the version of the restart record this vipd takes over (restarts in place) and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, fs)
			return 0
		}
		printUsage(stderr, fs)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "vipd: unexpected argument %q (see vipd --help)\n", fs.Arg(0))
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "vipd", version)
		return 0
	}
	if *restartProtocol {
		fmt.Fprintln(stdout, agent.RestartProtocol)
		return 0
	}
	if cmd == "cleanup" {
		// Before Load: cleanup must work whatever state the file and the
		// secrets it names are in.
		lg := slog.New(slog.NewTextHandler(stderr, nil))
		if err := cleanup(lg, *configPath); err != nil {
			lg.Error("vipd cleanup", "err", err)
			return 1
		}
		return 0
	}
	cfg, err := backendconfig.Rules().Load(*configPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	// The same checks for --check and for the start: a file --check
	// accepts is one the daemon starts with, short of binding.
	warnings, hostErrs := agent.Preflight(cfg, config.HostEnv{CheckL2: checkL2})
	if *check {
		for _, w := range warnings {
			fmt.Fprintln(stderr, "warning:", w.Error())
		}
		for _, e := range hostErrs {
			fmt.Fprintln(stderr, e.Error())
		}
		if len(hostErrs) > 0 {
			return 1
		}
		fmt.Fprintln(stdout, "configuration OK")
		return 0
	}
	if len(hostErrs) > 0 {
		for _, e := range hostErrs {
			fmt.Fprintln(stderr, e.Error())
		}
		return 1
	}
	procs := limitProcs(os.Getenv)
	level := new(slog.LevelVar)
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	lg := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("node", cfg.NodeName)
	slog.SetDefault(lg)
	lg.Info("starting", "version", version, "gomaxprocs", procs)
	for _, w := range warnings {
		lg.Warn(w.Msg)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	kinds := &stopKinds{lg: lg, systemdJob: systemdJob}
	ctx, restart := context.WithCancel(ctx)
	defer restart()
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	defer signal.Stop(usr2)
	go func() {
		select {
		case <-ctx.Done():
		case <-usr2:
			lg.Info("SIGUSR2: stopping for a restart in place")
			kinds.usr2.Store(true)
			restart()
		}
	}()
	// A vipd killed in the middle of a planned handoff, with no `vipd
	// cleanup` after it (a kill outside systemd), left its daisy chain's
	// tables: a quiesce table would keep this host deaf to ARP for a VIP
	// it claims later. A restart in place leaves none (Close removes them).
	if removed, err := l2.CleanupNftables(); err != nil {
		lg.Info("nftables unavailable: planned L2 handoffs close their connections at once (no daisy chain)", "err", err)
	} else if len(removed) > 0 {
		lg.Warn("removed the daisy chain's tables a previous vipd left", "tables", removed)
	}
	// And a lingering VIP's local route, which would answer ARP for it.
	if removed, err := l2.CleanupLingerRoutes(); err != nil {
		lg.Warn("remove the local routes of VIPs a previous vipd lingered on", "err", err)
	} else if len(removed) > 0 {
		lg.Warn("removed the local routes of VIPs a previous vipd lingered on", "routes", removed)
	}
	a, err := agent.New(cfg, agent.Options{
		Logger: lg, LogLevel: level, Version: version,
		Backends: newBackends, RemoveAddresses: removeAddresses(lg),
		LinkUp: l2.LinkUp, LinkEvents: watchInterfaces,
		StopKind: kinds.kind, NextAdopts: nextAdopts(lg),
		ConfigRules: backendconfig.Rules(),
	})
	if err != nil {
		lg.Error("vipd", "err", err)
		return 1
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				lg.Info("SIGHUP: reloading configuration", "path", cfg.Path)
				a.Reload()
			}
		}
	}()
	if err := a.Run(ctx); err != nil {
		// One plain line: it says what to do, and is what systemd's
		// journal shows for the failed start.
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// convertKeepalived is `vipd convert-keepalived FILE`.
func convertKeepalived(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "usage: vipd convert-keepalived FILE (a keepalived.conf; see docs/keepalived.md)")
		return 2
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "vipd convert-keepalived: %v\n", err)
		return 1
	}
	conf, err := keepalived.Parse(string(b))
	if err != nil {
		fmt.Fprintf(stderr, "vipd convert-keepalived: %s: %v\n", args[0], err)
		return 1
	}
	out, notes := keepalived.Convert(conf)
	fmt.Fprint(stdout, out)
	for _, n := range notes {
		fmt.Fprintf(stderr, "vipd convert-keepalived: not carried over: %s\n", n)
	}
	return 0
}

// printUsage writes the usage and the flags, spelt with two dashes as the
// documents spell them (the flag package accepts one or two).
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, usage)
	fs.VisitAll(func(f *flag.Flag) {
		name, help := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		if f.DefValue != "" && f.DefValue != "false" {
			help += fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, help)
	})
}

// checkL2 is the agent's HostEnv.CheckL2: l2.CheckHost, one line per
// warning.
func checkL2(iface string, addr netip.Addr) ([]string, error) {
	ws, err := l2.CheckHost(iface, addr)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.String())
	}
	return out, nil
}

// limitProcs runs the daemon on one scheduler thread unless GOMAXPROCS is
// set. vipd's goroutines (memberlist probes, health checks, the reconcile
// loop) each wake briefly many times a second; with more than one P every
// wake-up also wakes and parks a spinning thread, which was a good part of
// an idle node's CPU (docs/benchmarks.md). Under load its work is syscalls,
// which hand the P over. It returns the GOMAXPROCS in effect.
func limitProcs(getenv func(string) string) int {
	if getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	return runtime.GOMAXPROCS(0)
}
