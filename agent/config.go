package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/user"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"
	"github.com/hashicorp/memberlist"

	"github.com/vipd/vipd/agent/apipb"
)

// Defaults. DefaultConfig is the one place they are applied; the field
// comments below repeat them in brackets.
const (
	DefaultConfigPath       = "/etc/vipd/vipd.toml"
	DefaultStateDir         = "/var/lib/vipd"
	DefaultSocket           = apipb.DefaultSocket
	DefaultBindPort         = 7946
	DefaultRejoinInterval   = 30 * time.Second
	DefaultHandoffTimeout   = 10 * time.Second
	DefaultHealthInterval   = 300 * time.Millisecond
	DefaultHealthTimeout    = 500 * time.Millisecond
	DefaultHealthRise       = 2
	DefaultHealthFall       = 3
	DefaultGracefulShutdown = 5 * time.Second
	DefaultBGPHoldTime      = 90 * time.Second
	DefaultBGPListenPort    = -1

	// MaxVIPs bounds the number of VIPs: every node's per-VIP state travels
	// in its memberlist metadata, which memberlist caps at 512 bytes.
	MaxVIPs = 100
)

// Modes of announcing a VIP.
const (
	ModeL2  = "l2"
	ModeBGP = "bgp"
)

// Config is a parsed, validated vipd configuration. Fields hold the values
// as written; the typed values derived from them (addresses, durations) are
// filled in by Load and Parse.
type Config struct {
	// NodeName is this node's unique name in the cluster. [hostname]
	NodeName string `toml:"node_name"`
	// StateDir holds the peer cache and the withdraw flag. [/var/lib/vipd]
	StateDir string `toml:"state_dir"`
	// LogLevel is debug, info, warn or error. [info]
	LogLevel string `toml:"log_level"`

	API     APIConfig     `toml:"api"`
	Cluster ClusterConfig `toml:"cluster"`
	// BGP configures the embedded BGP speaker; required when a VIP has
	// mode = "bgp".
	BGP *BGPConfig `toml:"bgp"`
	// VIPs are the virtual addresses this cluster keeps reachable.
	VIPs []VIPConfig `toml:"vip"`

	// Path is the file the configuration was read from.
	Path string `toml:"-"`
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
	// Peers are addresses ("ip" or "ip:port", port defaulting to
	// bind_port) joined at start, together with the cached peers.
	Peers []string `toml:"peers"`
	// RejoinInterval is how often peers that are not alive members are
	// joined again. [30s]
	RejoinInterval string `toml:"rejoin_interval"`
	// FailureDetection sets the lease's timers (lease.go): "fast" (an owner
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

	rejoinInterval time.Duration
	handoffTimeout time.Duration
	bindAddr       netip.Addr
	peerAddrs      []string
	allowed        []netip.Prefix // parsed allowed_networks
	// tuneMemberlist, when set, changes memberlist's configuration last
	// (tests that turn gossip and probes off).
	tuneMemberlist func(*memberlist.Config)
}

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
	// from a healthy owner. [false]
	Preempt bool `toml:"preempt"`
	// Health gates ownership on a local check. [none: always healthy]
	Health *HealthConfig `toml:"health"`

	addr netip.Addr
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
	// Rise is how many successes in a row make a node healthy. [2]
	Rise int `toml:"rise"`
	// Fall is how many failures in a row make a node unhealthy. [3]
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
	// Peers are the routers.
	Peers []BGPPeerConfig `toml:"peer"`

	routerID         netip.Addr
	gracefulShutdown time.Duration
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
	// HoldTime, at least 3s. [90s]
	HoldTime string `toml:"hold_time"`
	// Keepalive interval. [hold_time / 3]
	Keepalive string `toml:"keepalive"`
	// Communities ("asn:value") added to every announcement. [none]
	Communities []string `toml:"communities"`
	// MaxPrefixes is how many prefixes the router may send before vipd
	// closes the session (it uses none of them; the limit bounds the
	// memory a router sending a full table can take), 1-1000000. [100]
	MaxPrefixes *int `toml:"max_prefixes"`
	// BFD runs a BFD session (RFC 5880/5881) with the router: when it
	// fails, the BGP session is closed at once instead of after hold_time.
	// [false]
	BFD bool `toml:"bfd"`
	// BFDMinInterval is BFD's desired minimum TX and required minimum RX
	// interval, at least 50ms. [300ms]
	BFDMinInterval string `toml:"bfd_min_interval"`
	// BFDMultiplier is BFD's detect multiplier, 1-255. [3]
	BFDMultiplier *int `toml:"bfd_multiplier"`

	addr                netip.Addr
	holdTime, keepalive time.Duration
	password            string
	bfdMinInterval      time.Duration
	bfdMultiplier       uint8
	maxPrefixes         uint32
}

