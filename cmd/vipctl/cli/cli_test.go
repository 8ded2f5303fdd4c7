package cli

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vipd/vipd/agent/apipb"
)

// Drain scripts rely on these exit codes (docs/drain.md, docs/operations.md):
// each vipd answer maps to one, through a real socket.
func TestExitCodesFromVipd(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
		says string
	}{
		{"refused", status.Error(codes.FailedPrecondition, "refusing to withdraw"), ExitRefused, "vipctl withdraw: refusing to withdraw"},
		{"timed out", status.Error(codes.DeadlineExceeded, "timed out: [apiserver] not yet held by another node"), ExitTimeout, "vipctl withdraw: timed out"},
		{"denied by vipd", status.Error(codes.PermissionDenied, "withdraw refused for uid 1000"), ExitDenied, "withdraw refused for uid 1000: "},
		{"vipd stopping", status.Error(codes.Unavailable, "shutting down"), ExitUnavailable, "lost the connection to vipd"},
		{"flag not saved", status.Error(codes.Aborted, "withdraw flag not saved: no space left on device"), ExitError, "--no-persist"},
		{"other", status.Error(codes.Internal, "boom"), ExitError, "vipctl withdraw: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := serve(t, &fakeVipd{withdrawErr: tt.err})
			code, _, stderr := vipctl(t, "--socket", sock, "withdraw")
			if code != tt.want || !strings.Contains(stderr, tt.says) {
				t.Errorf("exit %d (%q), want %d mentioning %q", code, stderr, tt.want, tt.says)
			}
		})
	}
}

func TestNotRunning(t *testing.T) {
	dir := t.TempDir()
	t.Run("no socket", func(t *testing.T) {
		sock := filepath.Join(dir, "none.sock")
		code, _, stderr := vipctl(t, "--socket", sock, "status")
		if code != ExitUnavailable || !strings.Contains(stderr, "vipd is not running: no socket at "+sock) {
			t.Errorf("exit %d (%q), want %d saying there is no socket", code, stderr, ExitUnavailable)
		}
	})
	t.Run("no directory", func(t *testing.T) {
		sock := filepath.Join(dir, "gone", "vipd.sock")
		code, _, stderr := vipctl(t, "--socket", sock, "status")
		if code != ExitUnavailable || !strings.Contains(stderr, "no socket at") {
			t.Errorf("exit %d (%q), want %d saying there is no socket", code, stderr, ExitUnavailable)
		}
	})
	t.Run("stale socket", func(t *testing.T) {
		// What a killed vipd leaves: the socket file, nobody listening.
		sock := filepath.Join(dir, "stale.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		code, _, stderr := vipctl(t, "--socket", sock, "status")
		if code != ExitUnavailable || !strings.Contains(stderr, "vipd is not running: nothing listens on "+sock) {
			t.Errorf("exit %d (%q), want %d saying nothing listens", code, stderr, ExitUnavailable)
		}
	})
}

// TestPermissionDeniedUnprivileged: a socket the caller may not connect to
// is exit 6 and names the socket's group, not "not running". As a non-root
// user a mode 0000 socket shows it; root bypasses modes, so as root
// TestPermissionDeniedOtherUser runs vipctl as a user outside the group.
func TestPermissionDeniedUnprivileged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may connect to any socket; TestPermissionDeniedOtherUser covers this as root")
	}
	sock := serve(t, &fakeVipd{})
	if err := os.Chmod(sock, 0); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := vipctl(t, "--socket", sock, "status")
	if code != ExitDenied || !strings.Contains(stderr, "permission denied on "+sock) || !strings.Contains(stderr, "group ") {
		t.Errorf("exit %d (%q), want %d: permission denied naming the group", code, stderr, ExitDenied)
	}
}

// outsider is a user and a group it is not in, for running vipctl as
// someone outside the socket's group.
type outsider struct {
	uid, gid uint32 // nobody:nogroup
	group    string // a group the user is not in
	groupID  int
}

