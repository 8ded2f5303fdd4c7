package config

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/vipd/vipd/agent/lease"
	"github.com/vipd/vipd/nodewatch"
)

// Defaults. applyDefaults fills in every default that is a fixed value, and
// the field comments below repeat each in brackets. The others are applied
// where what they depend on is known, as their comments say:
// api.socket_group (whether the group exists), cluster.require_quorum (how
// many members are known), cluster.allowed_networks (whether key_file is
// set), bgp.router_id (the bind address, by the BGP check); and a BGP
// peer's timers and prefix limit are the bgp package's defaults (a zero
// value reaches the speaker).
const (
	DefaultConfigPath = "/etc/vipd/vipd.toml"
	DefaultStateDir   = "/var/lib/vipd"
	// DefaultSocket is api.socket: the socket vipctl dials when told
	// none (apipb.DefaultSocket, which TestDefaultsAreTheirOwners checks it
	// equals; the configuration does not link the API's gRPC code).
	DefaultSocket           = "/run/vipd/vipd.sock"
	DefaultLogLevel         = "info"
	DefaultBindPort         = 7946
	DefaultRejoinInterval   = 30 * time.Second
	DefaultFailureDetection = FailureDetectionFast
	DefaultHandoffTimeout   = 10 * time.Second
	DefaultRestartGrace     = 3 * time.Second
	// MinRestartGrace and MaxRestartGrace bound cluster.restart_grace:
	// the addresses left for the next process get a kernel lifetime of the
	// grace less a second, in whole seconds (the kernel's expiry has a
	// second of slack), so at least a second of it. A peer's word counts
	// for no longer than MaxRestartGrace, whatever it says (the lease caps
	// it on receipt).
	MinRestartGrace         = 2 * time.Second
	MaxRestartGrace         = lease.MaxRestartGrace
	DefaultHealthInterval   = 300 * time.Millisecond
	DefaultHealthTimeout    = 500 * time.Millisecond
	DefaultHealthRise       = 2
	DefaultHealthFall       = 3
	DefaultGracefulShutdown = 5 * time.Second
	// DefaultBGPListenPort is bgp.listen_port: the speaker does not
	// listen, it initiates every session (the bgp package's
	// DefaultListenPort, which TestSpeakerLimits checks it equals).
	DefaultBGPListenPort = -1
	// DefaultPokeRate and DefaultPokeTimeout are
	// connections.poke_rate and poke_timeout: conns.DefaultPokeRate and
	// conns.DefaultPokeTimeout, which TestDefaultsAreTheirOwners checks
	// they equal.
	DefaultPokeRate    = 10000
	DefaultPokeTimeout = 5 * time.Second
	// DefaultL2RefreshInterval is l2.refresh_interval: kube-vip's period,
	// shorter than the 5s a Linux neighbour waits (delay_first_probe_time)
	// before it probes a stale entry, for 40 frames per IPv4 VIP a minute
	// (docs/benchmarks.md).
	DefaultL2RefreshInterval = 3 * time.Second
	DefaultHookTimeout       = 10 * time.Second
	DefaultLingerMax         = 10 * time.Minute
	// DefaultPriority is a VIP's priority when none is written:
	// keepalived's default. Nodes of equal priority go by rank, so a
	// cluster that writes none elects as before priorities existed.
	DefaultPriority = 100
	// MaxPreemptDelay bounds vip.preempt_delay.
	MaxPreemptDelay = time.Hour

	// MaxVIPs bounds the number of VIPs: every node's per-VIP state travels
	// in its memberlist metadata, which memberlist caps at 512 bytes.
	MaxVIPs = 100
	// MaxVIPsWithPriority bounds the VIPs of a node that writes a
	// priority other than DefaultPriority: the priority takes a sixth
	// byte per VIP in the metadata's 512.
	MaxVIPsWithPriority = 84

	// MaxProblems bounds the problems a ConfigError lists: a file of
	// thousands of bad lines prints this many and a count of the rest,
	// not megabytes into the journal.
	MaxProblems = 50
)

// Modes of announcing a VIP (vip.mode).
const (
	ModeL2  = "l2"
	ModeBGP = "bgp"
)

// How many nodes announce a VIP (vip.announce).
const (
	AnnounceOwner = "owner"
	AnnounceAll   = "all"
)

// The lease's timer sets (cluster.failure_detection).
const (
	FailureDetectionFast = "fast"
	FailureDetectionLAN  = "lan"
)

