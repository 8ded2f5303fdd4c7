//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/internal/testkit"
)

// Bounds of every wait in the systemd notification test. They are generous
// limits on how long the test waits, not measurements of the daemon.
const (
	// readyTimeout bounds the wait for READY=1 after start.
	readyTimeout = 30 * time.Second
	// pingSettle is skipped after READY=1 before pings are counted, so the
	// burst of pings from start-up events does not count: pingWindow must
	// then hold at least minPings WATCHDOG=1 from the loop's 1 s idle
	// ticks (three are due; two allow for the window's edges).
	pingSettle = time.Second
	pingWindow = 3 * time.Second
	minPings   = 2
	// quietPeriod: a drain after SIGSTOP ends when nothing arrived for this long.
	quietPeriod = 200 * time.Millisecond
	// stoppedSilence: how long a stopped daemon must stay silent.
	stoppedSilence = 1500 * time.Millisecond
	// resumeTimeout bounds the wait for the first WATCHDOG=1 after SIGCONT.
	resumeTimeout = 2 * time.Second
	// handoffTimeout is cluster.handoff_timeout in the test configuration.
	handoffTimeout = 2 * time.Second
	// exitTimeout bounds the wait for STOPPING=1 and exit after SIGTERM:
	// the handoff timeout plus memberlist's leave (at most 2 s) and slack.
	exitTimeout = handoffTimeout + 5*time.Second
)

// TestSystemdNotify runs the vipd binary with a fake $NOTIFY_SOCKET and
// checks what systemd would see: READY=1 once the API socket listens,
// STATUS= lines, WATCHDOG=1 from the reconcile loop (and none while the
// process is SIGSTOPped), STOPPING=1 and exit 0 on SIGTERM.
func TestSystemdNotify(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the vipd binary; skipped with -short")
	}
	bin := vipdBinary(t)

	// A VIP interface that does not exist is a start-up error that names
	// it, and a --check error (the daemon refuses nothing --check accepts).
	t.Run("interface missing", func(t *testing.T) {
		dir := t.TempDir()
		cfg := writeNotifyConfig(t, notifyScenario{dir: dir, bindPort: testkit.FreePort(t), iface: "vtnotify-none"})
		out, err := exec.Command(bin, "--config", cfg).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("vipd with a missing interface: %v, want exit 1\n%s", err, out)
		}
		if !strings.Contains(string(out), `interface "vtnotify-none" does not exist on this host`) {
			t.Errorf("start-up error does not name the interface:\n%s", out)
		}
		out, err = exec.Command(bin, "--check", "--config", cfg).CombinedOutput()
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), `interface "vtnotify-none" does not exist on this host`) || strings.Contains(string(out), "configuration OK") {
			t.Errorf("vipd --check with a missing interface: %v, want exit 1 naming the interface\n%s", err, out)
		}
	})

	// Without root the VIP cannot be added (to lo: it exists, so vipd
	// starts): the announce fails, vipd holds nothing, and the loop must
	// keep pinging anyway. As root that would change the host's lo; the
	// netns scenario below covers root.
	t.Run("announce fails", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("as root the VIP would really be added to the host's lo; the netns scenario covers root")
		}
		dir := t.TempDir()
		n := runNotifyScenario(t, notifyScenario{
			bin:        bin,
			dir:        dir,
			bindPort:   testkit.FreePort(t),
			iface:      "lo",
			wantStatus: "STATUS=holding no VIP",
		})
		if !strings.Contains(n.logs.String(), "announce VIP") {
			t.Errorf("no failed announce logged; the scenario did not exercise an unusable VIP\nlogs:\n%s", n.logs.String())
		}
	})

	// In a network namespace the test creates, the VIP is really added to
	// an interface there: STATUS=holding apiserver.
	t.Run("netns holding", func(t *testing.T) {
		if os.Getenv("VIPD_NETNS_TESTS") != "1" {
			t.Skip("network namespace test: set VIPD_NETNS_TESTS=1 (and run as root) to run it")
		}
		if os.Geteuid() != 0 {
			t.Skip("network namespace test: needs root to create a namespace and add addresses")
		}
		ns := fmt.Sprintf("vt-vipd-%d", os.Getpid())
		ipCmd(t, "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		})
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
		// A veth pair with both ends in the namespace: the dummy driver
		// is not available on every kernel (containers), veth is.
		ipCmd(t, "-n", ns, "link", "add", "lan0", "type", "veth", "peer", "name", "lan0p")
		ipCmd(t, "-n", ns, "addr", "add", "192.0.2.1/24", "dev", "lan0")
		ipCmd(t, "-n", ns, "link", "set", "lan0p", "up")
		ipCmd(t, "-n", ns, "link", "set", "lan0", "up")

		hasVIP := func() bool {
			out := ipCmd(t, "-n", ns, "-o", "addr", "show", "dev", "lan0")
			return strings.Contains(out, " 192.0.2.10/32 ")
		}
		dir := t.TempDir()
		runNotifyScenario(t, notifyScenario{
			bin:        bin,
			dir:        dir,
			netns:      ns,
			bindPort:   7946,
			iface:      "lan0",
			wantStatus: "STATUS=holding apiserver",
			whileRunning: func(t *testing.T) {
				if !hasVIP() {
					t.Errorf("STATUS says holding apiserver but 192.0.2.10/32 is not on lan0 in %s", ns)
				}
			},
			afterExit: func(t *testing.T) {
				if hasVIP() {
					t.Errorf("192.0.2.10/32 still on lan0 in %s after vipd exited on SIGTERM", ns)
				}
			},
		})
	})
}