func newOutsider(t *testing.T) outsider {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run vipctl as another user")
	}
	o := outsider{uid: 65534, gid: 65534}
	for _, name := range []string{"adm", "daemon", "bin", "sys"} {
		if gid, ok := lookupGroup(name); ok && gid != 0 && gid != 65534 {
			o.group, o.groupID = name, gid
			return o
		}
	}
	t.Skip("no system group (adm, daemon, bin, sys) to own the test socket")
	return o
}

func lookupGroup(name string) (int, bool) {
	out, err := exec.Command("getent", "group", name).Output()
	if err != nil {
		return 0, false
	}
	f := strings.Split(strings.TrimSpace(string(out)), ":")
	if len(f) < 3 {
		return 0, false
	}
	gid, err := strconv.Atoi(f[2])
	return gid, err == nil
}

// socketDirs creates the two documented setups: a socket 0660 root:GROUP in
// a searchable directory, and a socket in a directory 0750 root:GROUP
// (/run/vipd), where the socket itself cannot be seen.
func socketDirs(t *testing.T, o outsider, f *fakeVipd) (searchable, closed string) {
	t.Helper()
	base, err := os.MkdirTemp("", "vipctl-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	mk := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 0, o.groupID); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(d, "vipd.sock")
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	searchable, closed = mk("open", 0o755), mk("closed", 0o750)
	for _, s := range []string{searchable, closed} {
		serveAt(t, f, s)
		if err := os.Chown(s, 0, o.groupID); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(s, 0o660); err != nil {
			t.Fatal(err)
		}
	}
	return searchable, closed
}

// run runs bin with args as o (groups: none but its own, plus extra).
func (o outsider) run(t *testing.T, extraGroups []uint32, env []string, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = credential(o.uid, o.gid, extraGroups)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/"}, env...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run %s as uid %d: %v", bin, o.uid, err)
		}
		code = ee.ExitCode()
	}
	return code, string(out)
}

// TestPermissionDeniedOtherUser runs the real vipctl as nobody against a
// socket of group adm (or another system group): exit 6 with the group to
// join, in both documented setups; in the group, the same call succeeds.
func TestPermissionDeniedOtherUser(t *testing.T) {
	o := newOutsider(t)
	bin := filepath.Join(buildBinaries(t, "vipctl"), "vipctl")
	searchable, closed := socketDirs(t, o, &fakeVipd{})
	for _, sock := range []string{searchable, closed} {
		code, out := o.run(t, nil, nil, bin, "--socket", sock, "status")
		want := "permission denied on " + sock + ": add nobody to group " + o.group + " (usermod -aG " + o.group + " nobody, then log in again) or run as root"
		if code != ExitDenied || !strings.Contains(out, want) {
			t.Errorf("%s as nobody: exit %d %q, want %d with %q", sock, code, out, ExitDenied, want)
		}
		if code, out := o.run(t, []uint32{uint32(o.groupID)}, nil, bin, "--socket", sock, "status"); code != ExitOK {
			t.Errorf("%s as nobody in group %s: exit %d %q, want 0", sock, o.group, code, out)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"frobnicate"}, {"status", "extra"}, {"withdraw", "--timeout", "soon"},
		{"forget"}, {"forget", "a", "b"}, {"status", "--bogus"}, {"completion"}, {"completion", "powershell"}} {
		code, _, stderr := vipctl(t, args...)
		if code != ExitUsage || stderr == "" {
			t.Errorf("vipctl %v: exit %d (%q), want %d with a message", args, code, stderr, ExitUsage)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"withdraw", "--help"}, {"help", "status"}} {
		if code, stdout, _ := vipctl(t, args...); code != ExitOK || !strings.Contains(stdout, "Usage:") {
			t.Errorf("vipctl %v: exit %d, want 0 and the usage on stdout: %q", args, code, stdout)
		}
	}
	if code, stdout, _ := vipctl(t, "--version"); code != ExitOK || stdout != "vipctl test\n" {
		t.Errorf("--version: exit %d %q", code, stdout)
	}
}

