package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// healthURL is what both systems check on their own node (lab httpd).
var healthURL = fmt.Sprintf("http://127.0.0.1:%d/readyz", netlab.HTTPPort)

// vipdOptions is the vipd configuration of the failover lab: one L2 VIP
// with an HTTP health check at vipd's default interval, rise and fall,
// failure_detection "fast"; $VIPD_BENCH_EXTRA is appended to it (a
// [hooks] section, to measure a failover with a slow hook).
func vipdOptions() netlab.VipdOptions {
	return netlab.VipdOptions{
		VIPs:             []netlab.VIP{{Name: "apiserver", Address: netlab.VIP4, HealthURL: healthURL}},
		RejoinInterval:   "2s",
		FailureDetection: "fast",
		LogLevel:         "info",
		Extra:            os.Getenv("VIPD_BENCH_EXTRA"),
	}
}

// vipdSystem runs vipd on the lab nodes.
type vipdSystem struct {
	l *netlab.Lab
	o netlab.VipdOptions
}

func (s *vipdSystem) name() string { return "vipd" }

func (s *vipdSystem) start(h *netlab.Host) error {
	s.l.StartVipd(h, s.o)
	return nil
}

// steady: every node's vipd sees every node alive, and exactly one node
// holds the VIP with every status agreeing.
func (s *vipdSystem) steady() (bool, string) { return s.l.Steady(s.o.VIPs[0]) }

func (s *vipdSystem) membership() []string { return netlab.MembershipMatches() }

func (s *vipdSystem) logPath(h *netlab.Host) string { return filepath.Join(h.Dir, "vipd.log") }

func (s *vipdSystem) handoff(h *netlab.Host) error {
	_, err := s.l.Vipctl(h, "withdraw", "--wait", "--timeout", "15s")
	return err
}

func (s *vipdSystem) unhandoff(h *netlab.Host) error {
	_, err := s.l.Vipctl(h, "restore")
	return err
}

// restart stops h's vipd with SIGUSR2 (a restart in place) and starts the
// next one at once, as systemd's restart job does.
func (s *vipdSystem) restart(h *netlab.Host) error {
	if err := s.l.StopVipd(h, syscall.SIGUSR2, 10*time.Second); err != nil {
		return err
	}
	return s.start(h)
}

func (s *vipdSystem) crash(h *netlab.Host) error {
	v := s.l.Vipd(h)
	if v == nil {
		return fmt.Errorf("no vipd on %s", h.Name)
	}
	v.Kill()
	return nil
}

// keepalivedPriority is node i's (0-based) VRRP priority: 150, 100, 50.
func keepalivedPriority(i int) int { return 150 - 50*i }

// KeepalivedConfig renders the keepalived.conf of a node: one VRRP
// instance on netlab.Iface for the lab VIP, advert_int 1, preempting by
// priority, with the lab HTTP server as a tracked script (interval 1, fall
// 3, rise 2, weight -100: like vipd's health check defaults).
func KeepalivedConfig(node string, priority int) string {
	return keepalivedConfig(node, priority, "")
}

// defaultCheck is keepalived's tracked script in the failover lab: a curl
// of the lab HTTP server's /readyz.
var defaultCheck = "/usr/bin/curl -sf -o /dev/null -m 1 " + healthURL

// keepalivedConfig is KeepalivedConfig with check as the tracked script's
// command ("" for defaultCheck).
func keepalivedConfig(node string, priority int, check string) string {
	if check == "" {
		check = defaultCheck
	}
	return fmt.Sprintf(`global_defs {
	router_id %s
	script_user root
	enable_script_security
}

vrrp_script chk_http {
	script "%s"
	interval 1
	timeout 1
	fall 3
	rise 2
	weight -100
}

vrrp_instance VI_1 {
	state BACKUP
	interface %s
	virtual_router_id 51
	priority %d
	advert_int 1
	virtual_ipaddress {
		%s/32 dev %s
	}
	track_script {
		chk_http
	}
}
`, node, check, netlab.Iface, priority, netlab.VIP4, netlab.Iface)
}

// keepalivedSystem runs keepalived (VRRP) on the lab nodes.
type keepalivedSystem struct {
	l *netlab.Lab
	// check is the tracked script's command ("" for defaultCheck).
	check string
	mu    sync.Mutex
	ps    map[string]*netlab.Proc
}

func (s *keepalivedSystem) name() string { return "keepalived" }

func (s *keepalivedSystem) dir(h *netlab.Host) string { return filepath.Join(h.Dir, "keepalived") }

