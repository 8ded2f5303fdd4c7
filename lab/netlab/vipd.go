package netlab

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vipd/vipd/agent/apipb"
)

// VIP is one [[vip]] of a lab vipd configuration.
type VIP struct {
	// Name of the VIP. Required.
	Name string
	// Address of the VIP. Required.
	Address netip.Addr
	// Preempt sets preempt = true.
	Preempt bool
	// HealthURL adds a [vip.health] checking this URL (e.g.
	// "http://127.0.0.1:6443/readyz", served by StartHTTP). [no check]
	HealthURL string
	// HealthInterval is the check interval. [vipd default]
	HealthInterval string
	// HealthCAFile and HealthTLSServerName are the check's ca_file and
	// tls_server_name (for an https URL). [none]
	HealthCAFile, HealthTLSServerName string
	// HealthTimeout is the check's timeout. [vipd default]
	HealthTimeout string
	// HealthRise and HealthFall are the check's rise and fall. [vipd
	// defaults]
	HealthRise, HealthFall int
}

// VipdOptions shape the configuration StartVipd writes.
type VipdOptions struct {
	// VIPs managed by the cluster. [VIP4 as "apiserver", plus VIP6 as
	// "apiserver6" when the lab has IPv6]
	VIPs []VIP
	// RejoinInterval is cluster.rejoin_interval. [RejoinInterval]
	RejoinInterval string
	// HandoffTimeout is cluster.handoff_timeout. [vipd default]
	HandoffTimeout string
	// FailureDetection is cluster.failure_detection. [fast]
	FailureDetection string
	// LogLevel is log_level. [debug]
	LogLevel string
	// API holds extra lines for the [api] table (metrics_address).
	API string
	// Cluster holds extra lines for the [cluster] table.
	Cluster string
	// Extra is appended to the file (more tables, e.g. [bgp]).
	Extra string
	// HostExtra, when set, is called for each node and what it returns is
	// appended after Extra: tables that differ between nodes (a
	// [kubernetes] section naming the node's own credentials).
	HostExtra func(h *Host) string
}

// DefaultVIPs are the VIPs used when VipdOptions.VIPs is empty.
func (l *Lab) DefaultVIPs() []VIP {
	vips := []VIP{{Name: "apiserver", Address: VIP4}}
	if l.IPv6 {
		vips = append(vips, VIP{Name: "apiserver6", Address: VIP6})
	}
	return vips
}

// Vipd is a vipd process of a lab node.
type Vipd struct {
	*Proc
	// Host is the node it runs on.
	Host *Host
	// Config is the path of its configuration file.
	Config string
}

// Socket is the API socket of node h's vipd.
func (h *Host) Socket() string { return filepath.Join(h.Dir, "vipd.sock") }

// StateDir is the state_dir of node h's vipd; it survives restarts.
func (h *Host) StateDir() string { return filepath.Join(h.Dir, "state") }