// TestWithdrawRequest: the command line reaches vipd as documented, with
// --socket before or after the command.
func TestWithdrawRequest(t *testing.T) {
	f := &fakeVipd{}
	sock := serve(t, f)
	code, stdout, stderr := vipctl(t, "--socket", sock, "withdraw", "--wait", "--timeout", "30s", "--force")
	if code != ExitOK || !strings.Contains(stdout, "withdrawn") {
		t.Fatalf("exit %d %q %q", code, stdout, stderr)
	}
	r := f.lastWithdraw()
	if !r.GetWait() || !r.GetForce() || r.GetTimeoutMs() != 30000 || r.GetNoPersist() {
		t.Errorf("request %v, want wait, force, 30000 ms, persist", r)
	}
	code, stdout, _ = vipctl(t, "withdraw", "--no-persist", "--socket", sock)
	if code != ExitOK || !f.lastWithdraw().GetNoPersist() || r == f.lastWithdraw() {
		t.Errorf("--no-persist: exit %d, request %v", code, f.lastWithdraw())
	}
	// The fake saved the flag: no warning.
	if strings.Contains(stdout, "not saved") {
		t.Errorf("warned about a saved flag: %q", stdout)
	}
	f.withdrawResp = &apipb.WithdrawResponse{Message: "withdrawn", Persisted: false}
	if _, stdout, _ = vipctl(t, "--socket", sock, "withdraw", "--no-persist"); !strings.Contains(stdout, "not saved (--no-persist): this node becomes eligible again when vipd restarts") {
		t.Errorf("unsaved flag not reported: %q", stdout)
	}
}

// eligibilityStatus: cp-1 (this node) holds apiserver, priority 150; cp-2
// is unhealthy since 12:03:10, cp-3 withdrawn. "metrics" is held by cp-2
// already; cp-1 is first by priority for it and waits out its preempt
// delay.
func eligibilityStatus() *apipb.StatusResponse {
	at := func(h, m, s int) int64 { return time.Date(2026, 5, 4, h, m, s, 0, time.UTC).UnixNano() }
	return &apipb.StatusResponse{
		Node: "cp-1", Version: "1.2.0", Quorum: true, Healthy: true, Withdrawn: false, KnownMembers: 3, AliveMembers: 3,
		Fence: &apipb.FenceStatus{State: "held", EvidenceAgeMs: 150, ReleaseAfterMs: 3000},
		Vips: []*apipb.VIPStatus{
			{Name: "apiserver", Address: "192.0.2.10", Mode: "l2", Owner: "cp-1", Held: true, Holders: []string{"cp-1"}, Healthy: true,
				HealthDetail: "passing since 11:59:02",
				Eligibility: []*apipb.NodeEligibility{
					{Node: "cp-1", Eligible: true, Priority: 150, Order: 1},
					{Node: "cp-2", Reason: "unhealthy", SinceUnixNano: at(12, 3, 10), Priority: 100},
					{Node: "cp-3", Reason: "withdrawn", SinceUnixNano: time.Date(2026, 5, 1, 0, 1, 1, 0, time.UTC).UnixNano(), Priority: 50}, // not today
				}},
			{Name: "metrics", Address: "192.0.2.20", Mode: "l2", Owner: "cp-2", Holders: []string{"cp-2"}, Healthy: true,
				Eligibility: []*apipb.NodeEligibility{{Node: "cp-1", Eligible: true, Priority: 150, Order: 1, Waiting: true}, {Node: "cp-2", Eligible: true, Priority: 100, Order: 2}}},
		},
		Members: []*apipb.MemberStatus{
			{Name: "cp-1", Address: "192.0.2.11:7946", State: "alive", Healthy: true, Self: true},
			{Name: "cp-2", Address: "192.0.2.12:7946", State: "alive"},
			{Name: "cp-3", Address: "192.0.2.13:7946", State: "alive", Withdrawn: true, Healthy: true},
		},
	}
}