// Config is a parsed, validated vipd configuration. Fields hold the values
// as written, with the defaults in brackets filled in; the typed values
// derived from them (addresses, durations) are filled in by Load and Parse
// and read with methods.
type Config struct {
	// NodeName is this node's unique name in the cluster. [hostname]
	NodeName string `toml:"node_name"`
	// StateDir holds the peer cache and the withdraw flag. [/var/lib/vipd]
	StateDir string `toml:"state_dir"`
	// LogLevel is debug, info, warn or error. [info]
	LogLevel string `toml:"log_level"`

	API     APIConfig     `toml:"api"`
	Cluster ClusterConfig `toml:"cluster"`
	// Connections: what vipd does for the clients of its VIPs at a
	// failover.
	Connections ConnectionsConfig `toml:"connections"`
	// L2 configures how the VIPs with mode "l2" are advertised on their
	// links.
	L2 L2Config `toml:"l2"`
	// BGP configures the embedded BGP speaker; required when a VIP has
	// mode = "bgp".
	BGP *BGPConfig `toml:"bgp"`
	// VIPs are the virtual addresses this cluster keeps reachable.
	VIPs []VIPConfig `toml:"vip"`
	// Kubernetes configures the watch of this host's Node object: a
	// cordoned, excluded (vipd.io/exclude), deleted or shutting-down Node
	// withdraws the node.
	Kubernetes KubernetesConfig `toml:"kubernetes"`
	// Hooks runs a command when this node takes, releases, loses or cannot
	// hold a VIP (keepalived's notify scripts).
	Hooks HooksConfig `toml:"hooks"`

	// Path is the file the configuration was read from.
	Path string `toml:"-"`

	keys *keyIndex // where each key was written
}

// APIConfig configures the local control API.
type APIConfig struct {
	// Socket is the unix socket vipctl talks to, created with mode 0660.
	// [/run/vipd/vipd.sock]
	Socket string `toml:"socket"`
	// SocketGroup owns the socket; members may read status, and run
	// withdraw/restore. [vipd if that group exists, else none: root only]
	SocketGroup string `toml:"socket_group"`
	// MetricsAddress serves Prometheus metrics on /metrics when set; it
	// must be a loopback address with a port. [off]
	MetricsAddress string `toml:"metrics_address"`
}

// ClusterConfig configures membership.
type ClusterConfig struct {
	// BindAddress is the address memberlist listens on and advertises.
	// Required.
	BindAddress string `toml:"bind_address"`
	// BindPort is the memberlist TCP and UDP port. [7946]
	BindPort int `toml:"bind_port"`
	// Peers are addresses ("ip", "ip:port", "[ipv6]:port", "host" or
	// "host:port", port defaulting to bind_port) joined at start, together
	// with the cached peers.
	Peers []string `toml:"peers"`
	// RejoinInterval is how often peers that are not alive members are
	// joined again. [30s]
	RejoinInterval string `toml:"rejoin_interval"`
	// FailureDetection sets the lease's timers (agent/lease): "fast" (an owner
	// heartbeats every 100 ms, releases its VIPs after 300 ms without a
	// majority's answer, and its peers take it for gone after 400 ms) or
	// "lan" (250 ms, 1.2 s, 1.6 s: for loaded hosts and lossy links). [fast]
	FailureDetection string `toml:"failure_detection"`
	// RequireQuorum makes a node that sees fewer than a majority of the
	// known members release its VIPs. [true with 3 or more known members]
	RequireQuorum *bool `toml:"require_quorum"`
	// KeyFile holds a base64 16, 24 or 32 byte key; when set, membership
	// traffic is encrypted and authenticated with AES-GCM: only hosts with
	// the key take part. Strongly recommended (vipd --check warns without
	// it). [off]
	KeyFile string `toml:"key_file"`
	// AllowedNetworks are the networks (CIDR, or a single address) whose
	// hosts may take part in membership: membership packets and
	// connections from elsewhere are dropped before they are read, and
	// members elsewhere are not admitted; a reload applies changes. [with
	// key_file: any address; without: this node's bind_address and the
	// configured peers' addresses]
	AllowedNetworks []string `toml:"allowed_networks"`
	// HandoffTimeout bounds the make-before-break handoff on SIGTERM and
	// on withdraw: the VIP is kept until a successor holds it or this
	// passes. [10s]
	HandoffTimeout string `toml:"handoff_timeout"`
	// RestartGrace is how long a restart (systemctl restart, a package
	// upgrade) may take without moving this node's VIPs: the stopping
	// process leaves them in place and tells its peers, who wait this
	// long for the new process before they claim as for a crash. "0s":
	// every stop hands off make-before-break. 0s or 2s-60s. [3s]
	RestartGrace string `toml:"restart_grace"`

	rejoinInterval time.Duration
	handoffTimeout time.Duration
	restartGrace   time.Duration
	bindAddr       netip.Addr
	peerAddrs      []string
	allowed        []netip.Prefix // parsed allowed_networks
}