// VipdConfig renders the configuration of node h: bound to h.IP, the other
// nodes as peers, state and socket in h.Dir.
func (l *Lab) VipdConfig(h *Host, o VipdOptions) string {
	if o.RejoinInterval == "" {
		o.RejoinInterval = RejoinInterval.String()
	}
	if o.FailureDetection == "" {
		o.FailureDetection = "fast"
	}
	if o.LogLevel == "" {
		o.LogLevel = "debug"
	}
	if len(o.VIPs) == 0 {
		o.VIPs = l.DefaultVIPs()
	}
	var peers []string
	for _, n := range l.Nodes {
		if n != h {
			peers = append(peers, strconv.Quote(n.IP.String()))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "node_name = %q\nstate_dir = %q\nlog_level = %q\n\n", h.Name, h.StateDir(), o.LogLevel)
	fmt.Fprintf(&b, "[api]\nsocket = %q\n", h.Socket())
	if o.API != "" {
		b.WriteString(o.API + "\n")
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "[cluster]\nbind_address = %q\npeers = [%s]\nrejoin_interval = %q\nfailure_detection = %q\n",
		h.IP, strings.Join(peers, ", "), o.RejoinInterval, o.FailureDetection)
	if o.HandoffTimeout != "" {
		fmt.Fprintf(&b, "handoff_timeout = %q\n", o.HandoffTimeout)
	}
	if o.Cluster != "" {
		b.WriteString(o.Cluster + "\n")
	}
	for _, v := range o.VIPs {
		fmt.Fprintf(&b, "\n[[vip]]\nname = %q\naddress = %q\nmode = \"l2\"\ninterface = %q\npreempt = %t\n", v.Name, v.Address, h.Iface(), v.Preempt)
		if v.HealthURL != "" {
			fmt.Fprintf(&b, "[vip.health]\nurl = %q\n", v.HealthURL)
			for _, kv := range [][2]string{{"interval", v.HealthInterval}, {"timeout", v.HealthTimeout},
				{"ca_file", v.HealthCAFile}, {"tls_server_name", v.HealthTLSServerName}} {
				if kv[1] != "" {
					fmt.Fprintf(&b, "%s = %q\n", kv[0], kv[1])
				}
			}
			for _, kv := range []struct {
				key string
				n   int
			}{{"rise", v.HealthRise}, {"fall", v.HealthFall}} {
				if kv.n != 0 {
					fmt.Fprintf(&b, "%s = %d\n", kv.key, kv.n)
				}
			}
		}
	}
	if o.Extra != "" {
		b.WriteString("\n" + o.Extra + "\n")
	}
	if o.HostExtra != nil {
		if s := o.HostExtra(h); s != "" {
			b.WriteString("\n" + s + "\n")
		}
	}
	return b.String()
}

// StartVipd writes h's configuration and starts vipd in h's namespace,
// logging to h.Dir/vipd.log (appended across restarts). It waits (bounded)
// until the API answers. Failures stop the test.
func (l *Lab) StartVipd(h *Host, o VipdOptions) *Vipd {
	l.t.Helper()
	return l.StartVipdConfig(h, l.VipdConfig(h, o))
}

// StartVipds starts vipd on every node with the same options.
func (l *Lab) StartVipds(o VipdOptions) []*Vipd {
	l.t.Helper()
	var vs []*Vipd
	for _, n := range l.Nodes {
		vs = append(vs, l.StartVipd(n, o))
	}
	return vs
}

// Vipd returns the vipd last started on h (nil if none).
func (l *Lab) Vipd(h *Host) *Vipd {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.vipds[h.Name]
}

// StopVipd sends sig to h's vipd and waits up to timeout for it to exit.
func (l *Lab) StopVipd(h *Host, sig syscall.Signal, timeout time.Duration) error {
	v := l.Vipd(h)
	if v == nil {
		return fmt.Errorf("no vipd started on %s", h.Name)
	}
	return v.Stop(sig, timeout)
}

// Running returns the nodes whose vipd runs.
func (l *Lab) Running() []*Host {
	var hs []*Host
	for _, n := range l.Nodes {
		if v := l.Vipd(n); v != nil && v.Running() {
			hs = append(hs, n)
		}
	}
	return hs
}

// Vipctl runs vipctl against h's vipd and returns its combined output. The
// API is a unix socket, so it runs in the test's own namespace.
func (l *Lab) Vipctl(h *Host, args ...string) (string, error) {
	return Run(l.Tools.Vipctl, append([]string{"--socket", h.Socket()}, args...)...)
}

// Status is `vipctl status --json`: the stable JSON types of the API.
type Status = apipb.StatusJSON

// Member is one member in Status.
type Member = apipb.MemberJSON

// VIPStatus is one VIP in Status.
type VIPStatus = apipb.VIPJSON

// Status runs `vipctl status --json` against h's vipd.
func (l *Lab) Status(h *Host) (Status, error) {
	var st Status
	out, err := Run(l.Tools.Vipctl, "--socket", h.Socket(), "status", "--json")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, fmt.Errorf("vipctl status --json on %s: %w: %q", h.Name, err, out)
	}
	return st, nil
}

// OneHolder checks that exactly one of nodes (all nodes whose vipd runs
// when none are given) has vip's address on its interface, that no other
// lab node has it, and that the vipd of every given node agrees: its status
// names that node as owner and reports held only on it. It returns the
// holder, or an error describing what it saw.
func (l *Lab) OneHolder(vip VIP, nodes ...*Host) (string, error) {
	if len(nodes) == 0 {
		nodes = l.Running()
	}
	holders, err := l.AddrHolders(vip.Address)
	if err != nil {
		return "", err
	}
	if len(holders) != 1 {
		return "", fmt.Errorf("want exactly one node with %s, got %d: %v", vip.Address, len(holders), holders)
	}
	holder := holders[0]
	var problems []string
	for _, n := range nodes {
		st, err := l.Status(n)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", n.Name, err))
			continue
		}
		vs, ok := st.VIP(vip.Name)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: status has no VIP %q", n.Name, vip.Name))
			continue
		}
		if vs.Owner != holder {
			problems = append(problems, fmt.Sprintf("%s: status owner %q, address on %s", n.Name, vs.Owner, holder))
		}
		if vs.Held != (n.Name == holder) {
			problems = append(problems, fmt.Sprintf("%s: status held=%t, address on %s", n.Name, vs.Held, holder))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return "", fmt.Errorf("%s is on %s but status disagrees: %s", vip.Address, holder, strings.Join(problems, "; "))
	}
	return holder, nil
}

