package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/nodewatch"
)

// metrics are the agent's Prometheus metrics, in a registry of its own (no
// package-level state), served on api.metrics_address when set.
type metrics struct {
	reg              *prometheus.Registry
	held             *prometheus.GaugeVec
	owner            *prometheus.GaugeVec
	ownershipChanges *prometheus.CounterVec
	members          *prometheus.GaugeVec
	healthUp         *prometheus.GaugeVec
	healthChecks     *prometheus.CounterVec
	healthLatency    *prometheus.HistogramVec
	conflicts        *prometheus.CounterVec
	rejoinAttempts   prometheus.Counter
	rejoinJoined     prometheus.Counter
	quorum           prometheus.Gauge
	withdrawn        prometheus.Gauge
	announceErrors   *prometheus.CounterVec
	repairs          *prometheus.CounterVec
	rejected         *prometheus.CounterVec
	fenced           prometheus.Gauge
	fenceAge         prometheus.Gauge
	// vipHolders, vipInfo and withdrawnSince feed the alert rules in
	// packaging/prometheus/vipd-alerts.yml.
	vipHolders     *prometheus.GaugeVec
	vipInfo        *prometheus.GaugeVec
	withdrawnSince prometheus.Gauge
	// The VIPs' client connections (clients.go).
	clientConns        *prometheus.GaugeVec
	clientConnsKnown   *prometheus.GaugeVec
	clientPublishBytes prometheus.Counter
	clientResets       *prometheus.CounterVec
	clientsClosed      *prometheus.CounterVec
	clientReconnects   *prometheus.CounterVec
	// nodeWithdrawn and kubeUp are the Node watch's (nodewatch).
	nodeWithdrawn *prometheus.GaugeVec
	kubeUp        *prometheus.GaugeVec
	knownVIPs     []string // VIPs with series, for removal after a reload
	// The [hooks] command's runs (hooks.go).
	hookRuns       *prometheus.CounterVec
	hookDuration   *prometheus.HistogramVec
	hookSuperseded *prometheus.CounterVec
	hookRunning    *prometheus.GaugeVec
}