// Problem is one configuration error, placed at the line and column of the
// key it is about (0 when it is about the file as a whole).
type Problem struct {
	Path      string
	Line, Col int
	Msg       string
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
	Problems []Problem
}

func (e *ConfigError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Load reads and validates the configuration at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data)
}

// Parse validates a configuration read from path. On failure the error is a
// *ConfigError listing every problem with its position.
//
// Three steps, so that no message depends on the TOML library's wording: the
// file is decoded generically (syntax errors come with the library's own
// position, toml.ParseError), the values are checked against the types of
// Config's fields (type errors are vipd's, placed at the key), and only
// then decoded into Config, whose unknown keys MetaData reports.
func Parse(path string, data []byte) (*Config, error) {
	v := &validator{path: path, keys: indexKeys(data)}
	var generic map[string]any
	if _, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&generic); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			v.problems = append(v.problems, Problem{path, pe.Position.Line, pe.Position.Col, pe.Message})
		} else {
			v.problems = append(v.problems, Problem{Path: path, Msg: err.Error()})
		}
		return nil, v.err()
	}
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
	c.applyDefaults()
	v.check(&c)
	if err := v.err(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) applyDefaults() {
	if c.NodeName == "" {
		c.NodeName, _ = os.Hostname()
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.API.Socket == "" {
		c.API.Socket = DefaultSocket
	}
	if c.Cluster.BindPort == 0 {
		c.Cluster.BindPort = DefaultBindPort
	}
	if c.Cluster.FailureDetection == "" {
		c.Cluster.FailureDetection = "fast"
	}
	for i := range c.VIPs {
		vip := &c.VIPs[i]
		if vip.Mode == "" {
			vip.Mode = ModeL2
		}
		if vip.Announce == "" {
			vip.Announce = "owner"
		}
		if vip.Mode == ModeBGP && vip.Interface == "" {
			vip.Interface = "lo"
		}
		if h := vip.Health; h != nil {
			if h.Rise == 0 {
				h.Rise = DefaultHealthRise
			}
			if h.Fall == 0 {
				h.Fall = DefaultHealthFall
			}
		}
	}
}

type validator struct {
	path     string
	keys     *keyIndex
	problems []Problem
}

func (v *validator) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	sort.SliceStable(v.problems, func(i, j int) bool {
		a, b := v.problems[i], v.problems[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return &ConfigError{Problems: v.problems}
}

// at records a problem about the key at path ("vip[0].address").
func (v *validator) at(path, format string, args ...any) {
	p, _ := v.keys.lookup(path)
	v.problems = append(v.problems, Problem{v.path, p.Line, p.Col, fmt.Sprintf(format, args...)})
}

func (v *validator) unknownKey(k toml.Key) {
	plain := strings.Join(k, ".")
	places := v.keys.plain[plain]
	if len(places) == 0 {
		v.at("", "unknown key %q", plain)
		return
	}
	for _, path := range places {
		v.at(path, "unknown key %q", plain)
	}
}

// checkTypes checks the generically decoded table data against the fields
// of struct type t (by their toml tags), recursing into tables and arrays.
// Keys with no field are left to MetaData.Undecoded.
func (v *validator) checkTypes(data map[string]any, t reflect.Type, prefix string) {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("toml"), ","); tag != "" && tag != "-" {
			fields[tag] = f.Type
		}
	}
	for _, key := range slices.Sorted(maps.Keys(data)) {
		ft, ok := fields[key]
		if !ok {
			continue
		}
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		v.checkValue(data[key], ft, path)
	}
}

// checkValue checks one value against the field type ft.
func (v *validator) checkValue(val any, ft reflect.Type, path string) {
	for ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	bad := func(want string) {
		v.at(path, "%s: must be %s, got %s", stripIndexes(path), want, tomlKind(val))
	}
	switch ft.Kind() {
	case reflect.String:
		if _, ok := val.(string); !ok {
			bad("a string")
		}
	case reflect.Bool:
		if _, ok := val.(bool); !ok {
			bad("true or false")
		}
	case reflect.Int, reflect.Int64, reflect.Uint32:
		n, ok := val.(int64)
		switch {
		case !ok:
			bad("an integer")
		case ft.Kind() == reflect.Uint32 && (n < 0 || n > math.MaxUint32):
			v.at(path, "%s: %d is out of range (0 to %d)", stripIndexes(path), n, uint32(math.MaxUint32))
		}
	case reflect.Slice:
		var items []any
		switch a := val.(type) {
		case []any:
			items = a
		case []map[string]any:
			for _, m := range a {
				items = append(items, m)
			}
		default:
			if ft.Elem().Kind() == reflect.Struct {
				bad("an array of tables ([[" + stripIndexes(path) + "]])")
			} else {
				bad("an array")
			}
			return
		}
		for i, it := range items {
			v.checkValue(it, ft.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Struct:
		m, ok := val.(map[string]any)
		if !ok {
			bad("a table")
			return
		}
		v.checkTypes(m, ft, path)
	}
}

// tomlKind names a generically decoded TOML value, with the value when short.
func tomlKind(val any) string {
	switch x := val.(type) {
	case string:
		return fmt.Sprintf("a string (%q)", truncate(x, 40))
	case int64:
		return fmt.Sprintf("an integer (%d)", x)
	case float64:
		return fmt.Sprintf("a float (%v)", x)
	case bool:
		return fmt.Sprintf("a boolean (%v)", x)
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", val)
}

// durationAtLeast is duration with a lower bound: intervals that are too
// short would burn CPU or flap.
func (v *validator) durationAtLeast(path, s string, def, least time.Duration) time.Duration {
	d := v.duration(path, s, def)
	if d < least {
		v.at(path, "%s must be at least %s, got %q", path[strings.LastIndex(path, ".")+1:], least, s)
		return def
	}
	return d
}

// duration parses a duration value; empty gives def.
func (v *validator) duration(path, s string, def time.Duration) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		v.at(path, "invalid duration %q (use a Go duration such as \"500ms\", \"30s\")", s)
		return def
	}
	if d <= 0 {
		v.at(path, "duration must be positive, got %q", s)
		return def
	}
	return d
}

func (v *validator) check(c *Config) {
	if c.NodeName == "" {
		v.at("node_name", "node_name is empty and the hostname is unknown")
	} else if !ValidNodeName(c.NodeName) {
		v.at("node_name", "node_name %q: use letters, digits, '-', '_' and '.' (at most 253, starting with a letter or digit)", c.NodeName)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		v.at("log_level", "log_level must be debug, info, warn or error, got %q", c.LogLevel)
	}
	if !strings.HasPrefix(c.StateDir, "/") {
		v.at("state_dir", "state_dir must be an absolute path, got %q", c.StateDir)
	}
	if !strings.HasPrefix(c.API.Socket, "/") {
		v.at("api.socket", "api.socket must be an absolute path, got %q", c.API.Socket)
	}
	if m := c.API.MetricsAddress; m != "" {
		ap, err := netip.ParseAddrPort(m)
		if err != nil {
			v.at("api.metrics_address", "metrics_address must be ip:port, got %q", m)
		} else if !ap.Addr().IsLoopback() {
			v.at("api.metrics_address", "metrics_address must be a loopback address, got %q", m)
		}
	}
	v.checkCluster(&c.Cluster)
	if c.BGP != nil {
		v.checkBGP(c.BGP, &c.Cluster)
	}
	v.checkVIPs(c)
}

func (v *validator) checkCluster(cl *ClusterConfig) {
	if cl.BindAddress == "" {
		v.at("cluster", "cluster.bind_address is required")
	} else if a, err := netip.ParseAddr(cl.BindAddress); err != nil || a.Zone() != "" {
		v.at("cluster.bind_address", "invalid address %q", cl.BindAddress)
	} else if a = a.Unmap(); a.IsUnspecified() || a.IsMulticast() {
		v.at("cluster.bind_address", "bind_address %s is not an address other nodes can reach: use this node's address on the cluster network (it is also what peers are told to call)", a)
	} else {
		cl.bindAddr = a
	}
	cl.allowed = nil
	for i, n := range cl.AllowedNetworks {
		p, err := parseNetwork(n)
		if err != nil {
			v.at("cluster.allowed_networks", "allowed_networks[%d]: %v", i, err)
			continue
		}
		cl.allowed = append(cl.allowed, p)
	}
	if cl.BindPort < 1 || cl.BindPort > 65535 {
		v.at("cluster.bind_port", "bind_port must be 1-65535, got %d", cl.BindPort)
	}
	cl.peerAddrs = nil
	seen := map[string]bool{}
	for i, p := range cl.Peers {
		hp, err := peerAddress(p, cl.BindPort)
		if err != nil {
			v.at("cluster.peers", "peers[%d]: %v", i, err)
			continue
		}
		if !seen[hp] {
			seen[hp] = true
			cl.peerAddrs = append(cl.peerAddrs, hp)
		}
	}
	cl.rejoinInterval = v.durationAtLeast("cluster.rejoin_interval", cl.RejoinInterval, DefaultRejoinInterval, time.Second)
	cl.handoffTimeout = v.durationAtLeast("cluster.handoff_timeout", cl.HandoffTimeout, DefaultHandoffTimeout, 100*time.Millisecond)
	switch cl.FailureDetection {
	case "lan", "fast":
	default:
		v.at("cluster.failure_detection", "failure_detection must be \"lan\" or \"fast\", got %q", cl.FailureDetection)
	}
	if cl.KeyFile != "" {
		if !strings.HasPrefix(cl.KeyFile, "/") {
			v.at("cluster.key_file", "key_file must be an absolute path, got %q", cl.KeyFile)
		} else if _, err := readKeys(cl.KeyFile); err != nil {
			v.at("cluster.key_file", "%v", err)
		}
	}
}

// parseNetwork reads "192.0.2.0/24" or a single address ("192.0.2.11",
// taken as /32 or /128).
func parseNetwork(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("invalid network %q (want CIDR such as \"192.0.2.0/24\" or an address)", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// peerAddress normalises "ip", "ip:port", "[v6]:port", "host" or
// "host:port" to host:port.
func peerAddress(s string, defPort int) (string, error) {
	if s == "" {
		return "", errors.New("empty address")
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a, uint16(defPort)).String(), nil
	}
	host, port := s, strconv.Itoa(defPort)
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("invalid port in %q", s)
		}
	} else if strings.Count(s, ":") > 0 {
		return "", fmt.Errorf("invalid address %q", s)
	}
	if _, err := netip.ParseAddr(host); err != nil && !validHostname(host) {
		return "", fmt.Errorf("invalid address %q", s)
	}
	return net.JoinHostPort(host, port), nil
}

// ValidNodeName reports whether s can name a node: what a hostname or a
// Kubernetes node name can be (letters, digits, '-', '_', '.', starting with
// a letter or digit, at most 253). Names received from the network are held
// to the same rule, so none can carry control characters into logs and
// vipctl's output.
func ValidNodeName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case i > 0 && (r == '-' || r == '_' || r == '.'):
		default:
			return false
		}
	}
	return true
}

