package agent

import (
	"context"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/vipd/vipd/agent/apipb"
	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/nodewatch"
)

// nodeState is what the loop knows of this host's Kubernetes Node
// (nodewatch) and the withdraw it makes of it. It is the loop's alone and
// never persisted: it is kept apart from the operator's withdraw flag, which
// only vipctl restore clears, while only the Node clears its own withdraw.
type nodeState struct {
	// cfg is the [kubernetes] section the watch runs with.
	cfg config.KubernetesConfig
	// watcher is the running watch (nil: off); stop ends it; gen numbers
	// it, so a report of a watch replaced by a reload is ignored.
	watcher *nodewatch.Watcher
	stop    context.CancelFunc
	gen     uint64
	// st is the watch's last report.
	st nodewatch.State
	// reasons are the Node's withdraw reasons the loop acts on (none: the
	// Node does not withdraw this node); since is when they last changed.
	reasons []string
	since   time.Time
	// kept: this node is withdrawn by its Node but still eligible, because
	// no other node can take a VIP (every healthy node is withdrawn by its
	// Node); said once in the log when it starts.
	kept bool
}

// withdrawn reports whether the Node withdraws this node.
func (n *nodeState) withdrawn() bool { return len(n.reasons) > 0 }

// nodeReport is the watch's last report, handed to the loop.
type nodeReport struct {
	gen uint64
	st  nodewatch.State
}

// startNodeWatch starts the Node watch of c's [kubernetes] section under
// ctx (Run's), unless it is off. The Node's last verdict stays until the new
// watch has read the Node.
func (a *Agent) startNodeWatch(ctx context.Context, c *config.Config) {
	n := &a.st.node
	n.cfg = c.Kubernetes
	if !c.Kubernetes.On() {
		return
	}
	n.gen++
	gen := n.gen
	wc := c.Kubernetes.Watch()
	wc.Logger, wc.Now = a.log, a.now
	wc.UserAgent = "vipd/" + a.opts.Version
	// Not root (the packaged unit's User=vipd): a permission error names
	// the drop-in that lets vipd read the kubelet's credentials.
	if u, err := user.Current(); err == nil && u.Uid != "0" {
		wc.AccessHint = config.KubeconfigAccessHint(u.Username)
	}
	if a.opts.NodeWatch != nil {
		wc = a.opts.NodeWatch(wc)
	}
	w := nodewatch.New(wc)
	wctx, stop := context.WithCancel(ctx)
	n.watcher, n.stop = w, stop
	a.goroutines.Go(func() {
		w.Run(wctx, func(st nodewatch.State) {
			a.nodeMu.Lock()
			a.nodeLatest = nodeReport{gen: gen, st: st}
			a.nodeMu.Unlock()
			select {
			case a.nodeCh <- struct{}{}:
			default:
			}
		})
	})
}

// stopNodeWatch ends the running watch (its goroutine ends on its own;
// Run waits for it).
func (a *Agent) stopNodeWatch() {
	n := &a.st.node
	if n.stop != nil {
		n.stop()
	}
	n.watcher, n.stop = nil, nil
	n.gen++
}

// reloadNodeWatch restarts the watch when the [kubernetes] section
// changed. Turned off, the Node's withdraw ends with it; changed, it stays
// until the new watch reads the Node (fail-static).
func (a *Agent) reloadNodeWatch(ctx context.Context, c *config.Config) {
	if a.st.node.cfg.Equal(c.Kubernetes) {
		a.st.node.cfg = c.Kubernetes
		return
	}
	a.stopNodeWatch()
	if !c.Kubernetes.On() {
		a.log.Info("kubernetes node watch turned off by reload")
		a.setNodeReasons(nil, "the node watch is off")
		a.st.node.st = nodewatch.State{}
	} else {
		a.log.Info("kubernetes node watch restarted by reload; the Node's last verdict stays until it is read")
	}
	a.startNodeWatch(ctx, c)
}