// ConnectionsConfig is what vipd does for the TCP clients of its VIPs
// when a VIP moves (package conns, docs/design.md "Client connections at a
// failover"): every holder tells its peers, once a second, which
// connections it has on its VIPs; a node that takes a VIP over from a
// holder that was lost (crash, link down, partition) resets them, and a
// holder that hands a VIP over on purpose closes them once the new holder
// has it, so the clients reconnect at once instead of after their own
// timeout. An L2 IPv4 VIP's planned handoff is daisy-chained
// (agent/chain.go): the new holder forwards the old holder's connections
// to it while the old holder closes them, each between two requests.
type ConnectionsConfig struct {
	// Reset turns it on. [true]
	Reset *bool `toml:"reset"`
	// Ports are the VIPs' ports whose connections count (6443 for an
	// apiserver). [every port]
	Ports []int `toml:"ports"`
	// PokeRate is the most resets a new holder sends per second: each is
	// one small packet, answered by the client and by the holder's kernel.
	// 1 to 1000000. [10000]
	PokeRate int `toml:"poke_rate"`
	// PokeTimeout bounds one round of resets after a takeover: what is not
	// sent by then is not sent. At least 100ms. [5s]
	PokeTimeout string `toml:"poke_timeout"`
	// LingerMax bounds how long a node that handed an L2 VIP off on
	// purpose keeps serving the connections it had on it, forwarded by
	// the new holder, waiting for them to end by themselves (the
	// apiserver's GOAWAY with --goaway-chance, or the client closing);
	// then it closes what is left, each at an idle moment, within 5 s.
	// 0: close them at idle moments at once. At most 24h. [10m]
	LingerMax string `toml:"linger_max"`

	pokeTimeout time.Duration
	lingerMax   time.Duration
}

// Enabled reports whether reset is on.
func (c ConnectionsConfig) Enabled() bool { return c.Reset == nil || *c.Reset }

// PortList returns the ports as the conns package takes them.
func (c ConnectionsConfig) PortList() []uint16 {
	out := make([]uint16, 0, len(c.Ports))
	for _, p := range c.Ports {
		out = append(out, uint16(p))
	}
	return out
}

// PokeTimeoutDuration returns the parsed poke_timeout.
func (c ConnectionsConfig) PokeTimeoutDuration() time.Duration { return c.pokeTimeout }

// LingerMaxDuration returns the parsed linger_max.
func (c ConnectionsConfig) LingerMaxDuration() time.Duration { return c.lingerMax }

// KubernetesConfig configures the watch of this host's own Node object
// (nodewatch): a Node that is cordoned, labelled vipd.io/exclude, being
// deleted, deleted, shutting down or out of service withdraws this node,
// and nothing but the Node makes it eligible again. An apiserver that cannot be
// read changes nothing.
type KubernetesConfig struct {
	// Enabled turns the watch on. Off by default: the packaged unit runs
	// vipd as user vipd, which cannot read the kubelet's credentials, so a
	// watch on by default would fail on every host until the operator chose
	// how vipd reads its Node (docs/install.md). `vipctl status` says how
	// to turn it on. [false]
	Enabled *bool `toml:"enabled"`
	// Kubeconfig is the kubeconfig whose credentials read the Node: the
	// kubelet's own, allowed by the Node authorizer to read its Node only.
	// [the first found of /etc/kubernetes/kubelet.conf (kubeadm),
	// /var/lib/rancher/rke2/agent/kubelet.kubeconfig (RKE2),
	// /var/lib/rancher/k3s/agent/kubelet.kubeconfig (k3s),
	// /etc/kubernetes/kubeconfig-kubelet (Talos)]
	Kubeconfig string `toml:"kubeconfig"`
	// NodeName is the Node to watch. [the name in the client
	// certificate, system:node:NAME; else node_name]
	NodeName string `toml:"node_name"`
	// Server replaces the kubeconfig's apiserver URL (https://HOST:PORT).
	// [the kubeconfig's]
	Server string `toml:"server"`
	// TLSServerName is the name the apiserver's certificate is checked
	// against ("kubernetes" for https://127.0.0.1:6443 on kubeadm). [the
	// kubeconfig's, else the server's host]
	TLSServerName string `toml:"tls_server_name"`
	// FollowExclusionLabel: a Node labelled
	// node.kubernetes.io/exclude-from-external-load-balancers withdraws
	// this node too. kubeadm's mark-control-plane phase and Talos put that
	// label on every control-plane node, so there it would withdraw every
	// node at once; set it only where the label marks the odd node out
	// (RKE2, k3s, or a control plane that schedules workloads). [false]
	FollowExclusionLabel bool `toml:"follow_exclusion_label"`

	watch nodewatch.Config
}

