package bgp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The netns tests run the speaker in a child process started with
// `ip netns exec NS <this test binary>`: GoBGP opens sockets from its own
// goroutines, so switching one locked thread into a namespace is not enough.
// The child is this test binary with helperEnv set; TestMain turns it into a
// small line protocol server on stdin/stdout:
//
//	announce ADDR | drain ADDR | withdraw ADDR  ->  "ok" or "err MESSAGE"
//	reconfigure JSON(Config)                    ->  "ok" or "err MESSAGE"
//	peers                                       ->  "ok JSON([]PeerStatus)"
//	detach                                      ->  "ok", then the helper exits (Detach: no CEASE)
//
// With helperResumeEnv set (comma-separated addresses) the helper starts
// the speaker with Resume instead of Start. With helperFlushEnv=1 it runs
// FlushStale instead (no speaker), prints "ok flushed" or "err MESSAGE" and
// exits.
const (
	helperEnv       = "VIPD_BGP_TEST_SPEAKER"
	helperConfigEnv = "VIPD_BGP_TEST_SPEAKER_CONFIG"
	helperResumeEnv = "VIPD_BGP_TEST_SPEAKER_RESUME"
	helperFlushEnv  = "VIPD_BGP_TEST_FLUSH"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(speakerHelper(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

func speakerHelper(in io.Reader, out io.Writer) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(helperConfigEnv)), &cfg); err != nil {
		fmt.Fprintf(out, "err config: %v\n", err)
		return 2
	}
	cfg.Logger = log
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	if os.Getenv(helperFlushEnv) == "1" {
		fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
		defer fcancel()
		if err := FlushStale(fctx, cfg); err != nil {
			fmt.Fprintf(out, "err %v\n", err)
			return 1
		}
		fmt.Fprintln(out, "ok flushed")
		return 0
	}
	s, err := New(cfg)
	if err != nil {
		fmt.Fprintf(out, "err %v\n", err)
		return 2
	}
	if r, ok := os.LookupEnv(helperResumeEnv); ok {
		var held []netip.Addr
		for _, f := range strings.Split(r, ",") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				fmt.Fprintf(out, "err resume: %v\n", err)
				return 2
			}
			held = append(held, a)
		}
		err = s.Resume(ctx, held)
	} else {
		err = s.Start(ctx)
	}
	if err != nil {
		fmt.Fprintf(out, "err %v\n", err)
		return 2
	}
	defer s.Stop() // after detach: does nothing
	fmt.Fprintln(out, "ok started")
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		verb, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		var err error
		reply := ""
		switch verb {
		case "announce", "drain", "withdraw":
			var a netip.Addr
			if a, err = netip.ParseAddr(arg); err != nil {
				break
			}
			switch verb {
			case "announce":
				err = s.Announce(ctx, a)
			case "drain":
				err = s.Drain(ctx, a)
			default:
				err = s.Withdraw(ctx, a)
			}
		case "reconfigure":
			var c Config
			if err = json.Unmarshal([]byte(arg), &c); err == nil {
				c.Logger = log
				err = s.Reconfigure(ctx, c)
			}
		case "detach":
			s.Detach()
			fmt.Fprintln(out, "ok")
			return 0
		case "peers":
			var ps []PeerStatus
			if ps, err = s.Peers(ctx); err == nil {
				b, _ := json.Marshal(ps)
				reply = " " + string(b)
			}
		default:
			err = fmt.Errorf("unknown command %q", verb)
		}
		if err != nil {
			fmt.Fprintf(out, "err %v\n", err)
		} else {
			fmt.Fprintf(out, "ok%s\n", reply)
		}
	}
	return 0
}

// speakerProc is a Speaker running in a child process inside a namespace.
type speakerProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	done  chan struct{}
}

// startSpeakerProc starts the speaker helper inside ns with cfg and waits
// (at most 10s) for it to report started. It is killed by PID in t.Cleanup.
func startSpeakerProc(t *testing.T, ns string, cfg Config) *speakerProc {
	t.Helper()
	return startSpeakerProcEnv(t, ns, cfg)
}