// notifyScenario is one run of vipd under a fake service manager.
type notifyScenario struct {
	bin        string
	dir        string
	netns      string // run vipd in this namespace (ip netns exec); "" for the current one
	bindPort   int
	iface      string // interface of the VIP 192.0.2.10
	wantStatus string // a STATUS= line that must arrive while running
	// whileRunning runs after wantStatus arrived, before SIGSTOP.
	whileRunning func(t *testing.T)
	// afterExit runs after the process exited.
	afterExit func(t *testing.T)
}

// notifyRun is what a scenario left behind for further checks.
type notifyRun struct {
	logs *syncBuffer
}

// writeNotifyConfig writes the scenario's configuration and returns its path.
func writeNotifyConfig(t *testing.T, sc notifyScenario) string {
	t.Helper()
	apiSocket := filepath.Join(sc.dir, "vipd.sock")
	cfgPath := filepath.Join(sc.dir, "vipd.toml")
	cfg := fmt.Sprintf(`node_name = "notify-test"
state_dir = %q
log_level = "info"

[api]
socket = %q

[cluster]
bind_address = "127.0.0.1"
bind_port = %d
handoff_timeout = %q

[[vip]]
name = "apiserver"
address = "192.0.2.10"
mode = "l2"
interface = %q
`, filepath.Join(sc.dir, "state"), apiSocket, sc.bindPort, handoffTimeout.String(), sc.iface)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath
}

func runNotifyScenario(t *testing.T, sc notifyScenario) *notifyRun {
	apiSocket := filepath.Join(sc.dir, "vipd.sock")
	cfgPath := writeNotifyConfig(t, sc)
	ns := listenNotify(t, filepath.Join(sc.dir, "notify.sock"))

	var cmd *exec.Cmd
	if sc.netns != "" {
		// ip netns exec execs vipd in place: the PID stays the same.
		cmd = exec.Command("ip", "netns", "exec", sc.netns, sc.bin, "--config", cfgPath)
	} else {
		cmd = exec.Command(sc.bin, "--config", cfgPath)
	}
	cmd.Env = append(envWithout("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"),
		"NOTIFY_SOCKET="+ns.path, "WATCHDOG_USEC=2000000")
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	done := false
	t.Cleanup(func() {
		if !done {
			_ = syscall.Kill(pid, syscall.SIGKILL) // only the process this test started
			<-exited
		}
		if t.Failed() {
			t.Logf("vipd output:\n%s", logs.String())
		}
	})

	// READY=1, with the API socket already listening.
	var statuses []string
	readyCount := 0
	watchdogs := 0
	record := func(m string) {
		switch {
		case m == "READY=1":
			readyCount++
		case m == "WATCHDOG=1":
			watchdogs++
		case strings.HasPrefix(m, "STATUS="):
			statuses = append(statuses, m)
		}
	}
	readyBy := time.After(readyTimeout)
waitReady:
	for {
		select {
		case m := <-ns.msgs:
			record(m)
			if m == "READY=1" {
				fi, err := os.Stat(apiSocket)
				if err != nil {
					t.Fatalf("READY=1 arrived before the API socket exists: %v", err)
				}
				if fi.Mode()&os.ModeSocket == 0 {
					t.Fatalf("READY=1 arrived but %s is not a socket (mode %v)", apiSocket, fi.Mode())
				}
				break waitReady
			}
		case err := <-exited:
			done = true
			t.Fatalf("vipd exited before READY=1: %v", err)
		case <-readyBy:
			t.Fatalf("no READY=1 within %v", readyTimeout)
		}
	}
	// Signals below go to pid: make sure it is vipd by now, not ip.
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil {
		t.Fatal(err)
	} else if want, _ := filepath.EvalSymlinks(sc.bin); exe != want && exe != sc.bin {
		t.Fatalf("pid %d runs %s, want %s", pid, exe, sc.bin)
	}

	// WATCHDOG=1 repeatedly, from the ticker rather than start-up events,
	// and the expected STATUS= line.
	settled := time.After(pingSettle)
waitSettle:
	for {
		select {
		case m := <-ns.msgs:
			record(m)
		case err := <-exited:
			done = true
			t.Fatalf("vipd exited while running: %v", err)
		case <-settled:
			break waitSettle
		}
	}
	watchdogs = 0
	window := time.After(pingWindow)
	hasStatus := func() bool {
		for _, s := range statuses {
			if s == sc.wantStatus {
				return true
			}
		}
		return false
	}
waitPings:
	for watchdogs < minPings || !hasStatus() {
		select {
		case m := <-ns.msgs:
			record(m)
		case err := <-exited:
			done = true
			t.Fatalf("vipd exited while running: %v", err)
		case <-window:
			break waitPings
		}
	}
	if watchdogs < minPings {
		t.Errorf("%d WATCHDOG=1 within %v (from %v after READY=1), want at least %d", watchdogs, pingWindow, pingSettle, minPings)
	}
	if !hasStatus() {
		t.Errorf("STATUS lines %q, want %q among them", statuses, sc.wantStatus)
	}
	if sc.whileRunning != nil {
		sc.whileRunning(t)
	}

	// SIGSTOP: once every thread is stopped and what was queued before
	// is drained, nothing may arrive.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	for _, m := range ns.drain(quietPeriod, 2*time.Second) {
		record(m)
	}
	silence := time.After(stoppedSilence)