// HooksConfig is the command run when a VIP's state on this node changes
// (agent/hooks.go; keepalived's notify_master, notify_backup and
// notify_fault in one). The states are master (this node holds the VIP),
// backup (it does not, and could) and fault (it cannot: its interface is
// down, its health check fails, an announce failed, or it is fenced); the
// first change after a start is from init. Hooks never hold up a
// failover: the loop hands each change to the VIP's runner and goes on.
// One VIP's hooks run one at a time, in order: a change while its hook runs
// waits for that hook, and changes that wait are folded into one, from the
// state the last hook was told to the newest (none runs when those are the
// same), so at most one hook runs and one waits per VIP.
type HooksConfig struct {
	// Command is run (argv, no shell, working directory /) at every
	// change, with an environment of PATH and VIPD_VIP, VIPD_ADDRESS,
	// VIPD_NODE, VIPD_OLD_STATE, VIPD_NEW_STATE and VIPD_REASON; its exit
	// status is logged, counted and published as a hook event. It keeps
	// none of vipd's capabilities but the ones listed in capabilities.
	// [none: no hooks]
	Command []string `toml:"command"`
	// Timeout bounds one run: then the command's process group gets
	// SIGTERM, and SIGKILL a second later. Whatever the command left
	// running in its process group is killed when it exits. At least
	// 100ms. [10s]
	Timeout string `toml:"timeout"`
	// User runs the command as this user (a name or a numeric uid), with
	// its primary group and no supplementary group; that needs vipd to run
	// as root (the packaged unit runs vipd, and so its hooks, as user vipd,
	// which cannot switch users). [vipd's own user]
	User string `toml:"user"`
	// Capabilities are the capabilities of vipd's own that the command
	// keeps ("CAP_NET_ADMIN" for a hook that changes routes); never
	// CAP_DAC_READ_SEARCH or CAP_DAC_OVERRIDE. A command run as root
	// without user has every capability whatever this says. [none]
	Capabilities []string `toml:"capabilities"`

	timeout  time.Duration
	caps     []uint
	uid, gid int // -1 without user
}

// On reports whether a hook command is configured.
func (h HooksConfig) On() bool { return len(h.Command) > 0 }

// TimeoutDuration returns the parsed timeout.
func (h HooksConfig) TimeoutDuration() time.Duration { return h.timeout }

// Credential returns the uid and gid of user (ok false without user).
func (h HooksConfig) Credential() (uid, gid uint32, ok bool) {
	if h.User == "" || h.uid < 0 {
		return 0, 0, false
	}
	return uint32(h.uid), uint32(h.gid), true
}

// CapabilityNumbers returns the parsed capabilities.
func (h HooksConfig) CapabilityNumbers() []uint { return slices.Clone(h.caps) }

// VIPConfig is one virtual IP.
type VIPConfig struct {
	// Name identifies the VIP in status, logs and metrics. Required, unique.
	Name string `toml:"name"`
	// Address is the IPv4 or IPv6 address. Required.
	Address string `toml:"address"`
	// Mode is "l2" or "bgp". [l2]
	Mode string `toml:"mode"`
	// Interface carries the address: the LAN interface for l2 (required),
	// the interface the address is bound to for bgp. [lo for bgp]
	Interface string `toml:"interface"`
	// Announce is "owner" (one node announces) or "all" (every eligible
	// node announces: ECMP anycast; bgp only). [owner]
	Announce string `toml:"announce"`
	// Preempt lets a node that becomes eligible again take the VIP back
	// from a healthy owner: the VIP goes to the first eligible node by
	// priority, then rank. [false]
	Preempt bool `toml:"preempt"`
	// Priority is this node's preference for holding the VIP, 1-255, as
	// keepalived's priority: among the eligible nodes the highest
	// priority wins, and equal priorities go by rank. Each node writes
	// its own and publishes it to the others in its metadata, so the
	// nodes cannot disagree on it. It takes effect only while every
	// member runs a release that knows priorities (docs/design.md,
	// "Priorities and groups"). A written 0 is refused. [100:
	// DefaultPriority]
	Priority int `toml:"priority"`
	// PreemptDelay is how long this node, once it can carry the VIP
	// (healthy, not withdrawn, not fenced), waits before it may take the
	// VIP from a holder that ranks below it (keepalived's
	// preempt_delay); it claims a VIP nobody holds at once. Needs
	// preempt = true; at most MaxPreemptDelay. [0s]
	PreemptDelay string `toml:"preempt_delay"`
	// Group names a set of VIPs elected as one (a dual-stack pair: an
	// IPv4 and an IPv6 address of the same service): one owner for all
	// of them, and a node that cannot carry one of them (unhealthy,
	// interface down) is not eligible for any. VIPs of a group must
	// agree on mode "l2" or announce "owner", preempt, preempt_delay and
	// priority. [none: the VIP is elected alone]
	Group string `toml:"group"`
	// Health gates ownership on a local check. [none: always healthy]
	Health *HealthConfig `toml:"health"`
	// MED is the MULTI_EXIT_DISC of this VIP's route to every BGP peer,
	// replacing the peer's med; bgp only. [the peer's]
	MED *uint32 `toml:"med"`
	// LocalPref is the LOCAL_PREF of this VIP's route to the iBGP peers,
	// replacing the peer's local_pref; bgp only, and needs an iBGP peer.
	// [the peer's]
	LocalPref *uint32 `toml:"local_pref"`

	addr         netip.Addr
	preemptDelay time.Duration
	// refresh is l2.refresh_interval for mode "l2" (0 for "bgp"), what
	// L2 gives the announcer.
	refresh time.Duration
}