func TestStatusShowsEligibility(t *testing.T) {
	sock := serve(t, &fakeVipd{status: eligibilityStatus()})
	code, stdout, stderr := vipctl(t, "--socket", sock, "status")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, re := range []string{
		`(?m)^quorum: 3 of 3 known members alive; fence held \(majority confirmed 150ms ago\)$`,
		`(?m)^VIP\s+NODE\s+ELIGIBLE\s+PRIORITY\s+ORDER\s+WHY NOT$`,
		`(?m)^apiserver\s+cp-1 \(this node\)\s+yes\s+150\s+1\s+-$`,
		`(?m)^apiserver\s+cp-2\s+no\s+100\s+-\s+unhealthy since 12:03:10$`,
		`(?m)^apiserver\s+cp-3\s+no\s+50\s+-\s+withdrawn since 2026-05-01 00:01:01$`,
		`(?m)^metrics\s+cp-1 \(this node\)\s+yes\s+150\s+1\s+waits out its preempt delay$`,
		`(?m)^metrics\s+cp-2\s+yes\s+100\s+2\s+-$`,
		`(?m)^apiserver: passing since 11:59:02$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("status lacks %s:\n%s", re, stdout)
		}
	}
}

// TestStatusShowsKubernetes: the Node watch in one line, the Node's
// withdraw and what the API's trouble does; a warning line when this node is
// kept eligible against its Node; members withdrawn by their Node say so;
// one line saying how to turn it on when the watch is off.
func TestStatusShowsKubernetes(t *testing.T) {
	at := func(h, m, s int) int64 { return time.Date(2026, 5, 4, h, m, s, 0, time.UTC).UnixNano() }
	for _, tc := range []struct {
		name string
		st   *apipb.StatusResponse
		want []string
		not  []string
	}{
		{"cordoned", &apipb.StatusResponse{Node: "cp-1", NodeWithdrawReasons: []string{"node cordoned"},
			Kubernetes: &apipb.KubernetesStatus{Enabled: true, Node: "cp-1", Server: "https://192.0.2.10:6443", Kubeconfig: "/etc/kubernetes/kubelet.conf",
				Reachable: true, Registered: true, VerdictSinceUnixNano: at(12, 1, 0)},
			Members: []*apipb.MemberStatus{{Name: "cp-1", State: "alive", Self: true, NodeWithdrawn: true, Healthy: true}}},
			[]string{`(?m)^kubernetes: node cp-1 cordoned → withdrawn since 12:01:00 \(https://192\.0\.2\.10:6443\)$`, `(?m)^cp-1 \(this node\)\s+alive\s+no \(by its Node\)\s+yes$`}, nil},
		{"eligible, API down", &apipb.StatusResponse{Node: "cp-1",
			Kubernetes: &apipb.KubernetesStatus{Enabled: true, Node: "cp-1", Server: "https://192.0.2.10:6443", Kubeconfig: "/etc/kubernetes/kubelet.conf",
				Error: "connection refused", SinceUnixNano: at(12, 4, 0)}},
			[]string{`(?m)^kubernetes: node cp-1 → eligible \(https://192\.0\.2\.10:6443\); API not readable since 12:04:00, verdict kept: connection refused$`}, nil},
		{"kept as the last eligible", &apipb.StatusResponse{Node: "cp-1", NodeWithdrawReasons: []string{"node cordoned", "node excluded from external load balancers"},
			Kubernetes: &apipb.KubernetesStatus{Enabled: true, Node: "cp-1", Server: "https://192.0.2.10:6443", Kubeconfig: "/k", Reachable: true, Registered: true},
			Warnings:   []string{"the Node withdraws this node (node cordoned) but no other node can take the VIP"}},
			[]string{`(?m)^kubernetes: node cp-1 cordoned, excluded from external load balancers → withdrawn \(`, `(?m)^warning: the Node withdraws this node \(node cordoned\) but no other node can take the VIP$`}, nil},
		{"enabled, no kubeconfig", &apipb.StatusResponse{Node: "cp-1", Kubernetes: &apipb.KubernetesStatus{Enabled: true, Explicit: true, Error: "no kubeconfig found (looked for /k)"}},
			[]string{`(?m)^kubernetes: enabled, but no kubeconfig is found; a cordoned or deleted Node does not withdraw this node \(no kubeconfig found \(looked for /k\)\)$`}, nil},
		{"kubeconfig not readable", &apipb.StatusResponse{Node: "cp-1", Kubernetes: &apipb.KubernetesStatus{Enabled: true, Explicit: true,
			Error: "open /etc/kubernetes/kubelet.conf: permission denied (user vipd cannot read it: link /usr/share/vipd/systemd/kubelet-credentials.conf ...)"}},
			[]string{`(?m)^kubernetes: the kubeconfig cannot be used, so a cordoned or deleted Node does not withdraw this node: open /etc/kubernetes/kubelet\.conf: permission denied \(user vipd cannot read it: link /usr/share/vipd/systemd/kubelet-credentials\.conf \.\.\.\)$`},
			[]string{"no kubeconfig is found", "waiting for"}},
		{"off", &apipb.StatusResponse{Node: "cp-1", Kubernetes: &apipb.KubernetesStatus{}},
			[]string{`(?m)^kubernetes: off: a cordon, drain or deletion of this host's Node does not move the VIP; to follow it, set \[kubernetes\] enabled = true \(docs/drain\.md\)$`},
			[]string{"warning"}},
		{"an older vipd, off", &apipb.StatusResponse{Node: "cp-1"}, nil, []string{"kubernetes", "warning"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := serve(t, &fakeVipd{status: tc.st})
			code, stdout, stderr := vipctl(t, "--socket", sock, "status")
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, re := range tc.want {
				if !regexp.MustCompile(re).MatchString(stdout) {
					t.Errorf("status lacks %s:\n%s", re, stdout)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(stdout, s) {
					t.Errorf("status shows %q:\n%s", s, stdout)
				}
			}
		})
	}
}

// TestStatusWithoutEligibility: a vipd that does not report eligibility
// (older) gets the old layout, no empty table.
func TestStatusWithoutEligibility(t *testing.T) {
	sock := serve(t, &fakeVipd{status: &apipb.StatusResponse{Node: "cp-1", Quorum: true, Healthy: true,
		Vips: []*apipb.VIPStatus{{Name: "apiserver", Address: "192.0.2.10", Mode: "l2"}}}})
	_, stdout, _ := vipctl(t, "--socket", sock, "status")
	if strings.Contains(stdout, "WHY NOT") || strings.Contains(stdout, "quorum:") {
		t.Errorf("empty eligibility or quorum shown:\n%s", stdout)
	}
}

func TestStatusJSON(t *testing.T) {
	sock := serve(t, &fakeVipd{status: eligibilityStatus()})
	code, stdout, _ := vipctl(t, "--socket", sock, "status", "--json")
	var st apipb.StatusJSON
	if err := json.Unmarshal([]byte(stdout), &st); code != ExitOK || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, stdout)
	}
	v, _ := st.VIP("apiserver")
	if len(v.Eligibility) != 3 || v.Eligibility[1].Reason != "unhealthy" || v.Eligibility[1].Since == nil || st.Fence.State != "held" || st.KnownMembers != 3 {
		t.Errorf("JSON lacks eligibility or fence: %s", stdout)
	}
}

