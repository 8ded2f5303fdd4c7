package bench

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vipd/vipd/lab/netlab"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat
// (100 on every Linux architecture Go supports).
const clockTicks = 100

// idleWindow and churnWindow are how long idle and churn are sampled. An
// idle vipd runs in bursts of well under a millisecond: a longer window
// evens out the kernel's tick-based accounting of them.
const (
	idleWindow  = 30 * time.Second
	churnWindow = 10 * time.Second
)

// procCPU is the CPU time a process has used: the scheduler's exact
// runtime from /proc/PID/schedstat (nanoseconds) when the kernel keeps it,
// else utime+stime from /proc/PID/stat, which are sampled at the clock tick
// and misstate a process that wakes briefly and often (each tick charges
// whoever happens to run at that moment a whole tick).
func procCPU(pid int) (time.Duration, error) {
	// schedstat is per thread: sum the process's threads (Go does not end
	// its threads, so none of the time is lost with one).
	if tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid)); err == nil {
		var sum time.Duration
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, task.Name()))
			if err != nil {
				continue
			}
			if d, err := parseSchedstat(string(b)); err == nil {
				sum += d
			}
		}
		if sum > 0 {
			return sum, nil
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// parseSchedstat reads the time spent on the CPU (the first field, in
// nanoseconds) of a /proc/PID/schedstat line.
func parseSchedstat(s string) (time.Duration, error) {
	f := strings.Fields(s)
	if len(f) < 1 {
		return 0, fmt.Errorf("schedstat %q: empty", s)
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("schedstat %q: %w", s, err)
	}
	return time.Duration(n), nil
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a
// /proc/PID/stat line; the command name in parentheses may hold spaces.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat %q: no ')'", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat %q: too few fields", stat)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("proc stat %q: utime/stime not numbers", stat)
	}
	return time.Duration(u+s) * time.Second / clockTicks, nil
}

// procRSS returns VmRSS of process pid in KiB.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(string(b))
}

func parseVmRSS(status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/PID/status")
}

// measure samples the vipds of l over window while during runs (it may be
// nil) and returns the largest RSS and CPU share over the nodes.
func measure(l *netlab.Lab, window time.Duration, during func(stop <-chan struct{})) (Usage, error) {
	var pids []int
	for _, n := range l.Nodes {
		v := l.Vipd(n)
		if v == nil || !v.Running() {
			return Usage{}, fmt.Errorf("vipd not running on %s", n.Name)
		}
		pids = append(pids, v.PID)
	}
	before := make([]time.Duration, len(pids))
	for i, pid := range pids {
		c, err := procCPU(pid)
		if err != nil {
			return Usage{}, err
		}
		before[i] = c
	}
	t0 := time.Now()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if during != nil {
			during(stop)
		}
	}()
	time.Sleep(window)
	close(stop)
	<-done
	elapsed := time.Since(t0)
	u := Usage{Window: elapsed.Round(time.Millisecond)}
	for i, pid := range pids {
		c, err := procCPU(pid)
		if err != nil {
			return Usage{}, err
		}
		rss, err := procRSS(pid)
		if err != nil {
			return Usage{}, err
		}
		u.CPUPercent = max(u.CPUPercent, 100*float64(c-before[i])/float64(elapsed))
		u.RSSKiB = max(u.RSSKiB, rss)
	}
	return u, nil
}