// peerWithAddr returns the index of the configured peer whose address is a.
func peerWithAddr(peers []string, defPort int, a netip.Addr) (int, bool) {
	for i, p := range peers {
		hp, err := peerAddress(p, defPort)
		if err != nil {
			continue
		}
		host, _, _ := net.SplitHostPort(hp)
		if pa, err := netip.ParseAddr(host); err == nil && pa.Unmap() == a {
			return i, true
		}
	}
	return 0, false
}

// validHostname accepts DNS names, but not things that look like a mistyped
// IPv4 address ("192.0.2.300").
func validHostname(h string) bool {
	if h == "" || len(h) > 253 || strings.Trim(h, "0123456789.") == "" {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}

func (v *validator) checkVIPs(c *Config) {
	if len(c.VIPs) == 0 {
		v.at("", "no [[vip]] configured")
	}
	if len(c.VIPs) > MaxVIPs {
		v.at(fmt.Sprintf("vip[%d]", MaxVIPs), "at most %d VIPs are supported, got %d", MaxVIPs, len(c.VIPs))
	}
	names := map[string]int{}
	addrs := map[netip.Addr]int{}
	keys := map[uint32]int{}
	needBGP := false
	for i := range c.VIPs {
		vip := &c.VIPs[i]
		p := fmt.Sprintf("vip[%d]", i)
		switch {
		case vip.Name == "":
			v.at(p, "vip.name is required")
		case names[vip.Name] > 0:
			v.at(p+".name", "duplicate VIP name %q (first at vip[%d])", vip.Name, names[vip.Name]-1)
		default:
			names[vip.Name] = i + 1
			k := vipKey(vip.Name)
			if j, dup := keys[k]; dup {
				v.at(p+".name", "VIP name %q collides with %q in metadata; rename one", vip.Name, c.VIPs[j].Name)
			}
			keys[k] = i
		}
		if vip.Address == "" {
			v.at(p, "vip.address is required")
		} else if a, err := netip.ParseAddr(vip.Address); err != nil || a.Zone() != "" {
			v.at(p+".address", "invalid address %q", vip.Address)
		} else {
			a = a.Unmap()
			vip.addr = a
			if j, dup := addrs[a]; dup {
				v.at(p+".address", "address %s is also used by vip[%d]", a, j)
			}
			addrs[a] = i
			switch {
			case a.IsUnspecified() || a.IsMulticast() || a.IsLoopback():
				v.at(p+".address", "address %s cannot be a VIP", a)
			case a == c.Cluster.bindAddr:
				v.at(p+".address", "vip %q: address %s is this node's cluster.bind_address; a VIP needs an address no host uses", vip.Name, a)
			default:
				if j, ok := peerWithAddr(c.Cluster.Peers, c.Cluster.BindPort, a); ok {
					v.at(p+".address", "vip %q: address %s is the address of cluster.peers[%d]; a VIP needs an address no host uses", vip.Name, a, j)
				}
			}
		}
		switch vip.Mode {
		case ModeL2:
			if vip.Interface == "" {
				v.at(p, "vip %q: interface is required for mode \"l2\"", vip.Name)
			}
			if vip.Announce != "owner" {
				v.at(p+".announce", "announce = %q needs mode \"bgp\"; l2 VIPs have one owner", vip.Announce)
			}
		case ModeBGP:
			needBGP = true
			if vip.Announce != "owner" && vip.Announce != "all" {
				v.at(p+".announce", "announce must be \"owner\" or \"all\", got %q", vip.Announce)
			}
		default:
			v.at(p+".mode", "mode must be \"l2\" or \"bgp\", got %q", vip.Mode)
		}
		if vip.Interface != "" && !validIfName(vip.Interface) {
			v.at(p+".interface", "invalid interface name %q", vip.Interface)
		}
		if vip.Health != nil {
			v.checkHealth(p+".health", vip.Health)
		}
	}
	if needBGP && c.BGP == nil {
		v.at("", "a VIP has mode \"bgp\" but there is no [bgp] section")
	}
}

func validIfName(s string) bool {
	return len(s) < 16 && !strings.ContainsAny(s, "/ \t\n:") && s != "." && s != ".."
}

func (v *validator) checkHealth(p string, h *HealthConfig) {
	switch {
	case h.URL == "" && len(h.Command) == 0:
		v.at(p, "health needs url or command")
	case h.URL != "" && len(h.Command) > 0:
		v.at(p, "health takes url or command, not both")
	case h.URL != "":
		u, err := url.Parse(h.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.at(p+".url", "health url must be http:// or https:// with a host, got %q", h.URL)
		}
	case h.Command[0] == "":
		v.at(p+".command", "health command has an empty program name")
	}
	h.interval = v.durationAtLeast(p+".interval", h.Interval, DefaultHealthInterval, 100*time.Millisecond)
	h.timeout = v.durationAtLeast(p+".timeout", h.Timeout, DefaultHealthTimeout, 10*time.Millisecond)
	if h.Rise < 1 {
		v.at(p+".rise", "rise must be at least 1, got %d", h.Rise)
	}
	if h.Fall < 1 {
		v.at(p+".fall", "fall must be at least 1, got %d", h.Fall)
	}
	if h.CAFile != "" && !strings.HasPrefix(h.CAFile, "/") {
		v.at(p+".ca_file", "ca_file must be an absolute path, got %q", h.CAFile)
	}
}

func (v *validator) checkBGP(b *BGPConfig, cl *ClusterConfig) {
	// Defaults and bounds of the per-peer BFD and prefix limit keys.
	const (
		defaultBFDMinInterval = 300 * time.Millisecond
		minBFDInterval        = 50 * time.Millisecond
		defaultBFDMultiplier  = 3
		defaultMaxPrefixes    = 100
		maxMaxPrefixes        = 1000000
	)
	if b.ASN == 0 {
		v.at("bgp.asn", "bgp.asn is required and must not be 0")
	}
	switch {
	case b.RouterID != "":
		a, err := netip.ParseAddr(b.RouterID)
		if err != nil || !a.Is4() {
			v.at("bgp.router_id", "router_id must be an IPv4 address, got %q", b.RouterID)
		}
		b.routerID = a
	case cl.bindAddr.Is4():
		b.routerID = cl.bindAddr
	default:
		v.at("bgp", "bgp.router_id is required when cluster.bind_address is not IPv4")
	}
	if b.ListenPort == nil {
		lp := DefaultBGPListenPort
		b.ListenPort = &lp
	} else if lp := *b.ListenPort; lp != -1 && (lp < 1 || lp > 65535) {
		v.at("bgp.listen_port", "listen_port must be -1 or 1-65535, got %d", lp)
	}
	b.gracefulShutdown = DefaultGracefulShutdown
	if b.GracefulShutdown == "0s" || b.GracefulShutdown == "0" {
		b.gracefulShutdown = 0
	} else {
		b.gracefulShutdown = v.duration("bgp.graceful_shutdown", b.GracefulShutdown, DefaultGracefulShutdown)
	}
	if len(b.Peers) == 0 {
		v.at("bgp", "bgp needs at least one [[bgp.peer]]")
	}
	for i := range b.Peers {
		pr := &b.Peers[i]
		p := fmt.Sprintf("bgp.peer[%d]", i)
		if a, err := netip.ParseAddr(pr.Address); err != nil || pr.Address == "" {
			v.at(p+".address", "invalid peer address %q", pr.Address)
		} else {
			pr.addr = a.Unmap()
		}
		if pr.ASN == 0 {
			v.at(p+".asn", "peer asn is required and must not be 0")
		}
		pr.holdTime = v.duration(p+".hold_time", pr.HoldTime, DefaultBGPHoldTime)
		if pr.holdTime < 3*time.Second {
			v.at(p+".hold_time", "hold_time must be at least 3s, got %q", pr.HoldTime)
		}
		pr.keepalive = v.duration(p+".keepalive", pr.Keepalive, pr.holdTime/3)
		if pr.keepalive > pr.holdTime {
			v.at(p+".keepalive", "keepalive %s is longer than hold_time %s", pr.keepalive, pr.holdTime)
		}
		for _, cm := range pr.Communities {
			if !validCommunity(cm) {
				v.at(p+".communities", "invalid community %q (want \"asn:value\", each 0-65535)", cm)
			}
		}
		if pr.PasswordFile != "" {
			pw, err := readSecretFile(pr.PasswordFile)
			if err != nil {
				v.at(p+".password_file", "password_file %v", err)
			}
			pr.password = pw
		}
		pr.maxPrefixes = defaultMaxPrefixes
		if pr.MaxPrefixes != nil {
			if n := *pr.MaxPrefixes; n < 1 || n > maxMaxPrefixes {
				v.at(p+".max_prefixes", "max_prefixes must be 1-%d, got %d", maxMaxPrefixes, n)
			} else {
				pr.maxPrefixes = uint32(n)
			}
		}
		pr.bfdMinInterval = v.duration(p+".bfd_min_interval", pr.BFDMinInterval, defaultBFDMinInterval)
		if pr.bfdMinInterval < minBFDInterval || pr.bfdMinInterval%time.Millisecond != 0 {
			v.at(p+".bfd_min_interval", "bfd_min_interval must be whole milliseconds, at least %s, got %q", minBFDInterval, pr.BFDMinInterval)
			pr.bfdMinInterval = defaultBFDMinInterval
		}
		pr.bfdMultiplier = defaultBFDMultiplier
		if pr.BFDMultiplier != nil {
			if n := *pr.BFDMultiplier; n < 1 || n > 255 {
				v.at(p+".bfd_multiplier", "bfd_multiplier must be 1-255, got %d", n)
			} else {
				pr.bfdMultiplier = uint8(n)
			}
		}
	}
}

func validCommunity(s string) bool {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return false
	}
	for _, part := range []string{a, b} {
		n, err := strconv.ParseUint(part, 10, 16)
		if err != nil || n > 65535 {
			return false
		}
	}
	return true
}