// TestWithdrawSaysWhy: when vipd refuses or times out, vipctl prints each
// other node's reason for the VIPs still here; reasons vipd's message
// already gives are not repeated.
func TestWithdrawSaysWhy(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		code    int
		want    string // a line of stderr; "" for none
		notWant string
	}{
		{"refused, vipd gives no reasons",
			status.Error(codes.FailedPrecondition, "refusing to withdraw: no other eligible node for [apiserver]"), ExitRefused,
			"vipctl withdraw: apiserver: cp-2: unhealthy since 12:03:10; cp-3: withdrawn since 2026-05-01 00:01:01", "metrics:"},
		{"timed out",
			status.Error(codes.DeadlineExceeded, "timed out: [apiserver] not yet held by another node"), ExitTimeout,
			"vipctl withdraw: apiserver: cp-2: unhealthy since 12:03:10; cp-3: withdrawn since 2026-05-01 00:01:01", "metrics:"},
		{"refused, vipd lists every reason",
			status.Error(codes.FailedPrecondition, "refusing to withdraw: no other eligible node for apiserver: cp-2: unhealthy (health check failing since 12:03:10); cp-3: withdrawn; use --force to drop the VIP anyway"), ExitRefused,
			"", "why no other node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := serve(t, &fakeVipd{status: eligibilityStatus(), withdrawErr: tt.err})
			code, _, stderr := vipctl(t, "--socket", sock, "withdraw", "--wait", "--timeout", "1s")
			if code != tt.code {
				t.Errorf("exit %d, want %d: %s", code, tt.code, stderr)
			}
			if tt.want != "" && !strings.Contains(stderr, "\n"+tt.want+"\n") {
				t.Errorf("stderr lacks %q:\n%s", tt.want, stderr)
			}
			if strings.Contains(stderr, tt.notWant) {
				t.Errorf("stderr has %q:\n%s", tt.notWant, stderr)
			}
		})
	}
}

