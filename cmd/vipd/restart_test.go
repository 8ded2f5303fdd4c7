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
	if got := s.kind(); got != agent.StopRestart {
		t.Errorf("after SIGUSR2: %v, want restart", got)
	}
}
