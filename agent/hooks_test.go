package agent

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/vipd/vipd/agent/config"
)

// TestHookQueue: one VIP's queue starts a hook only when none runs, keeps
// one waiting change whatever the burst, tells each run the state the
// last one was told, and drops a waiting change that ends where it began.
func TestHookQueue(t *testing.T) {
	tr := func(from, to string) hookTransition { return hookTransition{VIP: "api", From: from, To: to} }
	var q hookQueue
	run, start, sup := q.offer(tr(hookInit, hookBackup))
	if !start || sup || run.From != hookInit || run.To != hookBackup {
		t.Fatalf("first offer: %+v start %v superseded %v; want init->backup started", run, start, sup)
	}
	// A burst while it runs: one waits, the rest supersede it.
	if _, start, sup := q.offer(tr(hookBackup, hookMaster)); start || sup {
		t.Fatalf("offer while running: start %v superseded %v; want it to wait", start, sup)
	}
	for i := 0; i < 100; i++ {
		to := []string{hookFault, hookBackup, hookMaster}[i%3]
		if _, start, sup := q.offer(tr("x", to)); start || !sup {
			t.Fatalf("offer %d while one waits: start %v superseded %v; want it to replace the waiting one", i, start, sup)
		}
	}
	// 100 % 3 == 1: the last offered was fault.
	next, ok, skipped := q.next()
	if !ok || skipped || next.From != hookBackup || next.To != hookFault {
		t.Fatalf("next: %+v ok %v skipped %v; want backup->fault (from what the last run was told)", next, ok, skipped)
	}
	if _, ok, _ := q.next(); ok || q.running {
		t.Fatal("next with nothing waiting: want none, not running")
	}
	// Idle again: an offer starts at once, from what the last run was told.
	run, start, _ = q.offer(tr("whatever the agent thought", hookBackup))
	if !start || run.From != hookFault {
		t.Fatalf("offer when idle: %+v start %v; want fault->backup started", run, start)
	}
	// A flap while it runs: backup -> master -> backup ends where it began.
	q.offer(tr(hookBackup, hookMaster))
	q.offer(tr(hookMaster, hookBackup))
	if _, ok, skipped := q.next(); ok || !skipped || q.running {
		t.Fatalf("a flap back to the told state: ok %v skipped %v running %v; want skipped, idle", ok, skipped, q.running)
	}
}

// recordingExec is a hook runner that records each run and, when gated,
// blocks it until the test lets it go.
type recordingExec struct {
	mu         sync.Mutex
	runs       []hookTransition
	running    map[string]int
	maxRunning map[string]int
	maxAll     int
	all        int
	started    chan hookTransition
	gate       map[string]chan struct{} // per VIP; nil: runs return at once
}

func newRecordingExec() *recordingExec {
	return &recordingExec{running: map[string]int{}, maxRunning: map[string]int{}, started: make(chan hookTransition, 1000), gate: map[string]chan struct{}{}}
}

func (r *recordingExec) exec(_ hookSpec, t hookTransition) hookOutcome {
	r.mu.Lock()
	r.runs = append(r.runs, t)
	r.running[t.VIP]++
	r.all++
	r.maxRunning[t.VIP] = max(r.maxRunning[t.VIP], r.running[t.VIP])
	r.maxAll = max(r.maxAll, r.all)
	gate := r.gate[t.VIP]
	r.mu.Unlock()
	r.started <- t
	if gate != nil {
		<-gate
	}
	r.mu.Lock()
	r.running[t.VIP]--
	r.all--
	r.mu.Unlock()
	return hookOutcome{Result: hookOK}
}

func (r *recordingExec) snapshot() []hookTransition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

// waitStarted returns the next run started, failing after 10s.
func (r *recordingExec) waitStarted(t *testing.T) hookTransition {
	t.Helper()
	select {
	case s := <-r.started:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no hook started within 10s")
		return hookTransition{}
	}
}

func testHooks(t *testing.T, exec hookExec) (*hooks, *sync.WaitGroup) {
	var wg sync.WaitGroup
	a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics(nil), events: newBroker()}
	h := newHooks(a)
	h.exec, h.spawn = exec, wg.Go
	h.configure(config.HooksConfig{Command: []string{"/bin/true"}})
	t.Cleanup(wg.Wait)
	return h, &wg
}