// onNodeReport takes the watch's last report (on the loop goroutine).
func (a *Agent) onNodeReport() {
	a.nodeMu.Lock()
	r := a.nodeLatest
	a.nodeMu.Unlock()
	n := &a.st.node
	if r.gen != n.gen || n.watcher == nil {
		return // a watch replaced by a reload
	}
	old := n.st
	n.st = r.st
	switch {
	case old.Reachable && !r.st.Reachable:
		a.events.publish(&apipb.Event{Kind: "node", Node: a.self, Message: "kubernetes API not readable: " + r.st.Err + "; the Node's last verdict stays"})
	case !old.Reachable && r.st.Reachable && old.Err != "":
		a.events.publish(&apipb.Event{Kind: "node", Node: a.self, Message: "kubernetes API readable again"})
	}
	// Only a read of the Node changes the verdict: a new watch (a reload)
	// reports before it has read it, and a watch that cannot read keeps
	// its last verdict anyway.
	if r.st.VerdictSince.IsZero() {
		return
	}
	a.setNodeReasons(r.st.Verdict.Reasons, "")
}

// setNodeReasons makes reasons the Node's withdraw, logging and publishing
// a change; why, when set, says why it ends.
func (a *Agent) setNodeReasons(reasons []string, why string) {
	n := &a.st.node
	if slices.Equal(n.reasons, reasons) {
		return
	}
	was := n.withdrawn()
	n.reasons, n.since = slices.Clone(reasons), a.now()
	switch {
	case n.withdrawn():
		msg := "withdrawn by its Node: " + strings.Join(reasons, ", ")
		a.log.Info("the Node withdraws this node; handing its VIPs off", "kube_node", n.st.Node, "reason", strings.Join(reasons, ", "))
		a.events.publish(&apipb.Event{Kind: "node", Node: a.self, Reason: strings.Join(reasons, ", "), Message: msg})
	case was:
		if why == "" {
			why = "the Node no longer withdraws it"
		}
		a.log.Info("eligible again: "+why, "kube_node", n.st.Node)
		a.events.publish(&apipb.Event{Kind: "node", Node: a.self, Message: "eligible again: " + why})
	}
}

// noteNodeKept logs once, when it starts and when it ends, that this node
// is withdrawn by its Node yet kept eligible for some VIP because no other
// node can take it.
func (a *Agent) noteNodeKept(kept []string) {
	n := &a.st.node
	now := len(kept) > 0
	if now == n.kept {
		return
	}
	n.kept = now
	if now {
		a.log.Warn("the Node withdraws this node, but no other node can take over: keeping the VIP here (every healthy node is withdrawn by its Node)",
			"kube_node", n.st.Node, "reason", strings.Join(n.reasons, ", "), "vips", kept)
		a.events.publish(&apipb.Event{Kind: "node", Node: a.self, Message: "withdrawn by its Node but kept eligible: no other node can take the VIP"})
		return
	}
	a.log.Info("no longer kept eligible against the Node's withdraw", "kube_node", n.st.Node)
}

// nodeWarning is the status warning while this node is kept eligible
// against its Node's withdraw ("" when it is not).
func (n *nodeState) warning() string {
	if !n.kept {
		return ""
	}
	return "the Node withdraws this node (" + strings.Join(n.reasons, ", ") + ") but no other node can take the VIP: every healthy node is withdrawn by its Node, so the VIP stays"
}

// reconnectNodeWatch asks the watch for a new connection: after this node
// released a VIP, a watch that went through the VIP to this host's own
// apiserver may be mute.
func (a *Agent) reconnectNodeWatch() {
	if w := a.st.node.watcher; w != nil {
		w.Reconnect()
	}
}

// kubernetesStatus is the watch as `vipctl status` shows it; off, only
// Enabled false (vipctl says how to turn it on).
func (n *nodeState) status() *apipb.KubernetesStatus {
	if !n.cfg.On() {
		return &apipb.KubernetesStatus{}
	}
	ks := &apipb.KubernetesStatus{
		Enabled: true, Explicit: n.cfg.Explicit(), Node: n.st.Node, Server: n.st.Server, Kubeconfig: n.st.Kubeconfig,
		Reachable: n.st.Reachable, Error: n.st.Err, Registered: n.st.Registered,
	}
	if !n.st.Since.IsZero() {
		ks.SinceUnixNano = n.st.Since.UnixNano()
	}
	if !n.since.IsZero() {
		ks.VerdictSinceUnixNano = n.since.UnixNano()
	}
	return ks
}