// readSecretFile reads a password or key file, refusing one that group or
// others can read. Its errors name the file and say what to do.
func readSecretFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", secretFileError(path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s has mode %04o; it must not be accessible by group or others (chmod 600)", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", secretFileError(path, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// secretFileError explains a secret file that cannot be read: vipd runs as
// its own user (User=vipd in the unit), which needs to own a 0600 file.
func secretFileError(path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission):
		u := "the service user"
		if cu, uerr := user.Current(); uerr == nil {
			u = cu.Username
		}
		return fmt.Errorf("%s: permission denied for user %s: chown %s %s (it must stay mode 0600)", path, u, u, path)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w", path, fs.ErrNotExist)
	}
	return fmt.Errorf("%s: %w", path, err)
}

// logLevel is log_level as a slog level.
func (c *Config) logLevel() slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(c.LogLevel)) // validated by Parse
	return l
}

// Addr returns the VIP's parsed address.
func (v VIPConfig) Addr() netip.Addr { return v.addr }

// RejoinIntervalDuration returns the parsed rejoin interval.
func (c ClusterConfig) RejoinIntervalDuration() time.Duration { return c.rejoinInterval }

// HandoffTimeoutDuration returns the parsed handoff timeout.
func (c ClusterConfig) HandoffTimeoutDuration() time.Duration { return c.handoffTimeout }

