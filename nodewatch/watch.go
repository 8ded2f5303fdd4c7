package nodewatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config configures a Watcher. Every field has a default: the zero Config
// watches the Node named in the kubelet's client certificate, through the
// first kubelet kubeconfig found.
type Config struct {
	// Kubeconfigs are the kubeconfig files to use, in order of preference:
	// the first that exists is read, at every (re)connection, so one that
	// appears later (kubeadm init writes kubelet.conf after vipd started)
	// is found then. Default: DefaultKubeconfigs().
	Kubeconfigs []string
	// NodeName is the Node to watch. Default: the name in the client
	// certificate's common name (system:node:NAME, as every kubelet
	// certificate has), else FallbackNodeName.
	NodeName string
	// FallbackNodeName is the Node to watch when NodeName is empty and the
	// credentials do not name a node (a token).
	FallbackNodeName string
	// Server replaces the kubeconfig's server URL, for instance
	// https://127.0.0.1:6443 to read from this host's apiserver; then
	// TLSServerName is the name its certificate is checked against
	// (kubeadm's apiserver certificate is valid for "kubernetes", not
	// for 127.0.0.1). Default: the kubeconfig's.
	Server, TLSServerName string
	// Rules are the choices Judge leaves to the configuration. Default:
	// the Kubernetes exclusion label does not withdraw the node.
	Rules Rules
	// AccessHint is added to the error when the kubeconfig, or a file it
	// names, cannot be read for lack of permission: what lets this process
	// read it (vipd names its systemd drop-in). Default: none.
	AccessHint string
	// UserAgent is sent with every request. Default "vipd".
	UserAgent string
	// Logger receives the watcher's logs (the Node's name under the key
	// kube_node, so a logger that carries vipd's node_name as "node" keeps
	// it). Default: slog.Default().
	Logger *slog.Logger
	// RequestTimeout bounds a list, and the wait for a watch's response
	// headers. Default 10 s.
	RequestTimeout time.Duration
	// WatchTimeout: the apiserver is asked to end a watch after a random
	// time in [WatchTimeout, 2*WatchTimeout), and the watcher gives up on
	// it 30 s after that; either way it watches again from where it was.
	// Default 5 min.
	WatchTimeout time.Duration
	// PingInterval: an HTTP/2 connection that received nothing for this
	// long is pinged, and closed when the ping is not answered within
	// PingInterval/2, so a dead apiserver host does not leave the watch
	// hanging. Default 30 s.
	PingInterval time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failed attempt,
	// doubling from one to the other (with jitter); a Retry-After header
	// is honoured up to MaxBackoff. Defaults 500 ms and 30 s.
	MinBackoff, MaxBackoff time.Duration
	// Now is the clock of State's times. Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Kubeconfigs == nil {
		c.Kubeconfigs = DefaultKubeconfigs()
	}
	if c.UserAgent == "" {
		c.UserAgent = "vipd"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	setDefault(&c.RequestTimeout, 10*time.Second)
	setDefault(&c.WatchTimeout, 5*time.Minute)
	setDefault(&c.PingInterval, 30*time.Second)
	setDefault(&c.MinBackoff, 500*time.Millisecond)
	setDefault(&c.MaxBackoff, 30*time.Second)
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func setDefault(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}

// State is what the watcher knows, as reported to Run's callback.
type State struct {
	// Node is the Node watched, Kubeconfig the file the credentials come
	// from and Server the apiserver read ("" until a kubeconfig was read).
	Node, Kubeconfig, Server string
	// Verdict is the last verdict read from the API: eligible until the
	// Node was read, and kept while the API cannot be read.
	Verdict Verdict
	// VerdictSince is when Verdict last changed (zero: never).
	VerdictSince time.Time
	// Registered: the Node existed at the last read.
	Registered bool
	// Reachable: the last attempt to read the Node succeeded.
	Reachable bool
	// Err says why not, while not Reachable ("" before the first attempt).
	Err string
	// Since is when Reachable last changed (or the watcher started).
	Since time.Time
}

// Watcher follows one Node. Make it with New and run it with Run.
type Watcher struct {
	cfg Config
	log *slog.Logger

	// The connection, made again when the kubeconfig changes.
	kc     *Kubeconfig
	tr     *http.Transport
	client *http.Client
	certs  *certLoader

	st       State
	notify   func(State)
	seen     bool            // the Node was read at least once since the watcher started
	started  bool            // the API was read at least once
	logged   map[string]bool // failure kinds logged since the watch was last healthy
	warned   bool            // a failure was logged since the last recovery
	failures int             // consecutive failed attempts
	gone     int             // consecutive 410 Gone without an event in between

	// Reconnect's request, taken by Run.
	mu        sync.Mutex
	reconnect bool
	cancel    context.CancelFunc // ends the current session
}

// New returns a Watcher for cfg. It does no I/O.
func New(cfg Config) *Watcher {
	cfg = cfg.withDefaults()
	return &Watcher{cfg: cfg, log: cfg.Logger}
}

// errGone is a 410 Gone: the resource version is too old; list again.
var errGone = errors.New("resource version too old (410 Gone)")

// apiError is an answer other than 200 from the apiserver.
type apiError struct {
	code       int
	msg        string
	retryAfter time.Duration
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("apiserver answered %d %s", e.code, http.StatusText(e.code))
	if e.msg != "" {
		s += ": " + e.msg
	}
	return s
}

func (e *apiError) Is(target error) bool { return target == errGone && e.code == http.StatusGone }

// noKubeconfigError: none of the configured kubeconfig files exists (yet).
type noKubeconfigError struct{ paths []string }

func (e *noKubeconfigError) Error() string {
	return "no kubeconfig found (looked for " + strings.Join(e.paths, ", ") + ")"
}

// Reconnect makes Run drop its connection and read the Node again on a new
// one, at once. vipd calls it after it released the VIP: a watch that went
// through the VIP to this host's own apiserver may be mute once the
// address moved (nothing answers for it here any more, and nothing tells
// the connection), and HTTP/2 pings would take up to 45 s to find out.
// The verdict stays as it is meanwhile. It never blocks; it is safe to
// call from any goroutine, before or while Run runs.
func (w *Watcher) Reconnect() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reconnect = true
	if w.cancel != nil {
		w.cancel()
	}
}