// resumeSpeakerProc is startSpeakerProc with the speaker started by
// Resume(held).
func resumeSpeakerProc(t *testing.T, ns string, cfg Config, held ...netip.Addr) *speakerProc {
	t.Helper()
	var as []string
	for _, a := range held {
		as = append(as, a.String())
	}
	return startSpeakerProcEnv(t, ns, cfg, helperResumeEnv+"="+strings.Join(as, ","))
}

// helperCmd returns the command running this test binary as the speaker
// helper in ns with cfg and env added to the environment.
func helperCmd(ctx context.Context, t *testing.T, ns string, cfg Config, env ...string) *exec.Cmd {
	t.Helper()
	cfg.Logger = nil
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"=1", helperConfigEnv+"="+string(b)), env...)
	return cmd
}

func startSpeakerProcEnv(t *testing.T, ns string, cfg Config, env ...string) *speakerProc {
	t.Helper()
	return startSpeakerProcLog(t, ns, cfg, testWriter{t}, env...)
}

// startSpeakerProcLog is startSpeakerProcEnv with the helper's log (its
// stderr) written to stderr instead of the test's log.
func startSpeakerProcLog(t *testing.T, ns string, cfg Config, stderr io.Writer, env ...string) *speakerProc {
	t.Helper()
	var err error
	p := &speakerProc{lines: make(chan string, 16), done: make(chan struct{})}
	p.cmd = helperCmd(context.Background(), t, ns, cfg, env...)
	p.cmd.Stderr = stderr
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start speaker in %s: %v", ns, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill(t) })
	if got := p.reply(t); got != "ok started" {
		t.Fatalf("speaker helper: %q", got)
	}
	return p
}

func (p *speakerProc) reply(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatal("speaker helper exited")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("speaker helper: no reply within 10s")
	}
	return ""
}

// do sends one command and fails t unless the reply is ok; it returns the
// reply payload.
func (p *speakerProc) do(t *testing.T, command string) string {
	t.Helper()
	if _, err := fmt.Fprintln(p.in, command); err != nil {
		t.Fatalf("speaker helper %q: %v", command, err)
	}
	r := p.reply(t)
	if r != "ok" && !strings.HasPrefix(r, "ok ") {
		t.Fatalf("speaker helper %q: %s", command, r)
	}
	return strings.TrimPrefix(strings.TrimPrefix(r, "ok"), " ")
}

func (p *speakerProc) peers(t *testing.T) []PeerStatus {
	t.Helper()
	var ps []PeerStatus
	if err := json.Unmarshal([]byte(p.do(t, "peers")), &ps); err != nil {
		t.Fatal(err)
	}
	return ps
}

// flushStaleIn runs FlushStale(cfg) in ns (this test binary, helper role)
// and fails t unless it reports success.
func flushStaleIn(t *testing.T, ns string, cfg Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := helperCmd(ctx, t, ns, cfg, helperFlushEnv+"=1")
	cmd.Stderr = testWriter{t}
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "ok flushed" {
		t.Fatalf("FlushStale in %s: %v: %s", ns, err, out)
	}
}

// detach asks the helper to Detach and waits (at most 5s) for it to exit.
func (p *speakerProc) detach(t *testing.T) {
	t.Helper()
	p.do(t, "detach")
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("speaker helper pid %d still running 5s after detach", p.cmd.Process.Pid)
	}
}

// kill sends SIGKILL to the helper (by its PID) and waits at most 5s for it.
func (p *speakerProc) kill(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Errorf("speaker helper pid %d did not exit after SIGKILL", p.cmd.Process.Pid)
	}
}

// signal sends sig to the helper by its PID.
func (p *speakerProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to speaker pid %d: %v", sig, p.cmd.Process.Pid, err)
	}
}

func (p *speakerProc) reconfigure(t *testing.T, cfg Config) {
	t.Helper()
	cfg.Logger = nil
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.do(t, "reconfigure "+string(b))
}