func TestRestoreForgetEvents(t *testing.T) {
	f := &fakeVipd{events: []*apipb.Event{{UnixNano: testNow().UnixNano(), Kind: "ownership", Vip: "apiserver", From: "cp-1", To: "cp-2", Reason: "r"}}}
	sock := serve(t, f)
	if code, stdout, _ := vipctl(t, "--socket", sock, "restore"); code != ExitOK || !strings.Contains(stdout, "restored") {
		t.Errorf("restore: exit %d %q", code, stdout)
	}
	if code, stdout, _ := vipctl(t, "--socket", sock, "forget", "cp-9"); code != ExitOK || f.forgot != "cp-9" || !strings.Contains(stdout, "forgot cp-9") {
		t.Errorf("forget: exit %d %q, forgot %q", code, stdout, f.forgot)
	}
	code, stdout, _ := vipctl(t, "--socket", sock, "events")
	if want := `2026-05-04T12:05:00Z ownership vip="apiserver" from="cp-1" to="cp-2" reason="r"`; code != ExitOK || strings.TrimSpace(stdout) != want {
		t.Errorf("events: exit %d %q, want %q", code, stdout, want)
	}
	code, stdout, _ = vipctl(t, "--socket", sock, "events", "--follow", "--json")
	var ev apipb.EventJSON
	if err := json.Unmarshal([]byte(stdout), &ev); code != ExitOK || err != nil || ev.To != "cp-2" {
		t.Errorf("events --json: exit %d %q %v", code, stdout, err)
	}
	f.forgetErr = status.Error(codes.FailedPrecondition, `forget: cp-2 is alive`)
	if code, _, _ := vipctl(t, "--socket", sock, "forget", "cp-2"); code != ExitRefused {
		t.Errorf("forget of an alive member: exit %d, want %d", code, ExitRefused)
	}
}