// Steady reports whether every node's vipd sees every node alive and
// exactly one node holds vip with every status agreeing (OneHolder); the
// detail says what it saw.
func (l *Lab) Steady(vip VIP) (bool, string) {
	for _, n := range l.Nodes {
		st, err := l.Status(n)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range l.Nodes {
			if mm, ok := st.Member(m.Name); !ok || mm.State != "alive" {
				return false, fmt.Sprintf("%s sees %s as %q", n.Name, m.Name, mm.State)
			}
		}
	}
	if _, err := l.OneHolder(vip); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// WaitOneHolder waits up to timeout for OneHolder to succeed and returns
// the holder, or an error with the last thing seen.
func (l *Lab) WaitOneHolder(vip VIP, timeout time.Duration, nodes ...*Host) (string, error) {
	return l.WaitMoved(vip, "", timeout, nodes...)
}

// WaitMoved is WaitOneHolder for a holder other than the node named from.
func (l *Lab) WaitMoved(vip VIP, from string, timeout time.Duration, nodes ...*Host) (string, error) {
	var holder string
	ok, detail := Eventually(timeout, 50*time.Millisecond, func() (bool, string) {
		h, err := l.OneHolder(vip, nodes...)
		if err != nil {
			return false, err.Error()
		}
		if h == from {
			return false, "still held by " + from
		}
		holder = h
		return true, ""
	})
	if !ok {
		return "", fmt.Errorf("after %v: %s", timeout, detail)
	}
	return holder, nil
}

// StartHTTP starts the lab HTTP server on h (port HTTPPort, all
// addresses): every path answers 200 with h.Name, so a prober sees which
// node served it. Stop it (Proc.Stop) to make a health check on
// http://127.0.0.1:6443/readyz fail, start it again to pass.
func (l *Lab) StartHTTP(h *Host) *Proc {
	l.t.Helper()
	p, err := l.Start(h, "httpd "+h.Name, filepath.Join(h.Dir, "httpd.log"), nil,
		l.Tools.HTTPD, "-name", h.Name, "-listen", fmt.Sprintf(":%d", HTTPPort))
	if err != nil {
		l.t.Fatalf("netlab: %v", err)
	}
	within := Scaled(5 * time.Second)
	ok, detail := Eventually(within, 20*time.Millisecond, func() (bool, string) {
		out, err := l.Exec(h, l.Tools.Probe, "-target", fmt.Sprintf("127.0.0.1:%d", HTTPPort), "-count", "1",
			"-timeout", Scaled(200*time.Millisecond).String())
		return err == nil && strings.Contains(out, " ok "+h.Name), fmt.Sprint(out, err)
	})
	if !ok {
		l.t.Fatalf("netlab: httpd on %s not answering after %v: %s", h.Name, within, detail)
	}
	l.mu.Lock()
	l.https[h.Name] = p
	l.mu.Unlock()
	return p
}

// StartHTTPAll starts the HTTP server on every node.
func (l *Lab) StartHTTPAll() {
	l.t.Helper()
	for _, n := range l.Nodes {
		l.StartHTTP(n)
	}
}

// HTTP returns the HTTP server last started on h (nil if none).
func (l *Lab) HTTP(h *Host) *Proc {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.https[h.Name]
}

// HolderWatch samples which nodes have a VIP's address, to catch moments
// when two hold it at once that a final check would miss.
type HolderWatch struct {
	stop chan struct{}
	done chan struct{}
	// set once done is closed
	samples  int
	multiple []string
	errs     []string
}

// WatchHolders samples vip's holders every interval until Stop or max
// passes.
func (l *Lab) WatchHolders(vip VIP, interval, max time.Duration) *HolderWatch {
	w := &HolderWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		deadline := time.Now().Add(max)
		for time.Now().Before(deadline) {
			hs, err := l.AddrHolders(vip.Address)
			w.samples++
			switch {
			case err != nil:
				w.errs = append(w.errs, err.Error())
			case len(hs) > 1:
				w.multiple = append(w.multiple, fmt.Sprintf("%s %v", time.Now().Format("15:04:05.000"), hs))
			}
			select {
			case <-w.stop:
				return
			case <-time.After(interval):
			}
		}
	}()
	return w
}

// Stop ends the sampling and returns the samples that saw more than one
// holder ("15:04:05.000 [n1 n3]"), the number of samples, and sampling
// errors.
func (w *HolderWatch) Stop() (multiple []string, samples int, errs []string) {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	return w.multiple, w.samples, w.errs
}
