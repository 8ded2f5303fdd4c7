package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/internal/testkit"
)

// errorRow is one row of the error table in docs/operations.md.
type errorRow struct {
	id, from string
	pending  bool // a vipd message the daemon does not produce yet
	exit     int
	lines    []string // each must be a line of the output; <name> varies
}

func parseErrorTable(t *testing.T) []errorRow {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(doc)
	i := strings.Index(sec, "\n## Error messages\n")
	if i < 0 {
		t.Fatal(`docs/operations.md has no "## Error messages" section`)
	}
	sec = sec[i+1:]
	if j := strings.Index(sec[1:], "\n## "); j > 0 {
		sec = sec[:j]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\| ([^|]+) \\| ([0-9]+) \\| (.+) \\| [^|]+ \\|$")
	span := regexp.MustCompile("`([^`]+)`")
	var rows []errorRow
	for _, m := range row.FindAllStringSubmatch(sec, -1) {
		exit, _ := strconv.Atoi(m[3])
		r := errorRow{id: m[1], from: strings.TrimSpace(m[2]), exit: exit}
		r.pending = strings.Contains(r.from, "*pending*")
		r.from = strings.Fields(r.from)[0]
		for _, s := range span.FindAllStringSubmatch(m[4], -1) {
			r.lines = append(r.lines, s[1])
		}
		rows = append(rows, r)
	}
	if len(rows) < 20 {
		t.Fatalf("found only %d rows in the error table; the format changed?", len(rows))
	}
	return rows
}

// lineRE turns a documented line into a regexp for one whole output line:
// <name> becomes vars[name] when the trigger knows it, else any text.
func lineRE(line string, vars map[string]string) *regexp.Regexp {
	ph := regexp.MustCompile(`<([a-z]+)>`)
	var b strings.Builder
	b.WriteString(`(?m)^`)
	last := 0
	for _, m := range ph.FindAllStringSubmatchIndex(line, -1) {
		b.WriteString(regexp.QuoteMeta(line[last:m[0]]))
		if v, ok := vars[line[m[2]:m[3]]]; ok {
			b.WriteString(regexp.QuoteMeta(v))
		} else {
			b.WriteString(`.+?`)
		}
		last = m[1]
	}
	b.WriteString(regexp.QuoteMeta(line[last:]))
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}

// outcome is what a trigger saw: the exit code, everything printed, and
// the values of the row's placeholders.
type outcome struct {
	code int
	out  string
	vars map[string]string
}

// harness holds what triggers share: binaries built once per test run, the
// hooks, and (as root) a user outside the socket's group.
type harness struct {
	t        *testing.T
	binOnce  sync.Once
	bin      string
	hooksDir string
}

func (h *harness) binaries(t *testing.T) string {
	h.binOnce.Do(func() {
		h.bin = buildBinaries(h.t, "vipctl", "vipd")
		// The hooks, where any user may run them.
		for _, name := range []string{"vipd-drain", "vipd-undrain"} {
			b, err := os.ReadFile(filepath.Join("../../../packaging/hooks", name))
			if err != nil {
				h.t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(h.bin, name), b, 0o755); err != nil {
				h.t.Fatal(err)
			}
		}
		h.hooksDir = h.bin
	})
	if h.bin == "" {
		t.Fatal("building the binaries failed")
	}
	return h.bin
}

// hook runs a drain hook with the real vipctl against sock, as the test's
// user or, with o, as o.
func (h *harness) hook(t *testing.T, o *outsider, sock, name string, args ...string) outcome {
	bin := h.binaries(t)
	env := []string{"VIPCTL=" + filepath.Join(bin, "vipctl"), "VIPD_SOCKET=" + sock}
	if o != nil {
		code, out := o.run(t, nil, env, filepath.Join(h.hooksDir, name), args...)
		return outcome{code: code, out: out}
	}
	cmd := exec.Command(filepath.Join(h.hooksDir, name), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return outcome{code: code, out: string(out)}
}

// run runs vipctl in-process.
func runVipctl(t *testing.T, args ...string) outcome {
	code, stdout, stderr := vipctl(t, args...)
	return outcome{code: code, out: stdout + stderr}
}

// me is the test's user and primary group, as vipctl names them.
func me(t *testing.T) (string, string) {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	g, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
	if err != nil {
		t.Fatal(err)
	}
	return u.Username, g.Name
}

// deniedSocket is a socket the caller of the returned runner may not use:
// as root, a socket in a directory 0750 root:adm used by nobody; otherwise
// a socket of mode 0000.
func deniedSocket(t *testing.T, f *fakeVipd) (sock string, o *outsider, vars map[string]string) {
	if os.Geteuid() == 0 {
		out := newOutsider(t)
		_, closed := socketDirs(t, out, f)
		return closed, &out, map[string]string{"socket": closed, "user": "nobody", "group": out.group}
	}
	sock = serve(t, f)
	if err := os.Chmod(sock, 0); err != nil {
		t.Fatal(err)
	}
	u, g := me(t)
	return sock, nil, map[string]string{"socket": sock, "user": u, "group": g}
}

// takeOverStatus: cp-1 holds apiserver; cp-2 is eligible, cp-3 withdrawn.
func takeOverStatus() *apipb.StatusResponse {
	st := eligibilityStatus()
	st.Vips = st.Vips[:1]
	st.Vips[0].Eligibility[1] = &apipb.NodeEligibility{Node: "cp-2", Eligible: true}
	return st
}

// vipdCheck runs vipd --check on a configuration (as o when given).
func (h *harness) vipdCheck(t *testing.T, o *outsider, config string) outcome {
	bin := filepath.Join(h.binaries(t), "vipd")
	dir, err := os.MkdirTemp("", "vipd-check-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	path := filepath.Join(dir, "vipd.toml")
	config = strings.ReplaceAll(config, "DIR", dir)
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "cluster.key")
	if err := os.WriteFile(key, []byte("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"config": path, "file": key}
	if o != nil {
		code, out := o.run(t, nil, nil, bin, "--check", "--config", path)
		vars["user"], vars["group"] = "nobody", "nogroup"
		return outcome{code, out, vars}
	}
	out, err := exec.Command(bin, "--check", "--config", path).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return outcome{code, string(out), vars}
}

const checkConfig = `node_name = "cp-1"
state_dir = "DIR/state"
[cluster]
bind_address = "192.0.2.11"
%s
[[vip]]
name = "apiserver"
address = "%s"
interface = "%s"
`

func configWith(keyLine, address, iface string) string {
	return fmt.Sprintf(checkConfig, keyLine, address, iface)
}

// errorTriggers produce each row of the table for real. A row without a
// trigger must be pending and say why it is not triggered here.
func errorTriggers(h *harness) map[string]func(t *testing.T) outcome {
	withdrawErr := func(err error, args ...string) func(t *testing.T) outcome {
		return func(t *testing.T) outcome {
			sock := serve(t, &fakeVipd{status: takeOverStatus(), withdrawErr: err})
			return runVipctl(t, append([]string{"--socket", sock, "withdraw"}, args...)...)
		}
	}
	return map[string]func(t *testing.T) outcome{
		"no-socket": func(t *testing.T) outcome {
			sock := filepath.Join(t.TempDir(), "vipd.sock")
			o := runVipctl(t, "--socket", sock, "status")
			o.vars = map[string]string{"socket": sock}
			return o
		},
		"stale-socket": func(t *testing.T) outcome {
			sock := filepath.Join(t.TempDir(), "vipd.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
			ln.Close()
			o := runVipctl(t, "--socket", sock, "status")
			o.vars = map[string]string{"socket": sock}
			return o
		},
		"socket-denied": func(t *testing.T) outcome {
			sock, o, vars := deniedSocket(t, &fakeVipd{})
			var res outcome
			if o != nil {
				res.code, res.out = o.run(t, nil, nil, filepath.Join(h.binaries(t), "vipctl"), "--socket", sock, "status")
			} else {
				res = runVipctl(t, "--socket", sock, "status")
			}
			res.vars = vars
			return res
		},
		"socket-denied-root-only": func(t *testing.T) outcome {
			o := newOutsider(t)
			o.groupID = 0 // the socket and its directory are root:root
			searchable, _ := socketDirs(t, o, &fakeVipd{})
			code, out := o.run(t, nil, nil, filepath.Join(h.binaries(t), "vipctl"), "--socket", searchable, "status")
			return outcome{code, out, map[string]string{"socket": searchable}}
		},
		"vipd-denied": func(t *testing.T) outcome {
			f := &fakeVipd{withdrawErr: status.Errorf(codes.PermissionDenied, "withdraw refused for uid %d: only root or members of the API socket group may call it", os.Getuid())}
			sock := serve(t, f)
			u, g := me(t)
			if os.Geteuid() == 0 {
				// A socket of group root would be "root only": give it
				// a group, as vipd does with api.socket_group.
				o := newOutsider(t)
				if err := os.Chown(sock, 0, o.groupID); err != nil {
					t.Fatal(err)
				}
				g = o.group
			}
			res := runVipctl(t, "--socket", sock, "withdraw")
			res.vars = map[string]string{"socket": sock, "user": u, "group": g, "uid": strconv.Itoa(os.Getuid())}
			return res
		},
		"lost-connection": func(t *testing.T) outcome {
			sock := serve(t, &fakeVipd{statusErr: status.Error(codes.Unavailable, "transport is closing")})
			res := runVipctl(t, "--socket", sock, "status")
			res.vars = map[string]string{"socket": sock, "detail": "transport is closing"}
			return res
		},
		"withdraw-refused": withdrawErr(status.Error(codes.FailedPrecondition,
			"refusing to withdraw: no other eligible node for apiserver: cp-2: unhealthy since 12:03:10; cp-3: withdrawn; use --force to drop the VIP anyway")),
		"withdraw-timeout": withdrawErr(status.Error(codes.DeadlineExceeded,
			"timed out after 30s: apiserver not yet held by another node: cp-2: eligible; cp-3: withdrawn"), "--wait"),
		"withdraw-why": withdrawErr(status.Error(codes.DeadlineExceeded,
			"timed out: [apiserver] not yet held by another node"), "--wait"),
		"withdraw-not-saved": withdrawErr(status.Error(codes.Aborted,
			"withdraw flag not saved: write /var/lib/vipd/withdrawn.tmp: no space left on device")),
		"forget-alive": func(t *testing.T) outcome {
			sock := serve(t, &fakeVipd{forgetErr: status.Error(codes.FailedPrecondition, "forget: cp-2 is alive; stop it (or wait until it is dead) first")})
			return runVipctl(t, "--socket", sock, "forget", "cp-2")
		},
		"unknown-command": func(t *testing.T) outcome { return runVipctl(t, "frobnicate") },
		"bad-flag":        func(t *testing.T) outcome { return runVipctl(t, "withdraw", "--timeout", "soon") },
		"drain-no-vipctl": func(t *testing.T) outcome {
			h.binaries(t)
			cmd := exec.Command(filepath.Join(h.hooksDir, "vipd-drain"))
			cmd.Env = append(os.Environ(), "VIPCTL=no-such-vipctl")
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			return outcome{code: code, out: string(out)}
		},
		"drain-not-running": func(t *testing.T) outcome {
			return h.hook(t, nil, filepath.Join(t.TempDir(), "vipd.sock"), "vipd-drain")
		},
		"drain-not-running-allowed": func(t *testing.T) outcome {
			return h.hook(t, nil, filepath.Join(t.TempDir(), "vipd.sock"), "vipd-drain", "--allow-not-running")
		},
		// The finding of the trust-boundaries issue: a user outside the
		// group ran vipd-drain --allow-not-running on the owner and got
		// "not running", exit 0.
		"drain-denied": func(t *testing.T) outcome {
			f := &fakeVipd{status: takeOverStatus()}
			sock, o, vars := deniedSocket(t, f)
			res := h.hook(t, o, sock, "vipd-drain", "--allow-not-running")
			if f.lastWithdraw() != nil {
				t.Errorf("vipd-drain withdrew although permission was denied")
			}
			res.vars = vars
			return res
		},
		"drain-refused": func(t *testing.T) outcome {
			sock := serve(t, &fakeVipd{status: takeOverStatus(), withdrawErr: status.Error(codes.FailedPrecondition, "refusing to withdraw")})
			return h.hook(t, nil, sock, "vipd-drain")
		},
		"drain-timeout": func(t *testing.T) outcome {
			sock := serve(t, &fakeVipd{status: takeOverStatus(), withdrawErr: status.Error(codes.DeadlineExceeded, "timed out")})
			res := h.hook(t, nil, sock, "vipd-drain", "--timeout", "1s")
			res.vars = map[string]string{"timeout": "1s"}
			return res
		},
		"undrain-denied": func(t *testing.T) outcome {
			sock, o, vars := deniedSocket(t, &fakeVipd{})
			res := h.hook(t, o, sock, "vipd-undrain")
			res.vars = vars
			return res
		},
		"key-file-denied": func(t *testing.T) outcome {
			o := newOutsider(t)
			return h.vipdCheck(t, &o, configWith(`key_file = "DIR/cluster.key"`, "192.0.2.10", "lo"))
		},
		"vip-is-node-address": func(t *testing.T) outcome {
			return h.vipdCheck(t, nil, configWith("", "192.0.2.11", "lo"))
		},
		"interface-missing": func(t *testing.T) outcome {
			return h.vipdCheck(t, nil, configWith("", "192.0.2.10", "nosuch0"))
		},
		"membership-port-in-use": func(t *testing.T) outcome {
			port := busyPort(t)
			return h.vipdRun(t, fmt.Sprintf(runConfig, port, ""), map[string]string{"port": strconv.Itoa(port), "address": "127.0.0.1"})
		},
		"metrics-port-in-use": func(t *testing.T) outcome {
			free, busy := testkit.FreePort(t), busyPort(t)
			addr := fmt.Sprintf("127.0.0.1:%d", busy)
			return h.vipdRun(t, fmt.Sprintf(runConfig, free, fmt.Sprintf("metrics_address = %q", addr)), map[string]string{"port": strconv.Itoa(busy), "address": addr})
		},
	}
}

// runConfig starts a vipd on loopback (bind port, [api] extra) whose VIP
// sits on lo, for errors a starting daemon reports.
const runConfig = `node_name = "cp-1"
state_dir = "DIR/state"
[api]
socket = "DIR/vipd.sock"
%[2]s
[cluster]
bind_address = "127.0.0.1"
bind_port = %[1]d
[[vip]]
name = "apiserver"
address = "192.0.2.10"
interface = "lo"
`

// vipdRun runs the daemon with config until it exits (bounded) and
// returns what it said.
func (h *harness) vipdRun(t *testing.T, config string, vars map[string]string) outcome {
	t.Helper()
	bin := filepath.Join(h.binaries(t), "vipd")
	dir := t.TempDir()
	path := filepath.Join(dir, "vipd.toml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(config, "DIR", dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--config", path).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if ctx.Err() != nil {
		t.Fatalf("vipd did not exit within 20s:\n%s", out)
	}
	vars["config"] = path
	return outcome{code, string(out), vars}
}

// busyPort holds a loopback port (TCP and UDP) for the test's life.
func busyPort(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			l.Close()
			continue
		}
		t.Cleanup(func() { l.Close(); u.Close() })
		return port
	}
	t.Fatal("no free port")
	return 0
}

// TestErrorTable triggers every user-facing error listed in
// docs/operations.md and checks its exit code and wording.
func TestErrorTable(t *testing.T) {
	h := &harness{t: t}
	triggers := errorTriggers(h)
	// Pending rows the test cannot trigger, and why.
	untriggered := map[string]string{}
	rows := parseErrorTable(t)
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.id] {
			t.Errorf("row %s listed twice", r.id)
		}
		seen[r.id] = true
		t.Run(r.id, func(t *testing.T) {
			trigger := triggers[r.id]
			if trigger == nil {
				if why, ok := untriggered[r.id]; ok && r.pending {
					t.Skipf("pending, not triggered here: %s", why)
				}
				t.Fatalf("no trigger for row %s", r.id)
			}
			res := trigger(t)
			var bad []string
			if res.code != r.exit {
				bad = append(bad, "exit "+strconv.Itoa(res.code)+", want "+strconv.Itoa(r.exit))
			}
			for _, l := range r.lines {
				if !lineRE(l, res.vars).MatchString(res.out) {
					bad = append(bad, "no line "+strconv.Quote(l))
				}
			}
			switch {
			case r.pending && len(bad) > 0:
				t.Skipf("pending (vipd does not say it yet): %s; it says (exit %d): %s", strings.Join(bad, "; "), res.code, strings.TrimSpace(res.out))
			case r.pending:
				t.Errorf("vipd now produces this message: remove *pending* from row %s", r.id)
			case len(bad) > 0:
				t.Errorf("%s; output:\n%s", strings.Join(bad, "; "), res.out)
			}
		})
	}
	for id := range triggers {
		if !seen[id] {
			t.Errorf("trigger %s has no row in docs/operations.md", id)
		}
	}
}