// takeReconnect reports whether Reconnect was called since the last time,
// and forgets it.
func (w *Watcher) takeReconnect() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.reconnect
	w.reconnect = false
	return r
}

// sessionContext is ctx, ended early by Reconnect.
func (w *Watcher) sessionContext(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cancel = cancel
	if w.reconnect {
		cancel()
	}
	return sctx, cancel
}

// Run watches the Node until ctx ends, calling notify (from Run's
// goroutine, so it must not block for long) each time the State changes.
func (w *Watcher) Run(ctx context.Context, notify func(State)) {
	w.notify = notify
	w.st.Since = w.cfg.Now()
	defer w.closeConn()
	for {
		sctx, cancel := w.sessionContext(ctx)
		err := w.session(sctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if w.takeReconnect() {
			// Asked for: a new connection at once, no failure.
			w.log.Debug("node watch: reconnecting on request", "kube_node", w.st.Node)
			w.closeConn()
			continue
		}
		var wait time.Duration
		if errors.Is(err, errGone) {
			// Normal after a long disconnection: list again at once, but
			// back off if the apiserver says so again and again.
			w.gone++
			w.log.Debug("node watch: resource version expired; listing again", "err", err)
			if w.gone > 1 {
				wait = w.backoff(w.gone-1, 0)
			}
		} else {
			w.failures++
			w.fail(err)
			var ae *apiError
			var retryAfter time.Duration
			if errors.As(err, &ae) {
				retryAfter = ae.retryAfter
			}
			wait = w.backoff(w.failures, retryAfter)
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}

// session connects, lists and watches until something fails.
func (w *Watcher) session(ctx context.Context) error {
	if err := w.connect(); err != nil {
		return err
	}
	rv, err := w.list(ctx)
	if err != nil {
		return err
	}
	short := 0 // watches in a row that ended at once with no event
	for {
		start := time.Now()
		var events int
		rv, events, err = w.watch(ctx, rv)
		var end *streamEnd
		if !errors.As(err, &end) {
			return err
		}
		// A watch that ends (its timeout, an apiserver restart, a cut
		// connection) is opened again from where it was: only if that
		// fails is the API not readable. One that keeps ending at once
		// is backed off from, and after three is a failure.
		if events > 0 || time.Since(start) >= time.Second {
			short = 0
			w.healthy()
			continue
		}
		short++
		w.log.Debug("node watch ended at once", "kube_node", w.st.Node, "err", err)
		if short >= 3 {
			return fmt.Errorf("watch node %s: %d watches in a row ended at once: %w", w.st.Node, short, err)
		}
		if !sleep(ctx, w.backoff(short, 0)) {
			return ctx.Err()
		}
	}
}

// streamEnd is a watch stream that ended after it opened: cause is nil at
// the end of the stream (the apiserver's timeout), else what broke it.
type streamEnd struct{ cause error }

func (e *streamEnd) Error() string {
	if e.cause == nil {
		return "watch ended"
	}
	return "watch broken: " + e.cause.Error()
}

func (e *streamEnd) Unwrap() error { return e.cause }

// connect reads the kubeconfig and makes the HTTP client, unless the one
// it has was made from the same kubeconfig.
func (w *Watcher) connect() error {
	path := FindKubeconfig(w.cfg.Kubeconfigs)
	if path == "" {
		return &noKubeconfigError{paths: w.cfg.Kubeconfigs}
	}
	kc, err := LoadKubeconfig(path)
	if err != nil {
		return w.hint(err)
	}
	if w.cfg.Server != "" {
		if err := checkServer(w.cfg.Server); err != nil {
			return fmt.Errorf("node watch: %w", err)
		}
		kc.Server = w.cfg.Server
	}
	if w.cfg.TLSServerName != "" {
		kc.TLSServerName = w.cfg.TLSServerName
	}
	if w.client == nil || !sameKubeconfig(w.kc, kc) {
		certs := newCertLoader(kc)
		tc, err := kc.tlsConfig(certs)
		if err != nil {
			return w.hint(err)
		}
		w.closeConn()
		w.kc, w.certs = kc, certs
		w.tr = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: w.cfg.RequestTimeout, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:       tc,
			TLSHandshakeTimeout:   w.cfg.RequestTimeout,
			ResponseHeaderTimeout: w.cfg.RequestTimeout,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          2,
			IdleConnTimeout:       90 * time.Second,
			HTTP2:                 &http.HTTP2Config{SendPingTimeout: w.cfg.PingInterval, PingTimeout: w.cfg.PingInterval / 2},
		}
		w.client = &http.Client{Transport: w.tr}
	}
	node := w.cfg.NodeName
	if node == "" {
		node = w.certs.nodeName()
	}
	if node == "" {
		node = w.cfg.FallbackNodeName
	}
	if node == "" {
		return fmt.Errorf("node watch: no node name (set one: the credentials of %s do not name a node)", path)
	}
	st := w.st
	if node != st.Node {
		// Another Node (the certificate changed hands): nothing known yet.
		w.seen = false
		st.Verdict, st.Registered = Verdict{}, false
	}
	st.Node, st.Kubeconfig, st.Server = node, path, kc.Server
	w.set(st)
	return nil
}

// hint adds the AccessHint to a permission error.
func (w *Watcher) hint(err error) error {
	if w.cfg.AccessHint == "" || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	return fmt.Errorf("%w (%s)", err, w.cfg.AccessHint)
}

func (w *Watcher) closeConn() {
	if w.tr != nil {
		w.tr.CloseIdleConnections()
	}
	w.tr, w.client = nil, nil
}

// nodeList is a NodeList, the fields read.
type nodeList struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Items []Node `json:"items"`
}

// maxList bounds a list response (a Node with many images is a few
// hundred KiB).
const maxList = 16 << 20

// list reads the Node (a list with a field selector: the read the Node
// authorizer allows) and returns the list's resource version.
func (w *Watcher) list(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.RequestTimeout)
	defer cancel()
	resp, err := w.get(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("list node %s: %w", w.st.Node, err)
	}
	defer resp.Body.Close()
	var l nodeList
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxList)).Decode(&l); err != nil {
		return "", fmt.Errorf("list node %s: %w", w.st.Node, err)
	}
	w.succeed()
	var n *Node
	for i := range l.Items {
		if l.Items[i].Metadata.Name == w.st.Node {
			n = &l.Items[i]
		}
	}
	w.observe(n)
	return l.Metadata.ResourceVersion, nil
}

