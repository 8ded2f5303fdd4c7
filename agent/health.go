package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/agent/lease"
	"github.com/vipd/vipd/internal/childcaps"
)

// healthResult is one VIP's health verdict after rise/fall smoothing.
type healthResult struct {
	// Checker identifies the checker that sent it: results of a checker
	// stopped by a reload are ignored.
	Checker uint64
	VIP     string
	Healthy bool
	Err     error // last check error, nil when it passed
}

// probeFunc runs one check; nil means healthy.
type probeFunc func(ctx context.Context) error

// riseFall smooths check outcomes: rise successes in a row make a node
// healthy, fall failures in a row make it unhealthy. A new checker starts
// unhealthy, so a node does not claim a VIP before its service answered;
// a checker started by a reload starts from the VIP's current verdict.
type riseFall struct {
	rise, fall int
	healthy    bool
	okRun      int
	failRun    int
}

// observe records one outcome and reports whether the verdict changed.
func (r *riseFall) observe(ok bool) (changed bool) {
	if ok {
		r.okRun++
		r.failRun = 0
		if !r.healthy && r.okRun >= r.rise {
			r.healthy = true
			return true
		}
		return false
	}
	r.failRun++
	r.okRun = 0
	if r.healthy && r.failRun >= r.fall {
		r.healthy = false
		return true
	}
	return false
}

// healthCheck is a VIP's check as a checker runs it: the configuration,
// with its interval and timeout parsed.
type healthCheck struct {
	config.HealthConfig
	interval, timeout time.Duration
}

// newHealthCheck returns the check h configures.
func newHealthCheck(h *config.HealthConfig) *healthCheck {
	return &healthCheck{HealthConfig: *h, interval: h.IntervalDuration(), timeout: h.TimeoutDuration()}
}