// TestHooksBurstBoundedAndOrdered: while a VIP's hook hangs, a burst of
// 1000 changes neither blocks the caller nor starts a second hook for that
// VIP; when it ends, one hook runs for the whole burst, from the state the
// first was told to the last; another VIP's hooks run meanwhile, and a
// flap back to the told state runs nothing.
func TestHooksBurstBoundedAndOrdered(t *testing.T) {
	rec := newRecordingExec()
	rec.gate["a"], rec.gate["b"] = make(chan struct{}), make(chan struct{})
	h, wg := testHooks(t, rec.exec)
	h.offer(hookTransition{VIP: "a", From: hookInit, To: hookBackup})
	h.offer(hookTransition{VIP: "b", From: hookInit, To: hookBackup})
	rec.waitStarted(t)
	rec.waitStarted(t)
	states := []string{hookMaster, hookBackup, hookFault}
	for i := 0; i < 1000; i++ {
		h.offer(hookTransition{VIP: "a", From: "?", To: states[i%3]})
	}
	// b flaps back to what its running hook was told.
	h.offer(hookTransition{VIP: "b", From: hookBackup, To: hookMaster})
	h.offer(hookTransition{VIP: "b", From: hookMaster, To: hookBackup})
	if n := len(rec.snapshot()); n != 2 {
		t.Fatalf("%d runs while the first two hang, want 2: %+v", n, rec.snapshot())
	}
	close(rec.gate["b"])
	close(rec.gate["a"])
	second := rec.waitStarted(t)
	wg.Wait()
	runs := rec.snapshot()
	var aRuns []string
	for _, r := range runs {
		if r.VIP == "a" {
			aRuns = append(aRuns, r.From+"->"+r.To)
		}
	}
	// 999 % 3 == 0: the last of the burst was master.
	if want := []string{"init->backup", "backup->master"}; !slices.Equal(aRuns, want) {
		t.Errorf("a's runs %v, want %v", aRuns, want)
	}
	if second.VIP != "a" || len(runs) != 3 {
		t.Errorf("runs %+v: want b's flap to run nothing", runs)
	}
	if rec.maxRunning["a"] != 1 || rec.maxRunning["b"] != 1 || rec.maxAll != 2 {
		t.Errorf("at most %d of a's and %d of b's hooks at once, %d in all; want 1, 1 and 2 (VIPs independent)", rec.maxRunning["a"], rec.maxRunning["b"], rec.maxAll)
	}
	if got := testutil.ToFloat64(h.metrics.hookSuperseded.WithLabelValues("a")); got != 999 {
		t.Errorf("a: %v superseded, want 999 (the burst less the one that ran)", got)
	}
	if got := testutil.ToFloat64(h.metrics.hookSuperseded.WithLabelValues("b")); got != 2 {
		t.Errorf("b: %v superseded, want 2 (one replaced, one dropped)", got)
	}
	if got := testutil.ToFloat64(h.metrics.hookRuns.WithLabelValues("a", hookMaster, hookOK)); got != 1 {
		t.Errorf("vipd_hook_runs_total{a,master,ok} = %v, want 1", got)
	}
}

