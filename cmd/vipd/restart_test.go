package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/vipd/vipd/agent"
)

// TestStopKindOfJob: a systemd restart job is a restart in place; a stop
// job (systemctl stop, a shutdown, a package removal) or none hands off.
func TestStopKindOfJob(t *testing.T) {
	for job, want := range map[string]agent.StopKind{
		"restart": agent.StopRestart, "try-restart": agent.StopRestart, "reload-or-restart": agent.StopRestart,
		"stop": agent.StopHandoff, "": agent.StopHandoff, "start": agent.StopHandoff,
	} {
		if got := stopKindOfJob(job); got != want {
			t.Errorf("stopKindOfJob(%q) = %v, want %v", job, got, want)
		}
	}
}

// TestStopKinds: SIGUSR2 asks for a restart whatever systemd says; outside
// systemd a stop hands off; under it the job decides, and a failure to ask
// hands off.
func TestStopKinds(t *testing.T) {
	lg := slog.New(slog.DiscardHandler)
	job, jobErr := "restart", error(nil)
	s := &stopKinds{lg: lg, systemdJob: func(context.Context) (string, error) { return job, jobErr }}
	t.Setenv("INVOCATION_ID", "")
	t.Setenv("NOTIFY_SOCKET", "")
	if got := s.kind(); got != agent.StopHandoff {
		t.Errorf("outside systemd: %v, want stop", got)
	}
	t.Setenv("INVOCATION_ID", "0123456789abcdef")
	if got := s.kind(); got != agent.StopRestart {
		t.Errorf("systemd restart job: %v, want restart", got)
	}
	job = "stop"
	if got := s.kind(); got != agent.StopHandoff {
		t.Errorf("systemd stop job: %v, want stop", got)
	}
	jobErr = errors.New("no bus")
	if got := s.kind(); got != agent.StopHandoff {
		t.Errorf("systemd unreachable: %v, want stop", got)
	}
	s.usr2.Store(true)
	t.Setenv("INVOCATION_ID", "")
	if got := s.kind(); got != agent.StopRestart {
		t.Errorf("after SIGUSR2 outside systemd: %v, want restart", got)
	}
}

// TestStopKindsUSR2UnderSystemd: under systemd (INVOCATION_ID or
// NOTIFY_SOCKET set) a SIGUSR2 that is not part of a restart job hands off:
// vipd would exit 0, Restart=on-failure would not start the next process,
// and the VIPs would be dark for the grace and the unit down for good. A
// SIGUSR2 while systemd runs a restart job for the unit is a restart.
func TestStopKindsUSR2UnderSystemd(t *testing.T) {
	lg := slog.New(slog.DiscardHandler)
	for _, tt := range []struct {
		name, invocation, notify, job string
		jobErr                        error
		want                          agent.StopKind
	}{
		{"INVOCATION_ID, no job", "0123456789abcdef", "", "", nil, agent.StopHandoff},
		{"NOTIFY_SOCKET only, no job", "", "/run/systemd/notify", "", nil, agent.StopHandoff},
		{"a stop job", "0123456789abcdef", "/run/systemd/notify", "stop", nil, agent.StopHandoff},
		{"systemd unreachable", "0123456789abcdef", "", "", errors.New("no bus"), agent.StopHandoff},
		{"a restart job", "0123456789abcdef", "/run/systemd/notify", "restart", nil, agent.StopRestart},
		{"outside systemd", "", "", "", nil, agent.StopRestart},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("INVOCATION_ID", tt.invocation)
			t.Setenv("NOTIFY_SOCKET", tt.notify)
			s := &stopKinds{lg: lg, systemdJob: func(context.Context) (string, error) { return tt.job, tt.jobErr }}
			s.usr2.Store(true)
			if got := s.kind(); got != tt.want {
				t.Errorf("SIGUSR2: %v, want %v", got, tt.want)
			}
		})
	}
}