// newProbe builds the check for a health configuration.
func newProbe(h *healthCheck) (probeFunc, error) {
	if len(h.Command) > 0 {
		argv := append([]string(nil), h.Command...)
		return func(ctx context.Context) error {
			// Without the capabilities that read any file (the
			// kubelet-credentials drop-in's), which would be inherited.
			out, err := childcaps.CombinedOutput(exec.CommandContext(ctx, argv[0], argv[1:]...))
			if err != nil {
				return fmt.Errorf("health command %s: %w: %s", argv[0], err, truncate(string(out), 200))
			}
			return nil
		}, nil
	}
	// The client is built at the first check that can read ca_file (at
	// cluster bootstrap vipd starts before kubeadm writes the CA, and the
	// check fails, saying why, until it exists) and again when the file
	// changes (a CA rotation).
	var (
		client *http.Client
		caSeen caStamp
	)
	url := h.URL
	return func(ctx context.Context) error {
		if stamp := stampOf(h.CAFile); client == nil || stamp != caSeen {
			c, err := newHTTPClient(h)
			if err != nil {
				return fmt.Errorf("health %s: %w", url, err)
			}
			if client != nil {
				client.CloseIdleConnections()
			}
			client, caSeen = c, stamp
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("health %s: %w", url, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("health %s: %w", url, err)
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Errorf("health %s: status %d", url, resp.StatusCode)
		}
		return nil
	}, nil
}

// caStamp identifies a version of the CA file (zero without one).
type caStamp struct {
	size int64
	mod  time.Time
}

func stampOf(path string) caStamp {
	if path == "" {
		return caStamp{}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return caStamp{}
	}
	return caStamp{fi.Size(), fi.ModTime()}
}

// newHTTPClient builds an HTTP check's client: TLS verified against ca_file
// (or the system roots) and tls_server_name, one kept-alive connection (a
// TCP and TLS handshake every interval was most of an idle node's CPU; a
// server that restarts closes it and the next check dials afresh), no
// proxy, no redirects.
func newHTTPClient(h *healthCheck) (*http.Client, error) {
	tlsConf := &tls.Config{InsecureSkipVerify: h.InsecureSkipVerify, ServerName: h.TLSServerName} //nolint:gosec // opt-in, documented
	if h.CAFile != "" {
		pool, err := config.CertPool(h.CAFile)
		if err != nil {
			return nil, err
		}
		tlsConf.RootCAs = pool
	}
	return &http.Client{
		Transport: &http.Transport{
			TLSClientConfig:     tlsConf,
			Proxy:               nil,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     max(3*h.interval, 30*time.Second),
		},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}, nil
}

// key identifies a check: VIPs whose checks have the same key share one
// checker, and a reload keeps a checker whose key is unchanged.
func (h *healthCheck) key() string {
	return fmt.Sprintf("%q %q %s %s %d %d %q %v %q", h.URL, h.Command, h.interval, h.timeout, h.Rise, h.Fall, h.CAFile, h.InsecureSkipVerify, h.TLSServerName)
}

// healthFailureLogEvery is how often a checker logs a failing check at WARN
// (with the number of failures left out since): a check failing every
// second must not flood the journal, and the reason must not hide at DEBUG.
const healthFailureLogEvery = 30 * time.Second

// checkRun is one health checker's settings.
type checkRun struct {
	id      uint64
	vips    []string
	cfg     *healthCheck
	probe   probeFunc
	initial bool // the verdict before the first check
	out     chan<- healthResult
	log     *slog.Logger
	metrics *metrics
	now     func() time.Time
	grid    lease.Grid
}

// run checks every interval until ctx ends and sends each verdict change
// (and the first verdict) to out, once for each of its VIPs. Checks after
// the first fall on the grid's beats of the interval (with the lease's
// rounds when the interval is a multiple of theirs); a check that takes
// longer than the interval skips the beats it overran.
func (r checkRun) run(ctx context.Context) {
	vip := strings.Join(r.vips, ",")
	rf := riseFall{rise: r.cfg.Rise, fall: r.cfg.Fall, healthy: r.initial}
	// An alarm, not a time.Timer: on the grid's beat it fires at the same
	// kernel instant as the lease's round, in one wake-up (a runtime timer
	// wakes the process up to a millisecond early, and once more).
	t := lease.NewAlarm()
	defer t.Close()
	defer context.AfterFunc(ctx, t.Close)()
	first := true
	var lastLogged time.Time
	suppressed := 0
	lastReason := "" // the failure reason last sent while unhealthy
	for {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.timeout)
		start := r.now()
		err := r.probe(cctx)
		lat := r.now().Sub(start)
		cancel()
		if ctx.Err() != nil {
			return
		}
		result := "ok"
		if err != nil {
			result = "fail"
		}
		for _, name := range r.vips {
			r.metrics.healthLatency.WithLabelValues(name).Observe(lat.Seconds())
			r.metrics.healthChecks.WithLabelValues(name, result).Inc()
		}
		changed := rf.observe(err == nil)
		if err != nil {
			if now := r.now(); lastLogged.IsZero() || now.Sub(lastLogged) >= healthFailureLogEvery {
				lastLogged = now
				r.log.Warn("health check failed", "vip", vip, "err", err, "suppressed", suppressed)
				suppressed = 0
			} else {
				suppressed++
			}
		}
		reason := ""
		if err != nil {
			reason = err.Error()
		}
		// Send verdict changes, the first verdict, and, while unhealthy, a
		// new reason (the CA now exists but the apiserver refuses): status
		// shows why, not why it was at first.
		if changed || first || (!rf.healthy && reason != lastReason) {
			first = false
			lastReason = reason
			for _, name := range r.vips {
				select {
				case r.out <- healthResult{Checker: r.id, VIP: name, Healthy: rf.healthy, Err: err}:
				case <-ctx.Done():
					return
				}
			}
		}
		now := r.now()
		t.Set(r.grid.After(now, r.cfg.interval).Sub(now))
		if !t.Wait() {
			return
		}
	}
}