// HealthConfig is a VIP's local health check: either an HTTP(S) URL or a
// command.
type HealthConfig struct {
	// URL is fetched with GET; a 2xx answer is healthy.
	URL string `toml:"url"`
	// Command is run (argv, no shell); exit status 0 is healthy.
	Command []string `toml:"command"`
	// Interval between checks: with fall 3 an apiserver that stops
	// answering loses the VIP within about a second. Checks fall on the
	// lease's 100ms beat, so a multiple of 100ms costs the fewest
	// wake-ups. At least 100ms. [300ms]
	Interval string `toml:"interval"`
	// Timeout of one check. At least 10ms. [500ms]
	Timeout string `toml:"timeout"`
	// Rise is how many successes in a row make a node healthy, at least
	// 1 (a written 0 is refused, not taken for the default). [2]
	Rise int `toml:"rise"`
	// Fall is how many failures in a row make a node unhealthy, at least
	// 1. [3]
	Fall int `toml:"fall"`
	// CAFile verifies an https URL's server certificate. [system roots]
	CAFile string `toml:"ca_file"`
	// InsecureSkipVerify skips server certificate checks. [false]
	InsecureSkipVerify bool `toml:"insecure_skip_verify"`
	// TLSServerName is the name an https URL's certificate is verified
	// against instead of the URL's host: "kubernetes" for a kubeadm or
	// RKE2 apiserver checked at https://127.0.0.1:6443 (its certificate
	// has no 127.0.0.1 SAN on some installs). [the URL's host]
	TLSServerName string `toml:"tls_server_name"`

	interval, timeout time.Duration
}

// BGPConfig configures the embedded BGP speaker.
type BGPConfig struct {
	// ASN is this node's AS number. Required, not 0.
	ASN uint32 `toml:"asn"`
	// RouterID is an IPv4 address. [cluster.bind_address when IPv4]
	RouterID string `toml:"router_id"`
	// ListenPort accepts sessions on this port; -1 does not listen and
	// only initiates. [-1]
	ListenPort *int `toml:"listen_port"`
	// GracefulShutdown is how long a VIP is announced with the
	// GRACEFUL_SHUTDOWN community (RFC 8326) before it is withdrawn on a
	// planned drain. [5s]
	GracefulShutdown string `toml:"graceful_shutdown"`
	// GracefulRestartTime turns on BGP graceful restart (RFC 4724): the
	// routers keep this node's routes this long after its session ends
	// without a NOTIFICATION, so a restart in place (cluster.restart_grace)
	// keeps the route; needed for that in BGP mode. A crash leaves the
	// route stale until the next start or this long (vipd cleanup makes
	// the routers drop it at once). Whole seconds, at most 4095s; "0s"
	// turns it off. [0s: off]
	GracefulRestartTime string `toml:"graceful_restart_time"`
	// LongLivedStaleTime keeps the routes, least preferred, this much
	// longer (RFC 9494) on routers that support it; needs
	// graceful_restart_time. [0s: off]
	LongLivedStaleTime string `toml:"long_lived_stale_time"`
	// Peers are the routers.
	Peers []BGPPeerConfig `toml:"peer"`

	gracefulShutdown time.Duration
	// speaker is the section as typed values, without the VIPs
	// (Config.Speaker adds them).
	speaker BGPSpeaker
}