// TestHookStateOf: master while held; fault for a down interface, a failed
// announce or a failed check (not one still rising since start); backup
// otherwise, saying why.
func TestHookStateOf(t *testing.T) {
	a := &Agent{}
	cfg := config.VIPConfig{Name: "api", Interface: "eth0"}
	for _, tc := range []struct {
		name        string
		v           vipState
		state, want string
	}{
		{"held", vipState{held: true, heldReason: "owner", healthy: true}, hookMaster, "owner"},
		{"held with its interface down (not released yet)", vipState{held: true, down: true}, hookMaster, ""},
		{"interface down", vipState{down: true, healthy: true}, hookFault, "interface eth0 is down"},
		{"announce failed", vipState{failing: true, failReason: "netlink: no such device", healthy: true}, hookFault, "announce failed: netlink: no such device"},
		{"check failed", vipState{healthFailed: true, healthDetail: "unhealthy: status 500"}, hookFault, "unhealthy: status 500"},
		{"check still rising since start", vipState{healthy: false, healthDetail: "unhealthy"}, hookBackup, "started"},
		{"released", vipState{healthy: true, hookState: hookMaster, releaseReason: "lost quorum: 1 of 3 known members alive"}, hookBackup, "lost quorum: 1 of 3 known members alive"},
		{"out of a fault", vipState{healthy: true, hookState: hookFault}, hookBackup, "can hold it again"},
	} {
		v := tc.v
		v.cfg = cfg
		state, reason := a.hookStateOf(&v)
		if state != tc.state || reason != tc.want {
			t.Errorf("%s: %s (%q), want %s (%q)", tc.name, state, reason, tc.state, tc.want)
		}
	}
}

// TestHealthFaultForHooks: a check failing makes the VIP a fault until it
// is healthy again, rising included; a check rising since start is not.
func TestHealthFaultForHooks(t *testing.T) {
	a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil)), events: newBroker(), now: time.Now}
	a.st.checks = &healthChecks{running: map[string]*checker{"k": {id: 1}}}
	v := &vipState{cfg: config.VIPConfig{Name: "api"}}
	a.st.vips = map[string]*vipState{"api": v}
	steps := []struct {
		r     healthResult
		fault bool
	}{
		{healthResult{Checker: 1, VIP: "api", Healthy: false}, false}, // first verdict: rising
		{healthResult{Checker: 1, VIP: "api", Healthy: true}, false},
		{healthResult{Checker: 1, VIP: "api", Healthy: false, Err: fmt.Errorf("status 500")}, true},
		{healthResult{Checker: 1, VIP: "api", Healthy: false}, true}, // rising again, not yet healthy
		{healthResult{Checker: 1, VIP: "api", Healthy: true}, false},
	}
	for i, s := range steps {
		a.onHealth(s.r)
		if state, _ := a.hookStateOf(v); (state == hookFault) != s.fault {
			t.Errorf("step %d (%+v): state %s, want fault %v", i, s.r, state, s.fault)
		}
	}
}

// hookScript runs script with sh under a spec with timeout.
func runHook(script string, timeout time.Duration) hookOutcome {
	spec := hookSpec{argv: []string{"/bin/sh", "-c", script}, timeout: timeout}
	return execHook(spec, hookTransition{VIP: "api", Address: "192.0.2.10", Node: "cp-1", From: hookBackup, To: hookMaster, Reason: "owner"})
}

