package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/internal/childcaps"
)

// A VIP's state on this node, as a hook is told it (VIPD_OLD_STATE,
// VIPD_NEW_STATE): keepalived's MASTER, BACKUP and FAULT, and init before
// the first.
const (
	hookInit   = "init"
	hookMaster = "master" // this node holds the VIP
	hookBackup = "backup" // it does not, and could
	hookFault  = "fault"  // it does not, and cannot
)

// Results of a hook run (the result label of vipd_hook_runs_total).
const (
	hookOK      = "ok"      // exit status 0
	hookFailed  = "failed"  // another exit status, or killed by a signal it was not sent
	hookTimeout = "timeout" // killed after hooks.timeout
	hookError   = "error"   // could not be started
)

// hookKillGrace is how long a hook that overran its timeout has between
// SIGTERM and SIGKILL, and how long its output is waited for once it has
// exited (a process it started elsewhere may hold the pipe open).
const hookKillGrace = time.Second

// hookOutputMax bounds the output of a hook that is kept for the log.
const hookOutputMax = 4 << 10

// hookTransition is one change of a VIP's state on this node.
type hookTransition struct {
	VIP     string
	Address string
	Node    string
	From    string
	To      string
	Reason  string
}

// env is the hook's environment.
func (t hookTransition) env() []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	return []string{"PATH=" + path, "VIPD_VIP=" + t.VIP, "VIPD_ADDRESS=" + t.Address, "VIPD_NODE=" + t.Node,
		"VIPD_OLD_STATE=" + t.From, "VIPD_NEW_STATE=" + t.To, "VIPD_REASON=" + t.Reason}
}

// hookQueue serialises one VIP's hooks: at most one runs, and at most one
// waits. A change offered while a hook runs waits for it; changes that
// wait are folded into the one waiting, which runs from the state the last
// hook was told to the newest (and not at all when the two are the same),
// so the states the hooks are told form a chain, each run's old state the
// previous run's new one. Pure: the hooks type does the I/O.
type hookQueue struct {
	running bool
	told    string // the state the last started hook was told ("": none yet)
	pending *hookTransition
}

// offer records t. When no hook runs, it returns t (its From the state the
// last hook was told) to start now; otherwise t waits, and superseded says
// whether it replaced a waiting change that will now never run on its
// own.
func (q *hookQueue) offer(t hookTransition) (run hookTransition, start, superseded bool) {
	if q.told != "" {
		t.From = q.told
	}
	if q.running {
		superseded = q.pending != nil
		q.pending = &t
		return hookTransition{}, false, superseded
	}
	q.running, q.told = true, t.To
	return t, true, false
}

// next is called when the running hook has ended. It returns the change to
// run next, if any; when ok is false no hook runs any more. skipped says
// whether the waiting change was dropped because it ends where the last
// hook's began (a flap while the hook ran).
func (q *hookQueue) next() (t hookTransition, ok, skipped bool) {
	p := q.pending
	q.pending = nil
	if p == nil {
		q.running = false
		return hookTransition{}, false, false
	}
	p.From = q.told
	if p.From == p.To {
		q.running = false
		return hookTransition{}, false, true
	}
	q.told = p.To
	return *p, true, false
}

// hookSpec is the command a hook runs, from [hooks].
type hookSpec struct {
	argv     []string
	timeout  time.Duration
	uid, gid uint32
	asUser   bool
	caps     []uint
}

func newHookSpec(h config.HooksConfig) hookSpec {
	s := hookSpec{argv: append([]string(nil), h.Command...), timeout: h.TimeoutDuration(), caps: h.CapabilityNumbers()}
	s.uid, s.gid, s.asUser = h.Credential()
	return s
}

// hookOutcome is how a hook run ended.
type hookOutcome struct {
	Result   string // hookOK, hookFailed, hookTimeout, hookError
	ExitCode int    // -1 when killed by a signal or not started
	Duration time.Duration
	Output   string // its stdout and stderr, bounded
	Err      error  // why it failed, nil when it succeeded
}

// hookExec runs one hook to its end.
type hookExec func(spec hookSpec, t hookTransition) hookOutcome