// watchEvent is one line of a watch stream.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// apiStatus is a metav1.Status, the fields read.
type apiStatus struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// watch follows the Node from resource version rv until the watch ends,
// and returns the resource version to go on from and the number of events
// read. A watch that opened and then ended returns a *streamEnd.
func (w *Watcher) watch(ctx context.Context, rv string) (string, int, error) {
	d := w.cfg.WatchTimeout + rand.N(w.cfg.WatchTimeout)
	wctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	q := url.Values{
		"watch":               {"true"},
		"resourceVersion":     {rv},
		"allowWatchBookmarks": {"true"},
		"timeoutSeconds":      {strconv.Itoa(int(d.Seconds()))},
	}
	resp, err := w.get(wctx, q)
	if err != nil {
		return rv, 0, fmt.Errorf("watch node %s: %w", w.st.Node, err)
	}
	defer resp.Body.Close()
	w.succeed()
	dec := json.NewDecoder(resp.Body)
	events := 0
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			switch {
			case ctx.Err() != nil:
				return rv, events, ctx.Err()
			case errors.Is(err, io.EOF), wctx.Err() != nil:
				return rv, events, &streamEnd{}
			}
			return rv, events, &streamEnd{cause: err}
		}
		switch ev.Type {
		case "ADDED", "MODIFIED", "DELETED":
			var n Node
			if err := json.Unmarshal(ev.Object, &n); err != nil {
				return rv, events, fmt.Errorf("watch node %s: %s event: %w", w.st.Node, ev.Type, err)
			}
			rv = n.Metadata.ResourceVersion
			if n.Metadata.Name != w.st.Node {
				break // not asked for; the field selector keeps others out
			}
			if ev.Type == "DELETED" {
				w.observe(nil)
			} else {
				w.observe(&n)
			}
		case "BOOKMARK":
			var n Node
			if err := json.Unmarshal(ev.Object, &n); err != nil {
				return rv, events, fmt.Errorf("watch node %s: bookmark: %w", w.st.Node, err)
			}
			rv = n.Metadata.ResourceVersion
		case "ERROR":
			var s apiStatus
			_ = json.Unmarshal(ev.Object, &s)
			return rv, events, fmt.Errorf("watch node %s: %w", w.st.Node, &apiError{code: s.Code, msg: s.Message})
		default:
			return rv, events, fmt.Errorf("watch node %s: unknown event type %q", w.st.Node, ev.Type)
		}
		events++
		w.gone = 0
		w.healthy()
	}
}