// BGPPeerConfig is one router.
type BGPPeerConfig struct {
	// Address of the router. Required.
	Address string `toml:"address"`
	// ASN of the router. Required, not 0.
	ASN uint32 `toml:"asn"`
	// PasswordFile holds the TCP MD5 password; it must not be readable by
	// group or others. [none]
	PasswordFile string `toml:"password_file"`
	// HoldTime, at least 3s, whole seconds. [90s: bgp.DefaultHoldTime]
	HoldTime string `toml:"hold_time"`
	// Keepalive interval, whole seconds, shorter than hold_time.
	// [hold_time / 3, rounded down to whole seconds]
	Keepalive string `toml:"keepalive"`
	// Communities ("asn:value") added to every announcement. [none]
	Communities []string `toml:"communities"`
	// MaxPrefixes is how many prefixes the router may send before vipd
	// closes the session (it uses none of them; the limit bounds the
	// memory a router sending a full table can take), 1-1000000. [100:
	// bgp.DefaultMaxPrefixes]
	MaxPrefixes *int `toml:"max_prefixes"`
	// BFD runs a BFD session (RFC 5880/5881) with the router: when it
	// fails, the BGP session is closed at once instead of after hold_time.
	// [false]
	BFD bool `toml:"bfd"`
	// BFDMinInterval is BFD's desired minimum TX and required minimum RX
	// interval, whole milliseconds, at least 50ms. [300ms:
	// bgp.DefaultBFDMinInterval]
	BFDMinInterval string `toml:"bfd_min_interval"`
	// BFDMultiplier is BFD's detect multiplier, 1-255. [3:
	// bgp.DefaultBFDMultiplier]
	BFDMultiplier *int `toml:"bfd_multiplier"`

	// LocalAddress is this node's source address for the session, such
	// as a loopback address the router peers with; it is also the next
	// hop of the routes, so the router needs a route to it. [chosen by
	// the kernel by route]
	LocalAddress string `toml:"local_address"`
	// EBGPMultihop lets an eBGP router be up to this many routed hops
	// away (the TTL vipd sends), 1-255; not on an iBGP peer, not with
	// ttl_security_hops. [1: directly connected]
	EBGPMultihop *int `toml:"ebgp_multihop"`
	// TTLSecurityHops turns on GTSM (RFC 5082): vipd sends TTL 255 and
	// its kernel drops packets of the session from more than this many
	// hops away, 1-254 (1: directly connected). The router must send TTL
	// 255 too. [off]
	TTLSecurityHops *int `toml:"ttl_security_hops"`
	// MED is the MULTI_EXIT_DISC sent with every route to this router
	// (lower is preferred), 0-4294967295; a VIP's med replaces it.
	// [none]
	MED *uint32 `toml:"med"`
	// LocalPref is the LOCAL_PREF sent with every route to this router
	// (higher is preferred), 1-4294967295; iBGP peers only (asn equal to
	// bgp.asn): LOCAL_PREF is never sent to another AS. A VIP's
	// local_pref replaces it. [none: the router sees 100]
	LocalPref *uint32 `toml:"local_pref"`
}

// Problem is one configuration error, placed at the line and column of the
// key it is about (0 when it is about the file as a whole).
type Problem struct {
	// Path is the file.
	Path string
	// Line and Col place the key, from 1 (0: the file as a whole).
	Line, Col int
	// Msg says what is wrong.
	Msg string
}

// Error gives the problem on one line: control characters in the message
// (the TOML library quotes the rune it stopped at raw, a newline included)
// are written as Go escapes, so each line of a ConfigError is one problem
// that starts with the file name.
func (p Problem) Error() string {
	msg := oneLine(p.Msg)
	if p.Line == 0 {
		return fmt.Sprintf("%s: %s", p.Path, msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", p.Path, p.Line, p.Col, msg)
}

// oneLine escapes the control characters of s (\n, \t, \x00 ...).
func oneLine(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ConfigError lists every problem found in a configuration file.
type ConfigError struct {
	// Problems are sorted by line and column.
	Problems []Problem
}

// Error gives every problem on a line of its own, in file order.
func (e *ConfigError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// BackendRules are the backends' own rules for what they take from the
// configuration, which Parse places at the keys they are about, so that a
// file vipd --check accepts is one the backends start with. The
// configuration imports no backend: cmd/vipd brings their rules
// (backendconfig.Rules). A nil rule is not checked: Load and Parse check
// only what is the configuration's own.
type BackendRules struct {
	// L2RefreshInterval reports what is wrong with l2.refresh_interval
	// (not 0: off) as the l2 announcers take it, or nil.
	L2RefreshInterval func(d time.Duration) error
	// BGP reports every problem the BGP speaker finds in s: the [bgp]
	// section, with the addresses of the VIPs with mode "bgp".
	BGP func(s BGPSpeaker) []FieldError
}

// Load reads and validates the configuration at path with the
// configuration's own rules, not the backends' (BackendRules.Load).
func Load(path string) (*Config, error) { return BackendRules{}.Load(path) }

// Parse validates a configuration read from path with the configuration's
// own rules, not the backends' (BackendRules.Parse).
func Parse(path string, data []byte) (*Config, error) { return BackendRules{}.Parse(path, data) }

// Load reads and validates the configuration at path, with the backends'
// rules r: what the daemon (at start and on SIGHUP) and vipd --check do.
func (r BackendRules) Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, syscall.EISDIR) {
		return nil, fmt.Errorf("read config: %s is a directory: --config takes the configuration file (such as %s)", path, DefaultConfigPath)
	}
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return r.Parse(path, data)
}

// Parse validates a configuration read from path, with the backends' rules
// r. On failure the error is a *ConfigError listing every problem with its
// position.
//
// Three steps, so that no message depends on the TOML library's wording: the
// file is decoded generically (syntax errors come with the library's own
// position, toml.ParseError), the values are checked against the types of
// Config's fields (type errors are vipd's, placed at the key), and only
// then decoded into Config, whose unknown keys MetaData reports.
func (r BackendRules) Parse(path string, data []byte) (*Config, error) {
	v := &validator{path: path, keys: indexKeys(data), rules: r}
	if p, ok := encodingProblem(data); ok {
		p.Path = path
		v.problems = append(v.problems, p)
		return nil, v.err()
	}
	var generic map[string]any
	if _, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&generic); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			v.problems = append(v.problems, v.syntaxProblem(data, pe))
		} else {
			v.problems = append(v.problems, Problem{Path: path, Msg: err.Error()})
		}
		return nil, v.err()
	}
	v.generic = generic
	v.checkTypes(generic, reflect.TypeOf(Config{}), "")
	if err := v.err(); err != nil {
		return nil, err
	}
	var c Config
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&c)
	if err != nil {
		// The types were checked above; what is left (a value out of range
		// for its field) is reported as the library says it.
		v.problems = append(v.problems, Problem{Path: path, Msg: err.Error()})
		return nil, v.err()
	}
	for _, k := range md.Undecoded() {
		v.unknownKey(k)
	}
	c.Path = path
	c.keys = v.keys
	c.applyDefaults(v.written)
	v.check(&c)
	if err := v.err(); err != nil {
		return nil, err
	}
	return &c, nil
}