func newMetrics(bgpPeers func(context.Context) []bgpPeerMetric) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vipd_vip_held",
			Help: "1 when this node holds (announces) the VIP."}, []string{"vip"}),
		owner: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vipd_vip_owner",
			Help: "1 when this node is the elected owner of the VIP."}, []string{"vip"}),
		ownershipChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vipd_ownership_changes_total",
			Help: "Changes of a VIP's elected owner as seen by this node, by reason."}, []string{"vip", "reason"}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vipd_members",
			Help: "Cluster members by state."}, []string{"state"}),
		healthUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vipd_health_up",
			Help: "1 when this node's health check for the VIP passes (after rise/fall)."}, []string{"vip"}),
		healthChecks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vipd_health_checks_total",
			Help: "Health checks run, by result."}, []string{"vip", "result"}),
		healthLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vipd_health_check_duration_seconds",
			Help: "Duration of health checks.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 12)}, []string{"vip"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vipd_arp_conflicts_total",
			Help: "ARP replies or neighbor advertisements for a held VIP from another MAC."}, []string{"vip"}),
		rejoinAttempts: prometheus.NewCounter(prometheus.CounterOpts{Name: "vipd_rejoin_attempts_total",
			Help: "Peers the rejoin loop tried to join."}),
		rejoinJoined: prometheus.NewCounter(prometheus.CounterOpts{Name: "vipd_rejoin_joined_total",
			Help: "Peers the rejoin loop joined."}),
		quorum: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vipd_quorum",
			Help: "1 when this node sees a majority of the known members (or quorum is not required)."}),
		withdrawn: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vipd_withdrawn",
			Help: "1 when this node is withdrawn (vipctl withdraw)."}),
		announceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vipd_announce_errors_total",
			Help: "Failed announce or withdraw operations."}, []string{"vip", "op"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vipd_vip_repairs_total",
			Help: "Held VIPs found missing from the network (address removed, route gone) and announced again."}, []string{"vip"}),
		fenced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vipd_fenced",
			Help: "1 when this node is fenced: no majority of the known members confirmed hearing it recently, so it holds no VIP."}),
		fenceAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vipd_fence_evidence_age_seconds",
			Help: "Time since a majority of the known members last confirmed hearing this node (-1: never; 0 when quorum is not required)."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vipd_membership_rejected_total",
			Help: "Nodes refused admission to membership (invalid name, address outside cluster.allowed_networks, metadata not understood), by reason."}, []string{"reason"}),
		vipHolders: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vipd_vip_holders",
			Help: "Alive or suspect members (this node included) that report holding the VIP, as this node sees them."}, []string{"vip"}),
		vipInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vipd_vip_info",
			Help: "Always 1: a configured VIP with its address, mode and announce setting."}, []string{"vip", "address", "mode", "announce"}),
		withdrawnSince: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vipd_withdrawn_since_timestamp_seconds",
			Help: "Unix time this node was withdrawn (the withdraw flag's time); 0 when not withdrawn."}),
		clientConns: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vipd_client_connections",
			Help: "Established client connections this node has on the VIP, as last published to its peers (0 when it does not hold the VIP)."}, []string{"vip"}),
		clientConnsKnown: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vipd_client_connections_known",
			Help: "Client connections in this node's copy of a peer's list (what it resets if it takes that peer's VIPs over), by peer."}, []string{"node"}),
		clientPublishBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "vipd_client_publish_bytes_total",
			Help: "Bytes of client connection lists sent to peers."}),
		clientResets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vipd_client_resets_total",
			Help: "Client connections of the VIP's previous holder this node reset after taking it over, by result (sent, failed, unsent)."}, []string{"vip", "result"}),
		clientsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vipd_client_connections_closed_total",
			Help: "Client connections this node closed when it handed the VIP over on purpose."}, []string{"vip"}),
		clientReconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vipd_client_reconnects_total",
			Help: "Clients (addresses) this node reset that were connected to it again within a minute."}, []string{"vip"}),
		nodeWithdrawn: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vipd_node_withdrawn",
			Help: "1 when this node's Kubernetes Node withdraws it for the reason (node cordoned, node deleted...); a series per reason."}, []string{"reason"}),
		kubeUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vipd_kubernetes_api_up",
			Help: "1 when the last read of this node's Node from the Kubernetes API succeeded; absent when the Node watch is off."}, nil),
		hookRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vipd_hook_runs_total",
			Help: "Runs of the [hooks] command, by the state it was told (master, backup, fault) and result (ok, failed, timeout, error)."}, []string{"vip", "state", "result"}),
		hookDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vipd_hook_duration_seconds",
			Help: "Duration of the [hooks] command's runs.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}, []string{"vip"}),
		hookSuperseded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vipd_hook_superseded_total",
			Help: "Changes of the VIP's state that waited for a running hook and were folded into a later one (never run on their own)."}, []string{"vip"}),
		hookRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vipd_hook_running",
			Help: "1 while the [hooks] command runs for the VIP."}, []string{"vip"}),
	}
	m.reg.MustRegister(m.held, m.owner, m.ownershipChanges, m.members, m.healthUp, m.healthChecks,
		m.healthLatency, m.conflicts, m.rejoinAttempts, m.rejoinJoined, m.quorum, m.withdrawn, m.announceErrors,
		m.repairs, m.rejected, m.fenced, m.fenceAge, m.vipHolders, m.vipInfo, m.withdrawnSince, m.nodeWithdrawn, m.kubeUp,
		m.clientConns, m.clientConnsKnown, m.clientPublishBytes, m.clientResets, m.clientsClosed, m.clientReconnects,
		m.hookRuns, m.hookDuration, m.hookSuperseded, m.hookRunning,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if bgpPeers != nil {
		m.reg.MustRegister(&bgpCollector{peers: bgpPeers})
	}
	return m
}

// bgpPeerMetric is what the BGP collector reports of one session.
type bgpPeerMetric struct {
	Peer        string
	Established bool
	Received    uint64
	Advertised  uint64
}

var (
	bgpUpDesc  = prometheus.NewDesc("vipd_bgp_peer_up", "1 when the BGP session is established.", []string{"peer"}, nil)
	bgpRcvDesc = prometheus.NewDesc("vipd_bgp_peer_received_prefixes", "Prefixes received from the peer.", []string{"peer"}, nil)
	bgpAdvDesc = prometheus.NewDesc("vipd_bgp_peer_advertised_prefixes", "Prefixes advertised to the peer.", []string{"peer"}, nil)
)