// hooks runs the [hooks] command at each change of a VIP's state, one
// runner goroutine per VIP while it has a hook to run. The loop offers the
// changes (offer never blocks: it takes a mutex held only for
// bookkeeping) and goes on; the runners log, count and publish each run's
// end.
type hooks struct {
	exec    hookExec
	log     *slog.Logger
	metrics *metrics
	events  *broker
	spawn   func(func()) // starts a runner goroutine Run waits for

	mu     sync.Mutex
	spec   hookSpec
	queues map[string]*hookQueue
}

func newHooks(a *Agent) *hooks {
	return &hooks{exec: execHook, log: a.log, metrics: a.metrics, events: a.events,
		spawn: a.goroutines.Go, queues: map[string]*hookQueue{}}
}

// configure sets the command runs started from now on use.
func (h *hooks) configure(c config.HooksConfig) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.spec = newHookSpec(c)
}

// offer hands a change to its VIP's queue, starting a runner when none
// runs. Without a command it does nothing.
func (h *hooks) offer(t hookTransition) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.spec.argv) == 0 {
		return
	}
	q := h.queues[t.VIP]
	if q == nil {
		q = &hookQueue{}
		h.queues[t.VIP] = q
	}
	run, start, superseded := q.offer(t)
	if superseded {
		h.metrics.hookSuperseded.WithLabelValues(t.VIP).Inc()
		h.log.Debug("hook change superseded by a later one while a hook runs", "vip", t.VIP, "to", t.To)
	}
	if start {
		spec := h.spec
		h.spawn(func() { h.runner(q, spec, run) })
	}
}

// forget drops the idle queues of VIPs that are gone.
func (h *hooks) forget(keep map[string]*vipState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, q := range h.queues {
		if _, ok := keep[name]; !ok && !q.running {
			delete(h.queues, name)
			h.metrics.hookRunning.DeleteLabelValues(name)
		}
	}
}

// runner runs t, then what waits in q, until nothing does.
func (h *hooks) runner(q *hookQueue, spec hookSpec, t hookTransition) {
	for {
		h.metrics.hookRunning.WithLabelValues(t.VIP).Set(1)
		o := h.exec(spec, t)
		h.metrics.hookRunning.WithLabelValues(t.VIP).Set(0)
		h.report(spec, t, o)
		h.mu.Lock()
		next, ok, skipped := q.next()
		spec = h.spec
		h.mu.Unlock()
		if skipped {
			h.metrics.hookSuperseded.WithLabelValues(t.VIP).Inc()
			h.log.Debug("hook change dropped: the VIP is back in the state the last hook was told", "vip", t.VIP, "state", t.To)
		}
		if !ok || len(spec.argv) == 0 {
			if ok { // the command was removed meanwhile
				h.mu.Lock()
				q.running, q.pending = false, nil
				h.mu.Unlock()
			}
			return
		}
		t = next
	}
}

// report logs, counts and publishes how a run ended.
func (h *hooks) report(spec hookSpec, t hookTransition, o hookOutcome) {
	h.metrics.hookRuns.WithLabelValues(t.VIP, t.To, o.Result).Inc()
	h.metrics.hookDuration.WithLabelValues(t.VIP).Observe(o.Duration.Seconds())
	d := o.Duration.Round(time.Millisecond)
	var msg string
	switch o.Result {
	case hookOK:
		msg = fmt.Sprintf("exit status 0 in %s", d)
	case hookTimeout:
		msg = fmt.Sprintf("killed after the %s timeout", spec.timeout)
	case hookError:
		msg = fmt.Sprintf("not started: %v", o.Err)
	default:
		msg = fmt.Sprintf("%v after %s", o.Err, d)
	}
	attrs := []any{"vip", t.VIP, "from", t.From, "to", t.To, "reason", t.Reason, "result", o.Result,
		"exit_code", o.ExitCode, "duration", d, "command", spec.argv[0]}
	if o.Result == hookOK {
		h.log.Info("hook ran", attrs...)
	} else {
		h.log.Warn("hook failed", append(attrs, "err", msg, "output", truncate(o.Output, 200))...)
	}
	h.events.publish(&apipb.Event{Kind: "hook", Vip: t.VIP, Node: t.Node, From: t.From, To: t.To, Reason: t.Reason,
		Message: o.Result + ": " + msg})
}