waitSilence:
	for {
		select {
		case m := <-ns.msgs:
			t.Errorf("stopped vipd sent %q", m)
			record(m)
		case <-silence:
			break waitSilence
		}
	}

	// SIGCONT: pings resume.
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.After(resumeTimeout)
waitResume:
	for {
		select {
		case m := <-ns.msgs:
			record(m)
			if m == "WATCHDOG=1" {
				break waitResume
			}
		case err := <-exited:
			done = true
			t.Fatalf("vipd exited after SIGCONT: %v", err)
		case <-resumed:
			t.Fatalf("no WATCHDOG=1 within %v after SIGCONT", resumeTimeout)
		}
	}

	// SIGTERM: STOPPING=1 and exit 0.
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopping := false
	var exitErr error
	bound := time.After(exitTimeout)
	for !stopping || !done {
		select {
		case m := <-ns.msgs:
			record(m)
			if m == "STOPPING=1" {
				stopping = true
			}
		case exitErr = <-exited:
			done = true
			if !stopping {
				// The datagram may still sit in the reader's queue.
				for _, m := range ns.drain(quietPeriod, time.Second) {
					record(m)
					if m == "STOPPING=1" {
						stopping = true
					}
				}
				if !stopping {
					t.Fatalf("vipd exited (%v) without sending STOPPING=1", exitErr)
				}
			}
		case <-bound:
			t.Fatalf("after SIGTERM: STOPPING=1 seen %v, exited %v, within %v", stopping, done, exitTimeout)
		}
	}
	if exitErr != nil {
		t.Errorf("vipd exit after SIGTERM: %v, want status 0", exitErr)
	}
	if readyCount != 1 {
		t.Errorf("READY=1 sent %d times, want once", readyCount)
	}
	if sc.afterExit != nil {
		sc.afterExit(t)
	}
	return &notifyRun{logs: logs}
}

// notifySocket is a fake service manager's $NOTIFY_SOCKET. A goroutine
// reads it continuously, so the daemon never blocks on a full socket
// queue, and passes every line on.
type notifySocket struct {
	path string
	msgs chan string
}

func listenNotify(t *testing.T, path string) *notifySocket {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{path: path, msgs: make(chan string, 4096)}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			for _, line := range strings.Split(string(buf[:k]), "\n") {
				if line != "" {
					n.msgs <- line
				}
			}
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-readerDone
	})
	return n
}

// drain returns what arrives until nothing came for quiet, or max passed.
func (n *notifySocket) drain(quiet, max time.Duration) []string {
	var got []string
	end := time.After(max)
	for {
		select {
		case m := <-n.msgs:
			got = append(got, m)
		case <-time.After(quiet):
			return got
		case <-end:
			return got
		}
	}
}

// waitStopped waits (bounded) until every thread of pid is in stopped
// state, so no send is still in flight when the silence check starts.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	var notStopped []string
	for range 100 {
		notStopped = notStopped[:0]
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				continue // thread ended
			}
			// The state follows the parenthesised command name.
			s := string(stat)
			i := strings.LastIndexByte(s, ')')
			if i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
				notStopped = append(notStopped, task.Name())
			}
		}
		if len(notStopped) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("threads %v of pid %d not stopped 2s after SIGSTOP", notStopped, pid)
}

// vipdBinary returns $VIPD_BIN/vipd when VIPD_BIN is set, and otherwise
// builds this package into a temporary directory.
func vipdBinary(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("VIPD_BIN"); d != "" {
		bin := filepath.Join(d, "vipd")
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("VIPD_BIN is set: %v", err)
		}
		return bin
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH and VIPD_BIN unset: cannot build vipd")
	}
	bin := filepath.Join(t.TempDir(), "vipd")
	out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// envWithout is the test's environment minus the named variables.
func envWithout(names ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}

// ipCmd runs ip(8) and returns its output; failure fails the test.
func ipCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// syncBuffer is a bytes.Buffer safe for the process's output copier and
// the test reading it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
