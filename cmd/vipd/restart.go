package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/vipd/vipd/agent"
	"github.com/vipd/vipd/internal/childcaps"
)

// stopKinds tells the agent what a stop is for (agent.Options.StopKind):
// under systemd, a restart in place when systemd's job for this unit is a
// restart (systemctl restart, try-restart: the package scripts), whatever
// the signal; outside it, when SIGUSR2 asked for one; a stop otherwise
// (systemctl stop, a shutdown, a package removal, SIGTERM outside
// systemd), and whenever systemd cannot be asked.
//
// A SIGUSR2 under systemd without a restart job hands off: vipd would exit
// 0, and Restart=on-failure does not start a unit that exited 0, so the
// VIPs would be left for a process that never comes (dark for the grace,
// and the unit down for good). Making the unit come back instead is not
// vipd's to do: exiting non-zero makes ExecStopPost's cleanup see a
// failure and remove the addresses (and counts towards the start limit),
// and asking systemd for a restart job over D-Bus needs a privilege the
// unit's user (vipd) does not have. `systemctl restart vipd` is the way to
// restart in place under systemd.
type stopKinds struct {
	lg *slog.Logger
	// usr2: SIGUSR2 ended the daemon: a supervisor other than systemd
	// starts the next process (docs/operations.md).
	usr2 atomic.Bool
	// systemdJob returns the type of systemd's job for this process's
	// unit ("" for none).
	systemdJob func(ctx context.Context) (string, error)
}

// kind implements agent.Options.StopKind.
func (s *stopKinds) kind() agent.StopKind {
	usr2 := s.usr2.Load()
	if !underSystemd() {
		if usr2 {
			return agent.StopRestart
		}
		return agent.StopHandoff // SIGTERM outside systemd
	}
	ctx, cancel := context.WithTimeout(context.Background(), systemdTimeout)
	defer cancel()
	job, err := s.systemdJob(ctx)
	if err != nil {
		s.lg.Warn("cannot ask systemd what this stop is for: handing the VIPs off", "err", err)
		return agent.StopHandoff
	}
	s.lg.Info("systemd job for this unit", "job", cmp.Or(job, "none"))
	k := stopKindOfJob(job)
	if usr2 && k != agent.StopRestart {
		s.lg.Warn("SIGUSR2 under systemd without a restart job: handing the VIPs off (systemd would not start the next vipd); restart in place with systemctl restart")
	}
	return k
}

// underSystemd reports whether this process runs as a systemd service.
func underSystemd() bool {
	return os.Getenv("INVOCATION_ID") != "" || os.Getenv("NOTIFY_SOCKET") != ""
}

// stopKindOfJob maps a systemd job type to what the stop is for.
func stopKindOfJob(job string) agent.StopKind {
	switch job {
	case "restart", "try-restart", "reload-or-restart", "reload-or-try-restart":
		return agent.StopRestart
	}
	return agent.StopHandoff
}

// systemdTimeout bounds the questions to systemd at a stop.
const systemdTimeout = 2 * time.Second

// systemdJob asks systemd, on the system bus, for the job it runs for the
// unit of this process.
func systemdJob(ctx context.Context) (string, error) {
	conn, err := sddbus.NewSystemConnectionContext(ctx)
	if err != nil {
		return "", fmt.Errorf("system bus: %w", err)
	}
	defer conn.Close()
	unit, err := conn.GetUnitNameByPID(ctx, uint32(os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("unit of pid %d: %w", os.Getpid(), err)
	}
	jobs, err := conn.ListJobsContext(ctx)
	if err != nil {
		return "", fmt.Errorf("list jobs: %w", err)
	}
	for _, j := range jobs {
		if j.Unit == unit {
			return j.JobType, nil
		}
	}
	return "", nil
}

// nextAdopts implements agent.Options.NextAdopts: the binary at this
// process's executable path (after a package upgrade or downgrade, the
// file installed there now) is asked which restart protocol it speaks.
// A release without restarts in place does not know the flag.
func nextAdopts(lg *slog.Logger) func() bool {
	return func() bool {
		exe, err := os.Executable() // without " (deleted)" once replaced
		if err != nil {
			lg.Warn("restart: own executable", "err", err)
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), systemdTimeout)
		defer cancel()
		out, err := childcaps.Output(exec.CommandContext(ctx, exe, "--restart-protocol"))
		v, perr := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || perr != nil || v < agent.RestartProtocol {
			lg.Info("restart: the vipd that starts next does not take VIPs over", "binary", exe, "err", err, "answer", strings.TrimSpace(string(out)))
			return false
		}
		return true
	}
}