// churn withdraws and restores the nodes in turn, one step every 500ms,
// until stop.
func churn(l *netlab.Lab) func(stop <-chan struct{}) {
	return func(stop <-chan struct{}) {
		for i := 0; ; i++ {
			n := l.Nodes[(i/2)%len(l.Nodes)]
			cmd := "withdraw"
			if i%2 == 1 {
				cmd = "restore"
			}
			l.Vipctl(n, cmd)
			select {
			case <-stop:
				if i%2 == 0 {
					l.Vipctl(n, "restore")
				}
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// manyVIPs returns n L2 VIPs 198.51.100.1..n, each with the lab health
// check when health is set.
func manyVIPs(n int, health bool) []netlab.VIP {
	var vs []netlab.VIP
	for i := 1; i <= n; i++ {
		v := netlab.VIP{Name: fmt.Sprintf("vip%03d", i), Address: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})}
		if health {
			v.HealthURL = healthURL
		}
		vs = append(vs, v)
	}
	return vs
}

// waitVIPsSettled waits until every VIP is on exactly one node of l and
// none is on a node in exclude.
func waitVIPsSettled(l *netlab.Lab, vips []netlab.VIP, exclude *netlab.Host, timeout time.Duration) error {
	_, err := settleTime(l, vips, exclude, time.Now(), 0, timeout)
	return err
}

func footprint(t *T, fp *Footprint, c Config) {
	for _, b := range []struct {
		name string
		dst  *int64
	}{{"vipd", &fp.VipdBytes}, {"vipctl", &fp.VipctlBytes}} {
		fi, err := os.Stat(filepath.Join(c.BinDir, b.name))
		if err != nil {
			fp.Errors = append(fp.Errors, err.Error())
			continue
		}
		*b.dst = fi.Size()
	}
	l := netlab.New(t, netlab.Options{Nodes: 3})
	l.StartHTTPAll()
	for _, k := range []struct {
		vips        int
		detection   string
		idle, churn *Usage
	}{{1, "fast", &fp.Idle1, &fp.Churn1}, {1, "lan", &fp.Idle1LAN, nil}, {100, "fast", &fp.Idle100, &fp.Churn100}} {
		o := vipdOptions()
		o.FailureDetection = k.detection
		if k.vips > 1 {
			o.VIPs = manyVIPs(k.vips, true)
		}
		for _, n := range l.Nodes {
			if v := l.Vipd(n); v != nil {
				v.Stop(syscall.SIGTERM, 20*time.Second)
			}
		}
		l.StartVipds(o)
		if err := waitVIPsSettled(l, o.VIPs, nil, 60*time.Second); err != nil {
			fp.Errors = append(fp.Errors, fmt.Sprintf("%d VIPs (%s): %v", k.vips, k.detection, err))
			continue
		}
		// Let start-up work (joins, first health checks) pass.
		time.Sleep(3 * time.Second)
		u, err := measure(l, idleWindow, nil)
		if err != nil {
			fp.Errors = append(fp.Errors, fmt.Sprintf("idle %d VIPs: %v", k.vips, err))
		}
		*k.idle = u
		fmt.Fprintf(c.Log, "    footprint %d VIPs %s idle: RSS %d KiB, CPU %.2f%%\n", k.vips, k.detection, u.RSSKiB, u.CPUPercent)
		if k.churn == nil {
			continue
		}
		u, err = measure(l, churnWindow, churn(l))
		if err != nil {
			fp.Errors = append(fp.Errors, fmt.Sprintf("churn %d VIPs: %v", k.vips, err))
		}
		*k.churn = u
		fmt.Fprintf(c.Log, "    footprint %d VIPs churn: RSS %d KiB, CPU %.2f%%\n", k.vips, u.RSSKiB, u.CPUPercent)
	}
	// READY: n3 restarts with a fake service manager socket while n1 and
	// n2 run, with the 1-VIP configuration.
	o := vipdOptions()
	for _, n := range l.Nodes {
		l.Vipd(n).Stop(syscall.SIGTERM, 20*time.Second)
	}
	l.StartVipds(o)
	h := l.Nodes[2]
	cfg := filepath.Join(h.Dir, "vipd.toml")
	if err := os.WriteFile(cfg, []byte(l.VipdConfig(h, o)), 0o644); err != nil {
		t.Fatalf("%v", err)
	}
	for run := 1; run <= c.Runs; run++ {
		if v := l.Vipd(h); v != nil {
			v.Stop(syscall.SIGTERM, 20*time.Second)
		}
		d, err := readyTime(l, h, cfg)
		if err != nil {
			fp.Errors = append(fp.Errors, fmt.Sprintf("READY run %d: %v", run, err))
			continue
		}
		fmt.Fprintf(c.Log, "    READY run %d: %v\n", run, d)
		fp.Ready = append(fp.Ready, d)
	}
}

// readyTime starts vipd on h with $NOTIFY_SOCKET pointing at a unixgram
// listener and returns the time from exec to the first READY=1. The
// process is stopped again before it returns.
func readyTime(l *netlab.Lab, h *netlab.Host, cfg string) (time.Duration, error) {
	path := filepath.Join(h.Dir, "notify.sock")
	os.Remove(path)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return 0, fmt.Errorf("notify socket: %w", err)
	}
	defer conn.Close()
	defer os.Remove(path)
	t0 := time.Now()
	p, err := l.Start(h, "vipd-notify "+h.Name, filepath.Join(h.Dir, "vipd.log"), nil,
		"env", "NOTIFY_SOCKET="+path, l.Tools.Vipd, "--config", cfg)
	if err != nil {
		return 0, err
	}
	defer p.Stop(syscall.SIGTERM, 20*time.Second)
	buf := make([]byte, 4096)
	deadline := t0.Add(30 * time.Second)
	for {
		conn.SetReadDeadline(deadline)
		n, err := conn.Read(buf)
		if err != nil {
			return 0, fmt.Errorf("no READY=1 within 30s: %w", err)
		}
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			if line == "READY=1" {
				return time.Since(t0), nil
			}
		}
	}
}
