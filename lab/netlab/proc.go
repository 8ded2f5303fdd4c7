package netlab

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a process the lab started inside a namespace. `ip netns exec`
// execs the command in place, so PID is the command's own PID.
type Proc struct {
	// Name says what the process is ("vipd n1", "probe").
	Name string
	// PID is the process id.
	PID int
	// Log is the file its output goes to (stdout too unless the starter
	// took stdout).
	Log string

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	closers []io.Closer
	once    sync.Once
}

// Start runs argv inside h's namespace with its output appended to logPath
// (stdout goes to stdout instead when it is not nil). The process is killed
// at teardown if it still runs.
func (l *Lab) Start(h *Host, name, logPath string, stdout io.Writer, argv ...string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	fmt.Fprintf(f, "==== %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.NS}, argv...)...)
	cmd.Stderr = f
	cmd.Stdout = f
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, PID: cmd.Process.Pid, Log: logPath, cmd: cmd, done: make(chan struct{}), closers: []io.Closer{f}}
	go func() {
		p.waitErr = cmd.Wait()
		for _, c := range p.closers {
			c.Close()
		}
		close(p.done)
	}()
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p, nil
}

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process if it still runs.
func (p *Proc) Signal(sig syscall.Signal) error {
	if !p.Running() {
		return nil
	}
	return syscall.Kill(p.PID, sig)
}

// Wait waits up to timeout for the process to exit and returns its exit
// error, or an error saying it still runs.
func (p *Proc) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.waitErr
	case <-time.After(timeout):
		return fmt.Errorf("%s (pid %d) still running after %v", p.Name, p.PID, timeout)
	}
}

// Stop sends sig and waits up to timeout for the process to exit; if it
// does not, it is killed and Stop returns an error saying so. The exit
// status itself is not an error: a signalled process exits non-zero.
func (p *Proc) Stop(sig syscall.Signal, timeout time.Duration) error {
	if err := p.Signal(sig); err != nil {
		return fmt.Errorf("signal %s (pid %d): %w", p.Name, p.PID, err)
	}
	if err := p.Wait(timeout); err != nil && p.Running() {
		p.Kill()
		return fmt.Errorf("%s (pid %d) did not exit within %v of %v; killed", p.Name, p.PID, timeout, sig)
	}
	return nil
}

// Kill sends SIGKILL and waits (bounded) for the process to be reaped.
func (p *Proc) Kill() {
	p.once.Do(func() {
		if p.Running() {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
	})
	p.Wait(10 * time.Second)
}

// ExitErr returns the exit error after the process ended (nil while it
// runs or when it exited 0).
func (p *Proc) ExitErr() error {
	if p.Running() {
		return nil
	}
	return p.waitErr
}