// applyDefaults fills in every key left out with its default, as written
// in the file (durations as strings), before the values are checked.
// written reports whether the key at path ("vip[0].health.rise") is in
// the file: a 0 written there is refused, not taken for the default.
func (c *Config) applyDefaults(written func(path string) bool) {
	setString := func(p *string, def string) {
		if *p == "" {
			*p = def
		}
	}
	if c.NodeName == "" {
		c.NodeName, _ = os.Hostname()
	}
	setString(&c.StateDir, DefaultStateDir)
	setString(&c.LogLevel, DefaultLogLevel)
	setString(&c.API.Socket, DefaultSocket)
	cl := &c.Cluster
	if cl.BindPort == 0 {
		cl.BindPort = DefaultBindPort
	}
	setString(&cl.RejoinInterval, DefaultRejoinInterval.String())
	setString(&cl.FailureDetection, DefaultFailureDetection)
	setString(&cl.HandoffTimeout, DefaultHandoffTimeout.String())
	cc := &c.Connections
	if cc.Reset == nil {
		on := true
		cc.Reset = &on
	}
	if cc.PokeRate == 0 && !written("connections.poke_rate") {
		cc.PokeRate = DefaultPokeRate
	}
	setString(&cc.PokeTimeout, DefaultPokeTimeout.String())
	setString(&cc.LingerMax, DefaultLingerMax.String())
	setString(&cl.RestartGrace, DefaultRestartGrace.String())
	setString(&c.L2.RefreshInterval, DefaultL2RefreshInterval.String())
	setString(&c.Hooks.Timeout, DefaultHookTimeout.String())
	for i := range c.VIPs {
		vip := &c.VIPs[i]
		hp := fmt.Sprintf("vip[%d].health.", i)
		setString(&vip.Mode, ModeL2)
		setString(&vip.Announce, AnnounceOwner)
		if vip.Priority == 0 && !written(fmt.Sprintf("vip[%d].priority", i)) {
			vip.Priority = DefaultPriority
		}
		if vip.Mode == ModeBGP {
			setString(&vip.Interface, "lo")
		}
		if h := vip.Health; h != nil {
			setString(&h.Interval, DefaultHealthInterval.String())
			setString(&h.Timeout, DefaultHealthTimeout.String())
			if h.Rise == 0 && !written(hp+"rise") {
				h.Rise = DefaultHealthRise
			}
			if h.Fall == 0 && !written(hp+"fall") {
				h.Fall = DefaultHealthFall
			}
		}
	}
	if b := c.BGP; b != nil {
		setString(&b.GracefulShutdown, DefaultGracefulShutdown.String())
		if b.ListenPort == nil {
			lp := DefaultBGPListenPort
			b.ListenPort = &lp
		}
	}
}

// Problem places a problem about the key at path ("api.socket_group",
// "vip[0].interface"; its closest enclosing table when it is not written)
// in the file c was read from, as Parse places its own.
func (c *Config) Problem(path, format string, args ...any) Problem {
	v := &validator{path: c.Path, keys: c.keys}
	if v.keys == nil {
		v.keys = indexKeys(nil)
	}
	v.at(path, format, args...)
	return v.problems[0]
}

// Level returns log_level as a slog level.
func (c *Config) Level() slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(c.LogLevel)) // validated by Parse
	return l
}

// KeepRestartSettings sets the settings of c that take effect only when
// vipd restarts (node_name, state_dir, [api], cluster.bind_address,
// bind_port, failure_detection, the key_file path and
// l2.refresh_interval) to old's, and
// reports whether any of them differed: what a reload keeps.
func (c *Config) KeepRestartSettings(old *Config) (changed bool) {
	cl, ocl := &c.Cluster, &old.Cluster
	changed = c.NodeName != old.NodeName || c.StateDir != old.StateDir || c.API != old.API ||
		cl.BindAddress != ocl.BindAddress || cl.BindPort != ocl.BindPort ||
		cl.FailureDetection != ocl.FailureDetection || cl.KeyFile != ocl.KeyFile
	if changed {
		c.NodeName, c.StateDir, c.API = old.NodeName, old.StateDir, old.API
		cl.BindAddress, cl.BindPort, cl.bindAddr = ocl.BindAddress, ocl.BindPort, ocl.bindAddr
		cl.FailureDetection, cl.KeyFile = ocl.FailureDetection, ocl.KeyFile
	}
	if c.L2.refreshInterval != old.L2.refreshInterval {
		changed = true
		c.L2 = old.L2
		c.L2.setVIPs(c.VIPs)
	}
	return changed
}