// bgpCollector reads session state at scrape time.
type bgpCollector struct {
	peers func(context.Context) []bgpPeerMetric
}

func (c *bgpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- bgpUpDesc
	ch <- bgpRcvDesc
	ch <- bgpAdvDesc
}

func (c *bgpCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, p := range c.peers(ctx) {
		up := 0.0
		if p.Established {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(bgpUpDesc, prometheus.GaugeValue, up, p.Peer)
		ch <- prometheus.MustNewConstMetric(bgpRcvDesc, prometheus.GaugeValue, float64(p.Received), p.Peer)
		ch <- prometheus.MustNewConstMetric(bgpAdvDesc, prometheus.GaugeValue, float64(p.Advertised), p.Peer)
	}
}

// serve serves /metrics on addr until ctx ends.
func (m *metrics) serve(ctx context.Context, addr string, wg *sync.WaitGroup, onErr func(error)) error {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		_, port, _ := net.SplitHostPort(addr)
		return fmt.Errorf("api.metrics_address %s is in use by another process: find it with 'ss -ltnp sport = :%s', stop it, or set api.metrics_address", addr, port)
	}
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			onErr(err)
		}
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	return nil
}

// updateMetrics sets the gauges from the loop's state after a pass.
func (a *Agent) updateMetrics(members []memberInfo, view []Member, quorum bool) {
	m := a.metrics
	for name, v := range a.st.vips {
		m.held.WithLabelValues(name).Set(b2f(v.held))
		m.owner.WithLabelValues(name).Set(b2f(v.owner == a.self))
		m.healthUp.WithLabelValues(name).Set(b2f(v.healthy))
		holders := 0
		for _, mb := range view {
			if mb.State <= StateSuspect && mb.Meta.VIP(config.VIPKey(name)).Held {
				holders++
			}
		}
		m.vipHolders.WithLabelValues(name).Set(float64(holders))
	}
	counts := map[MemberState]int{StateAlive: 1} // this node
	for _, mb := range members {
		if mb.Name != a.self {
			counts[mb.State]++
		}
	}
	for _, st := range []MemberState{StateAlive, StateSuspect, StateDead, StateLeft} {
		m.members.WithLabelValues(st.String()).Set(float64(counts[st]))
	}
	m.quorum.Set(b2f(quorum))
	m.withdrawn.Set(b2f(a.st.withdrawn))
	m.fenced.Set(b2f(a.st.fence.Fenced()))
	switch ls := a.st.lease; {
	case !ls.Required():
		m.fenceAge.Set(0)
	case ls.Evidence().IsZero():
		m.fenceAge.Set(-1)
	default:
		m.fenceAge.Set(a.now().Sub(ls.Evidence()).Seconds())
	}
	since := 0.0
	if a.st.withdrawn && !a.st.withdrawnSince.IsZero() {
		since = float64(a.st.withdrawnSince.UnixNano()) / 1e9
	}
	m.withdrawnSince.Set(since)
	for _, r := range nodewatch.Reasons() {
		m.nodeWithdrawn.WithLabelValues(r).Set(b2f(slices.Contains(a.st.node.reasons, r)))
	}
	if a.st.node.watcher != nil {
		m.kubeUp.WithLabelValues().Set(b2f(a.st.node.st.Reachable))
	} else {
		m.kubeUp.Reset()
	}
}

// setVIPInfo publishes vipd_vip_info for the configured VIPs, removing
// the series of VIPs no longer configured.
func (a *Agent) setVIPInfo() {
	a.metrics.vipInfo.Reset()
	for name, v := range a.st.vips {
		a.metrics.vipInfo.WithLabelValues(name, v.cfg.Addr().String(), v.cfg.Mode, v.cfg.Announce).Set(1)
	}
	for _, name := range a.metrics.knownVIPs {
		if _, ok := a.st.vips[name]; !ok {
			a.metrics.held.DeleteLabelValues(name)
			a.metrics.owner.DeleteLabelValues(name)
			a.metrics.healthUp.DeleteLabelValues(name)
			a.metrics.vipHolders.DeleteLabelValues(name)
			a.metrics.clientConns.DeleteLabelValues(name)
		}
	}
	a.metrics.knownVIPs = a.vipNames()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