// get reads the Node list with the field selector on the Node's name and
// the query q; an answer other than 200 is an *apiError.
func (w *Watcher) get(ctx context.Context, q url.Values) (*http.Response, error) {
	if q == nil {
		q = url.Values{}
	}
	q.Set("fieldSelector", "metadata.name="+w.st.Node)
	u := strings.TrimSuffix(w.kc.Server, "/") + "/api/v1/nodes?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", w.cfg.UserAgent)
	token := w.kc.Token
	if w.kc.TokenFile != "" {
		b, err := os.ReadFile(w.kc.TokenFile)
		if err != nil {
			return nil, w.hint(fmt.Errorf("token: %w", err))
		}
		token = strings.TrimSpace(string(b))
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	ae := &apiError{code: resp.StatusCode}
	var s apiStatus
	if b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096)); json.Unmarshal(b, &s) == nil {
		ae.msg = s.Message
	}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		ae.retryAfter = time.Duration(secs) * time.Second
	}
	return nil, ae
}

// observe takes a read of the Node (nil: absent).
func (w *Watcher) observe(n *Node) {
	st := w.st
	switch {
	case n != nil:
		w.seen = true
		st.Registered, st.Verdict = true, w.cfg.Rules.Judge(n)
	case w.seen:
		st.Registered, st.Verdict = false, Judge(nil)
	default:
		// Never seen: a node whose kubelet has not registered it yet.
		st.Registered, st.Verdict = false, Verdict{}
	}
	if !st.Verdict.Equal(w.st.Verdict) || st.VerdictSince.IsZero() {
		st.VerdictSince = w.cfg.Now()
		w.log.Debug("node verdict", "kube_node", st.Node, "verdict", st.Verdict.String())
	}
	w.set(st)
}