// Speaker returns what the embedded BGP speaker is built from: the [bgp]
// section with its peers, and the addresses and path attributes of the
// VIPs with mode "bgp" (BackendRules.BGP accepts it). It is the zero
// BGPSpeaker without a [bgp] section.
func (c *Config) Speaker() BGPSpeaker {
	if c.BGP == nil {
		return BGPSpeaker{}
	}
	sc := c.BGP.speaker
	sc.Peers = slices.Clone(sc.Peers)
	for i := range sc.Peers {
		sc.Peers[i].Communities = slices.Clone(sc.Peers[i].Communities)
	}
	for _, v := range c.VIPs {
		if v.Mode == ModeBGP {
			sc.VIPs = append(sc.VIPs, v.addr)
		}
	}
	sc.VIPAttrs = vipAttrs(c.VIPs)
	return sc
}

// On reports whether the Node watch runs: enabled = true is written.
func (k KubernetesConfig) On() bool { return k.Enabled != nil && *k.Enabled }

// Explicit reports whether enabled = true is written: a kubeconfig that
// cannot be found is then worth a warning.
func (k KubernetesConfig) Explicit() bool { return k.Enabled != nil && *k.Enabled }

// Watch returns the section as the Node watch takes it (nodewatch.Config,
// checked with its Validate; Logger, UserAgent and the timers are left for
// the caller), with node_name as the fallback Node name.
func (k KubernetesConfig) Watch() nodewatch.Config {
	w := k.watch
	w.Kubeconfigs = slices.Clone(w.Kubeconfigs)
	return w
}

// Equal reports whether two sections configure the same watch (a reload
// restarts the watch when they do not).
func (k KubernetesConfig) Equal(o KubernetesConfig) bool {
	return k.On() == o.On() && k.Explicit() == o.Explicit() && k.Kubeconfig == o.Kubeconfig && k.NodeName == o.NodeName &&
		k.Server == o.Server && k.TLSServerName == o.TLSServerName && k.FollowExclusionLabel == o.FollowExclusionLabel &&
		k.watch.FallbackNodeName == o.watch.FallbackNodeName
}

// Addr returns the VIP's parsed address.
func (v VIPConfig) Addr() netip.Addr { return v.addr }

// PreemptDelayDuration returns the parsed preempt_delay.
func (v VIPConfig) PreemptDelayDuration() time.Duration { return v.preemptDelay }

// IntervalDuration returns the parsed interval between checks.
func (h HealthConfig) IntervalDuration() time.Duration { return h.interval }

// TimeoutDuration returns the parsed timeout of one check.
func (h HealthConfig) TimeoutDuration() time.Duration { return h.timeout }

// BindAddr returns the parsed bind address.
func (c ClusterConfig) BindAddr() netip.Addr { return c.bindAddr }

// PeerAddrs returns the configured peers as host:port.
func (c ClusterConfig) PeerAddrs() []string { return c.peerAddrs }

// AllowedPrefixes returns the parsed allowed_networks (nil when unset).
func (c ClusterConfig) AllowedPrefixes() []netip.Prefix { return c.allowed }

// RejoinIntervalDuration returns the parsed rejoin interval.
func (c ClusterConfig) RejoinIntervalDuration() time.Duration { return c.rejoinInterval }

// HandoffTimeoutDuration returns the parsed handoff timeout.
func (c ClusterConfig) HandoffTimeoutDuration() time.Duration { return c.handoffTimeout }

// RestartGraceDuration returns the parsed restart grace (0: restarts hand
// off).
func (c ClusterConfig) RestartGraceDuration() time.Duration { return c.restartGrace }

// GracefulShutdownDuration returns the parsed graceful_shutdown (0: off).
func (b BGPConfig) GracefulShutdownDuration() time.Duration { return b.gracefulShutdown }

// Keys lists every key of the configuration file as a dotted path
// ("cluster.peers", "vip.health.url", "bgp.peer.asn"), in the order Config
// declares them: what vipd.toml.example and docs/configuration.md document.
func Keys() []string {
	var keys func(t reflect.Type, prefix string) []string
	keys = func(t reflect.Type, prefix string) []string {
		var out []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				out = append(out, keys(ft, prefix+tag+".")...)
				continue
			}
			out = append(out, prefix+tag)
		}
		return out
	}
	return keys(reflect.TypeOf(Config{}), "")
}