// alive reports whether pid runs (not gone, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// goneSoon waits (at most 5s, bounded) for pid to be gone or a zombie: the
// kernel delivers a SIGKILL to it asynchronously.
func goneSoon(pid int) bool {
	for i := 0; i < 500; i++ {
		if !alive(pid) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	return pid
}

// TestExecHookEnvironment: a real command sees exactly PATH and the
// VIPD_ variables, runs from /, and its exit status comes back.
func TestExecHookEnvironment(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	o := runHook(fmt.Sprintf("env > %s; pwd >> %s; echo to stderr >&2; exit 3", out, out), 10*time.Second)
	if o.Result != hookFailed || o.ExitCode != 3 || o.Output != "to stderr" {
		t.Errorf("outcome %+v, want failed, exit 3, its output", o)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	got := map[string]string{}
	for _, l := range lines[:len(lines)-1] {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	want := map[string]string{"VIPD_VIP": "api", "VIPD_ADDRESS": "192.0.2.10", "VIPD_NODE": "cp-1",
		"VIPD_OLD_STATE": "backup", "VIPD_NEW_STATE": "master", "VIPD_REASON": "owner"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && k != "PATH" && k != "PWD" && k != "SHLVL" && k != "_" {
			t.Errorf("the hook's environment has %s (vipd's own environment leaked)", k)
		}
	}
	if cwd := lines[len(lines)-1]; cwd != "/" {
		t.Errorf("working directory %q, want /", cwd)
	}
	if o := runHook("exit 0", 10*time.Second); o.Result != hookOK || o.ExitCode != 0 || o.Err != nil {
		t.Errorf("exit 0: %+v, want ok", o)
	}
	if o := execHook(hookSpec{argv: []string{"/nonexistent/hook"}, timeout: time.Second}, hookTransition{}); o.Result != hookError || o.Err == nil {
		t.Errorf("a missing command: %+v, want error", o)
	}
}

// TestExecHookTimeoutKillsGroup: a hook that hangs is killed at its
// timeout with the children it started, by SIGTERM, or by SIGKILL when it
// ignores SIGTERM; and one that exits leaving a child behind has that
// child killed.
func TestExecHookTimeoutKillsGroup(t *testing.T) {
	for _, tc := range []struct {
		name, script, result string
	}{
		{"hangs", "sleep 300 & echo $! > %s; wait", hookTimeout},
		{"hangs, ignoring SIGTERM", "trap '' TERM; sleep 300 & echo $! > %s; wait; wait", hookTimeout},
		{"exits, leaving a child", "sleep 300 > /dev/null 2>&1 & echo $! > %s; exit 0", hookOK},
		{"exits, leaving a child holding its output", "sleep 300 & echo $! > %s; exit 0", hookOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			o := runHook(fmt.Sprintf(tc.script, pidFile), 300*time.Millisecond)
			child := readPid(t, pidFile)
			t.Cleanup(func() {
				if alive(child) {
					_ = unix.Kill(child, unix.SIGKILL) // started by this test
				}
			})
			if o.Result != tc.result {
				t.Errorf("result %s (%+v), want %s", o.Result, o, tc.result)
			}
			if tc.result == hookTimeout && o.ExitCode != -1 {
				t.Errorf("exit code %d, want -1 (killed)", o.ExitCode)
			}
			if !goneSoon(child) {
				t.Errorf("the hook's child %d still runs after the hook's end", child)
			}
		})
	}
}

// TestExecHookUser: hooks.user runs the command as that user, with no
// capability but those of hooks.capabilities. Root and VIPD_NETNS_TESTS=1
// only (it switches users).
func TestExecHookUser(t *testing.T) {
	if os.Geteuid() != 0 || os.Getenv("VIPD_NETNS_TESTS") != "1" {
		t.Skip("needs root and VIPD_NETNS_TESTS=1 (switches to user nobody)")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, tc := range []struct {
		name string
		caps []uint
		eff  uint64
	}{
		{"no capability", nil, 0},
		{"CAP_NET_RAW kept", []uint{unix.CAP_NET_RAW}, 1 << unix.CAP_NET_RAW},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := hookSpec{argv: []string{"/bin/cat", "/proc/self/status"}, timeout: 10 * time.Second,
				uid: uint32(uid), gid: uint32(gid), asUser: true, caps: tc.caps}
			o := execHook(spec, hookTransition{})
			if o.Result != hookOK {
				t.Fatalf("%+v", o)
			}
			b := []byte(o.Output)
			fields := map[string]string{}
			for l := range strings.Lines(string(b)) {
				k, v, _ := strings.Cut(strings.TrimSpace(l), ":\t")
				fields[k] = v
			}
			if f := strings.Fields(fields["Uid"]); len(f) == 0 || f[0] != u.Uid {
				t.Errorf("Uid %q, want %s", fields["Uid"], u.Uid)
			}
			if f := strings.Fields(fields["Gid"]); len(f) == 0 || f[0] != u.Gid {
				t.Errorf("Gid %q, want %s", fields["Gid"], u.Gid)
			}
			if g := fields["Groups"]; strings.TrimSpace(g) != "" {
				t.Errorf("supplementary groups %q, want none", g)
			}
			for _, k := range []string{"CapEff", "CapPrm", "CapAmb"} {
				n, _ := strconv.ParseUint(fields[k], 16, 64)
				if n != tc.eff {
					t.Errorf("%s %#x, want %#x", k, n, tc.eff)
				}
			}
		})
	}
}

// hookRecorders gives each node of c a recording hook runner and [hooks]
// in its configuration.
func hookRecorders(c *testCluster) map[string]*recordingExec {
	recs := map[string]*recordingExec{}
	c.tail = map[string]string{}
	for name := range c.nodes {
		recs[name] = newRecordingExec()
		c.tail[name] = "[hooks]\ncommand = [\"/usr/local/bin/vip-notify\"]\n"
		c.nodes[name].cfg = c.config(name, "")
	}
	c.beforeRun = func(name string, a *Agent) { a.hooks.exec = recs[name].exec }
	return recs
}

// waitRun waits (bounded) until rec has run a hook from one state to
// another.
func waitRun(t *testing.T, rec *recordingExec, from, to string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range rec.snapshot() {
			if r.From == from && r.To == to {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s->%s hook within 10s: %+v", from, to, rec.snapshot())
}

// checkChain: a node's hooks start from init, each run's old state is the
// one before's new state, and each names the VIP, its address and the node.
func checkChain(t *testing.T, node string, runs []hookTransition) {
	t.Helper()
	prev := hookInit
	for i, r := range runs {
		if r.From != prev || r.From == r.To || r.VIP != "apiserver" || r.Address != "192.0.2.10" || r.Node != node {
			t.Errorf("%s: run %d %+v does not follow %s, or names another VIP or node: %+v", node, i, r, prev, runs)
		}
		prev = r.To
	}
}

// TestClusterHooksTellTransitions: the hooks of a three-node cluster are
// told each node's changes: the owner takes the VIP (backup to master),
// loses it when its interface goes down (master to fault), the successor
// takes it, and hands it off when it stops (master to backup).
func TestClusterHooksTellTransitions(t *testing.T) {
	c := newTestCluster(t, "a", "b", "c")
	recs := hookRecorders(c)
	owner := c.startSteady()
	waitRun(t, recs[owner], hookBackup, hookMaster)
	c.nodes[owner].linkDown.Store(true)
	next := c.waitHolders(5*time.Second, func(h []string) bool { return len(h) == 1 && h[0] != owner }, "after owner link down")[0]
	waitRun(t, recs[owner], hookMaster, hookFault)
	waitRun(t, recs[next], hookBackup, hookMaster)
	c.stop(next) // Run returns after its hooks ended
	runs := recs[next].snapshot()
	if last := runs[len(runs)-1]; last.From != hookMaster || last.To != hookBackup {
		t.Errorf("%s's last hook %+v, want master->backup at its stop", next, last)
	}
	for name, rec := range recs {
		checkChain(t, name, rec.snapshot())
	}
	for _, r := range recs[owner].snapshot() {
		if r.To == hookFault && r.Reason != "interface fake0 is down" {
			t.Errorf("fault hook's reason %q, want the interface down", r.Reason)
		}
	}
}

// TestClusterHookHangsLoopGoesOn: while a node's first hook hangs, the
// node still claims the VIP; the change to master waits for the hanging
// hook and runs once it ends.
func TestClusterHookHangsLoopGoesOn(t *testing.T) {
	c := newTestCluster(t, "a", "b")
	recs := hookRecorders(c)
	gate := make(chan struct{})
	recs["a"].gate["apiserver"] = gate
	c.start("a")
	released := false
	t.Cleanup(func() { // before the stop: Run waits for its hooks
		if !released {
			close(gate)
		}
	})
	if first := recs["a"].waitStarted(t); first.From != hookInit || first.To != hookBackup {
		t.Fatalf("first hook %+v, want init->backup", first)
	}
	c.waitHolders(10*time.Second, func(h []string) bool { return slices.Equal(h, []string{"a"}) }, "a alone, its hook hanging")
	if runs := recs["a"].snapshot(); len(runs) != 1 {
		t.Errorf("hooks run while the first hangs: %+v, want only the first", runs)
	}
	if got := testutil.ToFloat64(c.nodes["a"].agent.metrics.hookRunning.WithLabelValues("apiserver")); got != 1 {
		t.Errorf("vipd_hook_running = %v, want 1 while it hangs", got)
	}
	released = true
	close(gate)
	if next := recs["a"].waitStarted(t); next.From != hookBackup || next.To != hookMaster {
		t.Errorf("after the hang: %+v, want backup->master", next)
	}
}