// succeed records a successful read of the API.
func (w *Watcher) succeed() {
	w.failures = 0
	if w.st.Reachable {
		return
	}
	st := w.st
	switch {
	case w.warned:
		w.log.Info("kubernetes API readable again", "kube_node", st.Node, "server", st.Server,
			"after", w.cfg.Now().Sub(st.Since).Round(time.Millisecond))
	case !w.started:
		w.log.Info("watching the node's Node object", "kube_node", st.Node, "server", st.Server, "kubeconfig", st.Kubeconfig)
	default:
		w.log.Debug("kubernetes API readable again", "kube_node", st.Node)
	}
	w.started, w.warned = true, false
	st.Reachable, st.Err, st.Since = true, "", w.cfg.Now()
	w.set(st)
}

// healthy records that the watch works (it delivered an event, or stayed
// open): a failure after this is a new outage, logged again.
func (w *Watcher) healthy() { w.logged = nil }

// fail records a failed attempt. Fail-static: the verdict stays. Each kind
// of failure is logged once until the watch is healthy again (a retry that
// fails the same way, or an API that answers a list and then fails again,
// is logged at debug level only), and so is the recovery.
func (w *Watcher) fail(err error) {
	st := w.st
	if st.Reachable {
		st.Reachable, st.Since = false, w.cfg.Now()
	}
	kind := failureKind(err)
	if w.logged[kind] {
		w.log.Debug("node watch: still failing", "kube_node", st.Node, "err", err)
		w.set(st)
		return
	}
	if w.logged == nil {
		w.logged = map[string]bool{}
	}
	w.logged[kind], w.warned = true, true
	st.Err = err.Error()
	if kind == "no kubeconfig" {
		w.log.Info("node watch waits for a kubelet kubeconfig; the node's verdict stays as it is", "err", err)
	} else {
		w.log.Warn("kubernetes API not readable; the node's verdict stays as it is until it is",
			"kube_node", st.Node, "server", st.Server, "verdict", st.Verdict.String(), "err", err)
	}
	w.set(st)
}

// failureKind sorts failures for logging: one line per kind.
func failureKind(err error) string {
	var ae *apiError
	var nk *noKubeconfigError
	var ne net.Error
	switch {
	case errors.As(err, &nk):
		return "no kubeconfig"
	case errors.As(err, &ae):
		return "http " + strconv.Itoa(ae.code)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "other"
}

// set stores st and reports it when it changed.
func (w *Watcher) set(st State) {
	old := w.st
	w.st = st
	if st.Verdict.Equal(old.Verdict) && st.Node == old.Node && st.Kubeconfig == old.Kubeconfig && st.Server == old.Server &&
		st.Registered == old.Registered && st.Reachable == old.Reachable && st.Err == old.Err {
		return
	}
	if w.notify != nil {
		w.notify(st)
	}
}

// backoff is the wait after the n-th failure in a row: MinBackoff doubled
// n-1 times, at most MaxBackoff, with ±20% jitter, and at least retryAfter
// (itself at most MaxBackoff).
func (w *Watcher) backoff(n int, retryAfter time.Duration) time.Duration {
	d := w.cfg.MinBackoff
	for i := 1; i < n && d < w.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, w.cfg.MaxBackoff)
	d = d*4/5 + rand.N(d*2/5+1)
	return max(d, min(retryAfter, w.cfg.MaxBackoff))
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