// TestCompletion: the completion scripts load in their shells, and
// completion offers the commands, the flags (--no-persist too) and, for
// forget, the dead and left members of the running vipd.
func TestCompletion(t *testing.T) {
	st := eligibilityStatus()
	st.Members = append(st.Members, &apipb.MemberStatus{Name: "cp-old", State: "dead"}, &apipb.MemberStatus{Name: "cp-gone", State: "left"})
	sock := serve(t, &fakeVipd{status: st})
	complete := func(args ...string) []string {
		code, stdout, stderr := vipctl(t, append([]string{"__complete"}, args...)...)
		if code != ExitOK {
			t.Fatalf("__complete %v: exit %d %s", args, code, stderr)
		}
		var out []string
		for _, l := range strings.Split(stdout, "\n") {
			if l != "" && !strings.HasPrefix(l, ":") {
				out = append(out, strings.SplitN(l, "\t", 2)[0])
			}
		}
		return out
	}
	has := func(got []string, want ...string) {
		t.Helper()
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				t.Errorf("completion %v lacks %q", got, w)
			}
		}
	}
	has(complete(""), "status", "withdraw", "restore", "forget", "events", "completion")
	has(complete("withdraw", "--"), "--wait", "--timeout", "--force", "--no-persist", "--socket")
	has(complete("completion", ""), "bash", "zsh", "fish")
	forget := complete("--socket", sock, "forget", "")
	has(forget, "cp-old", "cp-gone")
	for _, n := range forget {
		if n == "cp-2" || n == "cp-1" {
			t.Errorf("forget completes alive member %s", n)
		}
	}
	for _, sh := range Shells() {
		code, stdout, _ := vipctl(t, "completion", sh)
		if code != ExitOK || !strings.Contains(stdout, "vipctl") {
			t.Errorf("completion %s: exit %d", sh, code)
			continue
		}
		path, err := exec.LookPath(sh)
		if err != nil {
			t.Logf("%s not installed: script not parsed", sh)
			continue
		}
		file := filepath.Join(t.TempDir(), "vipctl."+sh)
		os.WriteFile(file, []byte(stdout), 0o644)
		if out, err := exec.Command(path, "-n", file).CombinedOutput(); err != nil {
			t.Errorf("%s -n on the completion script: %v %s", sh, err, out)
		}
	}
}

func credential(uid, gid uint32, groups []uint32) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
}

// TestLinksNoDaemonCode: vipctl stays a small client: it links the API and
// cobra, not the daemon's membership, BGP, metrics or announce code.
func TestLinksNoDaemonCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/vipd/vipd/cmd/vipctl").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, bad := range []string{"github.com/hashicorp/memberlist", "github.com/osrg/gobgp", "github.com/prometheus/",
			"github.com/vipd/vipd/agent", "github.com/vipd/vipd/l2", "github.com/vipd/vipd/bgp", "github.com/cpuguy83/go-md2man"} {
			if strings.HasPrefix(pkg, bad) && pkg != "github.com/vipd/vipd/agent/apipb" {
				t.Errorf("vipctl links %s", pkg)
			}
		}
	}
}

// TestDecommission: vipctl decommission forgets this node itself (vipd
// takes that as "removed for good").
func TestDecommission(t *testing.T) {
	f := &fakeVipd{status: &apipb.StatusResponse{Node: "cp-1", Quorum: true, Healthy: true}}
	sock := serve(t, f)
	code, stdout, stderr := vipctl(t, "--socket", sock, "decommission")
	if code != ExitOK || f.forgot != "cp-1" || !strings.Contains(stdout, "decommissioned cp-1") {
		t.Errorf("decommission: exit %d %q %q, forgot %q; want cp-1 forgotten", code, stdout, stderr, f.forgot)
	}
}