// membership: keepalived's membership traffic is VRRP (IP protocol 112).
func (s *keepalivedSystem) membership() []string { return netlab.VRRPMatches() }

func (s *keepalivedSystem) logPath(h *netlab.Host) string {
	return filepath.Join(s.dir(h), "keepalived.log")
}

// start runs keepalived in the foreground in h's namespace, VRRP only,
// logging to the console, without respawning its VRRP child, with pid
// files of its own.
func (s *keepalivedSystem) start(h *netlab.Host) error {
	d := s.dir(h)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	idx := 0
	for i, n := range s.l.Nodes {
		if n == h {
			idx = i
		}
	}
	conf := filepath.Join(d, "keepalived.conf")
	if err := os.WriteFile(conf, []byte(keepalivedConfig(h.Name, keepalivedPriority(idx), s.check)), 0o644); err != nil {
		return err
	}
	os.Remove(filepath.Join(d, "vrrp.pid"))
	p, err := s.l.Start(h, "keepalived "+h.Name, filepath.Join(d, "keepalived.log"), nil,
		"keepalived", "--dont-fork", "--log-console", "--log-detail", "--no-syslog", "--vrrp", "--dont-respawn",
		"--use-file", conf, "--pid", filepath.Join(d, "keepalived.pid"),
		"--vrrp_pid", filepath.Join(d, "vrrp.pid"), "--checkers_pid", filepath.Join(d, "checkers.pid"))
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.ps[h.Name] = p
	s.mu.Unlock()
	ok, detail := netlab.Eventually(10*time.Second, 50*time.Millisecond, func() (bool, string) {
		if !p.Running() {
			return true, ""
		}
		_, err := s.vrrpPID(h)
		return err == nil, fmt.Sprint(err)
	})
	if !p.Running() {
		return fmt.Errorf("keepalived on %s exited: %v (log %s)", h.Name, p.ExitErr(), p.Log)
	}
	if !ok {
		return fmt.Errorf("keepalived on %s: no VRRP child after 10s: %s", h.Name, detail)
	}
	return nil
}

// vrrpPID reads the PID of h's VRRP child process from its pid file.
func (s *keepalivedSystem) vrrpPID(h *netlab.Host) (int, error) {
	b, err := os.ReadFile(filepath.Join(s.dir(h), "vrrp.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// steady: every keepalived runs (the single address holder is checked by
// waitSteady), and nothing changed for the last 4 advert intervals.
func (s *keepalivedSystem) steady() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.l.Nodes {
		p := s.ps[n.Name]
		if p == nil || !p.Running() {
			return false, "keepalived not running on " + n.Name
		}
		fi, err := os.Stat(p.Log)
		if err != nil {
			return false, err.Error()
		}
		if age := time.Since(fi.ModTime()); age < 4*time.Second {
			return false, fmt.Sprintf("keepalived on %s logged %v ago", n.Name, age.Round(time.Millisecond))
		}
	}
	return true, ""
}

func (s *keepalivedSystem) proc(h *netlab.Host) (*netlab.Proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.ps[h.Name]
	if p == nil || !p.Running() {
		return nil, fmt.Errorf("keepalived not running on %s", h.Name)
	}
	return p, nil
}

// handoff stops h's keepalived like systemctl stop: SIGTERM, which makes
// the master send an advert with priority 0 and release the VIP.
func (s *keepalivedSystem) handoff(h *netlab.Host) error {
	p, err := s.proc(h)
	if err != nil {
		return err
	}
	return p.Stop(syscall.SIGTERM, 10*time.Second)
}

func (s *keepalivedSystem) unhandoff(h *netlab.Host) error { return s.start(h) }

// restart is systemctl restart of keepalived: SIGTERM (the master
// releases with priority 0), then start.
func (s *keepalivedSystem) restart(h *netlab.Host) error {
	if err := s.handoff(h); err != nil {
		return err
	}
	return s.start(h)
}

// crash SIGKILLs the VRRP child first (so it cannot react to its parent's
// death), then the parent, which was started with --dont-respawn. Both
// are processes this lab started.
func (s *keepalivedSystem) crash(h *netlab.Host) error {
	p, err := s.proc(h)
	if err != nil {
		return err
	}
	child, err := s.vrrpPID(h)
	if err != nil {
		return fmt.Errorf("VRRP child pid: %w", err)
	}
	if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill VRRP child %d: %w", child, err)
	}
	p.Kill()
	return nil
}