// healthChecks runs one checker per distinct check and keeps them across
// reloads: a reload that leaves a check unchanged keeps its checker and its
// verdict, and a changed or new check starts from its VIPs' current verdict,
// so a reload never moves a VIP by itself. Only the loop calls its methods.
type healthChecks struct {
	ctx     context.Context
	a       *Agent
	nextID  uint64
	running map[string]*checker // by healthCheck.key
}

// checker is one running health check goroutine.
type checker struct {
	id     uint64
	vips   []string
	cancel context.CancelFunc
	done   chan struct{}
}

func newHealthChecks(ctx context.Context, a *Agent) *healthChecks {
	return &healthChecks{ctx: ctx, a: a, running: map[string]*checker{}}
}

// current reports whether a result comes from a running checker.
func (h *healthChecks) current(r healthResult) bool {
	for _, c := range h.running {
		if c.id == r.Checker {
			return true
		}
	}
	return false
}

// apply makes the running checkers match the VIPs' health configurations.
func (h *healthChecks) apply(vips map[string]*vipState) {
	groups := map[string][]string{}
	checks := map[string]*healthCheck{}
	for _, v := range vips {
		if v.cfg.Health != nil {
			hc := newHealthCheck(v.cfg.Health)
			k := hc.key()
			groups[k] = append(groups[k], v.cfg.Name)
			checks[k] = hc
		}
	}
	for k, c := range h.running {
		names := groups[k]
		sort.Strings(names)
		if !slices.Equal(names, c.vips) {
			c.cancel()
			<-c.done
			delete(h.running, k)
		}
	}
	for k, names := range groups {
		if h.running[k] != nil {
			continue
		}
		sort.Strings(names)
		probe, err := newProbe(checks[k])
		if err != nil {
			h.a.log.Error("health check not started; VIPs stay unhealthy", "vips", strings.Join(names, ","), "err", err)
			continue
		}
		initial := true
		for _, n := range names {
			if !vips[n].healthy {
				initial = false
			}
		}
		h.nextID++
		ctx, cancel := context.WithCancel(h.ctx)
		c := &checker{id: h.nextID, vips: names, cancel: cancel, done: make(chan struct{})}
		h.running[k] = c
		run := checkRun{id: c.id, vips: names, cfg: checks[k], probe: probe, initial: initial,
			out: h.a.health, log: h.a.log, metrics: h.a.metrics, now: h.a.now, grid: h.a.grid}
		h.a.goroutines.Go(func() {
			defer close(c.done)
			run.run(ctx)
		})
	}
}

// stop ends every checker.
func (h *healthChecks) stop() {
	for k, c := range h.running {
		c.cancel()
		<-c.done
		delete(h.running, k)
	}
}

// onHealth records a health verdict.
func (a *Agent) onHealth(r healthResult) {
	v := a.st.vips[r.VIP]
	if v == nil || !a.st.checks.current(r) {
		return
	}
	// A fault for the hooks once a check failed, until healthy again (a
	// check rising since start is not one: keepalived's scripts start OK).
	if r.Healthy {
		v.healthFailed = false
	} else if r.Err != nil {
		v.healthFailed = true
	}
	msg := "healthy"
	if !r.Healthy {
		msg = "unhealthy"
		if r.Err != nil {
			msg += ": " + r.Err.Error()
		}
	}
	if v.healthy == r.Healthy {
		switch {
		case v.healthDetail == "": // the first verdict, unchanged: record why
			v.healthDetail, v.healthSince = msg, a.now()
		case msg != v.healthDetail: // still unhealthy, for another reason
			v.healthDetail = msg
		}
		return
	}
	v.healthy = r.Healthy
	v.healthSince = a.now()
	v.healthDetail = msg
	lvl := slog.LevelInfo
	if !r.Healthy {
		lvl = slog.LevelWarn
	}
	a.log.Log(context.Background(), lvl, "health change", "vip", r.VIP, "healthy", r.Healthy, "detail", msg)
	a.events.publish(&apipb.Event{Kind: "health", Vip: r.VIP, Node: a.self, Message: msg})
}