// execHook runs the hook's command in a process group of its own, with
// only the capabilities spec keeps, as spec's user: at the timeout the
// group gets SIGTERM, and SIGKILL hookKillGrace later; once the command
// has exited, whatever it left in its group is killed. The group is
// signalled only while the command is not yet reaped, so its id cannot
// have been reused.
func execHook(spec hookSpec, t hookTransition) hookOutcome {
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Dir = "/"
	cmd.Env = t.env()
	out := &boundedBuffer{max: hookOutputMax}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = hookKillGrace
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if spec.asUser {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: spec.uid, Gid: spec.gid, Groups: []uint32{}}
		for _, c := range spec.caps {
			cmd.SysProcAttr.AmbientCaps = append(cmd.SysProcAttr.AmbientCaps, uintptr(c))
		}
	}
	start := time.Now()
	if err := childcaps.StartKeeping(cmd, spec.caps); err != nil {
		return hookOutcome{Result: hookError, ExitCode: -1, Err: err}
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		waitExited(pid)
	}()
	timer := time.NewTimer(spec.timeout)
	defer timer.Stop()
	timedOut := false
	select {
	case <-exited:
	case <-timer.C:
		timedOut = true
		_ = unix.Kill(-pid, unix.SIGTERM)
		grace := time.NewTimer(hookKillGrace)
		select {
		case <-exited:
		case <-grace.C:
			_ = unix.Kill(-pid, unix.SIGKILL)
			<-exited
		}
		grace.Stop()
	}
	// The command has exited and is not reaped yet: its group id is still
	// its own.
	_ = unix.Kill(-pid, unix.SIGKILL)
	err := cmd.Wait()
	o := hookOutcome{Duration: time.Since(start), ExitCode: cmd.ProcessState.ExitCode(), Output: out.String()}
	switch {
	case timedOut:
		o.Result, o.Err = hookTimeout, fmt.Errorf("killed after the %s timeout", spec.timeout)
	case err == nil || errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success():
		o.Result = hookOK
	default:
		o.Result, o.Err = hookFailed, err
	}
	return o
}

// waitExited waits until process pid has exited, leaving it to be reaped
// (WNOWAIT).
func waitExited(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *boundedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.max - len(w.b); n > 0 {
		w.b = append(w.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (w *boundedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.TrimSpace(string(w.b))
}

// hookStateOf is a VIP's state on this node now, and why.
func (a *Agent) hookStateOf(v *vipState) (state, reason string) {
	switch {
	case v.held:
		return hookMaster, v.heldReason
	case v.down:
		return hookFault, "interface " + v.cfg.Interface + " is down"
	case v.failing:
		return hookFault, "announce failed: " + v.failReason
	case a.st.fence.Fenced() && v.cfg.Announce != config.AnnounceAll:
		return hookFault, "fenced: no majority of the known members confirmed hearing this node"
	case v.healthFailed:
		return hookFault, v.healthDetail
	}
	switch v.hookState {
	case hookMaster:
		return hookBackup, v.releaseReason
	case "", hookInit:
		return hookBackup, "started"
	}
	return hookBackup, "can hold it again"
}

// noteHookStates offers every VIP's change of state since the last call to
// the hooks. Only the loop calls it.
func (a *Agent) noteHookStates() {
	for _, name := range a.vipNames() {
		a.noteHookState(a.st.vips[name])
	}
	a.hooks.forget(a.st.vips)
}

// noteHookState offers v's change of state since the last call, if any.
func (a *Agent) noteHookState(v *vipState) {
	state, reason := a.hookStateOf(v)
	from := v.hookState
	if from == "" {
		from = hookInit
	}
	if state == from {
		return
	}
	v.hookState = state
	a.hooks.offer(hookTransition{VIP: v.cfg.Name, Address: v.cfg.Addr().String(), Node: a.self, From: from, To: state, Reason: reason})
}