// PeerAddrs returns the configured peers as host:port.
func (c ClusterConfig) PeerAddrs() []string { return c.peerAddrs }

// BindAddr returns the parsed bind address.
func (c ClusterConfig) BindAddr() netip.Addr { return c.bindAddr }

// RouterIDAddr returns the parsed router ID (router_id, or the IPv4 bind
// address).
func (b BGPConfig) RouterIDAddr() netip.Addr { return b.routerID }

// GracefulShutdownDuration returns the parsed graceful_shutdown (0: off).
func (b BGPConfig) GracefulShutdownDuration() time.Duration { return b.gracefulShutdown }

// Addr returns the router's parsed address.
func (p BGPPeerConfig) Addr() netip.Addr { return p.addr }

// Password returns the TCP MD5 password read from password_file ("" without).
func (p BGPPeerConfig) Password() string { return p.password }

// HoldTimeDuration returns the parsed hold time.
func (p BGPPeerConfig) HoldTimeDuration() time.Duration { return p.holdTime }

// KeepaliveDuration returns the parsed keepalive interval.
func (p BGPPeerConfig) KeepaliveDuration() time.Duration { return p.keepalive }

// MaxPrefixLimit returns max_prefixes (100 when unset).
func (p BGPPeerConfig) MaxPrefixLimit() uint32 { return p.maxPrefixes }

// BFDMinIntervalDuration returns the parsed bfd_min_interval (300ms when
// unset).
func (p BGPPeerConfig) BFDMinIntervalDuration() time.Duration { return p.bfdMinInterval }

// BFDDetectMultiplier returns bfd_multiplier (3 when unset).
func (p BGPPeerConfig) BFDDetectMultiplier() uint8 { return p.bfdMultiplier }