// TestStatusEscapesNames: a member name with a newline or an escape
// sequence (from a hostile or broken peer) is printed escaped.
func TestStatusEscapesNames(t *testing.T) {
	sock := serve(t, &fakeVipd{status: &apipb.StatusResponse{Node: "cp-1", Quorum: true, Healthy: true,
		Members: []*apipb.MemberStatus{{Name: "evil\nnode cp-9 alive\x1b[31m", State: "alive"}}}})
	_, stdout, _ := vipctl(t, "--socket", sock, "status")
	if strings.Contains(stdout, "\x1b") || strings.Contains(stdout, "\nnode cp-9") {
		t.Errorf("a hostile name reached the terminal raw:\n%q", stdout)
	}
	if !strings.Contains(stdout, `\x1b[31m`) {
		t.Errorf("escape sequence not shown escaped:\n%s", stdout)
	}
}

// TestJSONErrors: a command run with --json that fails prints one JSON
// object to standard output (what scripts parse), {"error": {"exit_code",
// "message"}}, besides the message on standard error.
func TestJSONErrors(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{{"status", "--json"}, {"events", "--json"}} {
		code, stdout, stderr := vipctl(t, append([]string{"--socket", sock}, args...)...)
		var got struct {
			Error *struct {
				ExitCode int    `json:"exit_code"`
				Message  string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(stdout), &got); err != nil || got.Error == nil {
			t.Errorf("vipctl %v: standard output %q is not a JSON error object (%v)", args, stdout, err)
			continue
		}
		if code != ExitUnavailable || got.Error.ExitCode != code || !strings.Contains(got.Error.Message, "vipd is not running") || !strings.Contains(stderr, "vipd is not running") {
			t.Errorf("vipctl %v: exit %d, JSON %+v, stderr %q; want %d in both and the message", args, code, *got.Error, stderr, ExitUnavailable)
		}
	}
}

// TestEveryCallIsBounded: every command that calls vipd once gives up when
// vipd does not answer in the call's time, with the "is it stuck?" message
// and exit 5 (withdraw's bound adds its --timeout, 30 s unless given).
func TestEveryCallIsBounded(t *testing.T) {
	f := &fakeVipd{hang: make(chan struct{})}
	sock := serve(t, f)
	t.Cleanup(func() { close(f.hang) }) // before the server stops
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"withdraw", "--timeout", "0s"}, {"restore"}, {"forget", "cp-2"}, {"decommission"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, _, stderr := vipctlTimeout(t, 50*time.Millisecond, append([]string{"--socket", sock}, args...)...)
			if code != ExitUnavailable || !strings.Contains(stderr, "vipd did not answer on "+sock+" in time; is it stuck?") {
				t.Errorf("exit %d, stderr %q; want %d and vipd did not answer in time", code, stderr, ExitUnavailable)
			}
		})
	}
}

// lateCtx is a call's context whose deadline has passed but whose timer
// has not fired yet (its Err is still nil): what vipctl sees when vipd's
// gRPC server, enforcing the same deadline, resets the stream first.
type lateCtx struct{ context.Context }

func (lateCtx) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestDeadlineRaceIsVipdNotAnswering: a DeadlineExceeded that arrives once
// the call's own deadline has passed is vipd not answering in time (exit
// 5), whichever side's timer fired first; before its deadline it is
// vipd's own timeout (exit 4: withdraw --wait).
func TestDeadlineRaceIsVipdNotAnswering(t *testing.T) {
	c := &conn{socket: "/run/vipd/vipd.sock"}
	reset := status.Error(codes.DeadlineExceeded, "stream terminated by RST_STREAM with error code: CANCEL")
	if xe := c.fail(lateCtx{context.Background()}, "status", reset); xe.code != ExitUnavailable || !strings.Contains(xe.msg, "did not answer") {
		t.Errorf("deadline passed: exit %d %q, want %d and vipd did not answer", xe.code, xe.msg, ExitUnavailable)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if xe := c.fail(ctx, "withdraw", status.Error(codes.DeadlineExceeded, "not taken over in time")); xe.code != ExitTimeout {
		t.Errorf("vipd's own timeout: exit %d %q, want %d", xe.code, xe.msg, ExitTimeout)
	}
}
