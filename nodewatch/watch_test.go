package nodewatch

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/nodewatch/nodewatchtest"
)

func reasons(s State) string { return s.Verdict.String() }

func isVerdict(v string) func(State) bool {
	return func(s State) bool { return s.Reachable && s.Verdict.String() == v }
}

// setup starts a fake apiserver with node cp-1 registered and eligible, and
// a watcher using a kubeadm-like kubelet.conf for it.
func setup(t *testing.T, cfg Config) (*nodewatchtest.Server, *stateLog, *logBuffer) {
	t.Helper()
	pki, api := fakeCluster(t)
	api.Register()
	cfg.Kubeconfigs = []string{kubeletConf(t, pki, api.URL())}
	states, logs := runWatcher(t, cfg)
	states.waitFor(t, "the registered node eligible", func(s State) bool {
		return s.Reachable && s.Registered && s.Verdict.Eligible()
	})
	return api, states, logs
}

// TestWatchFollowsNode: on every distribution's Node shape, cordon, vipd's
// exclusion label, shutdown, the out-of-service taint, deletion and their
// reverses reach the verdict through the watch, with one list; the
// distribution's own labels and taints (kubeadm's and Talos's
// exclude-from-external-load-balancers among them) withdraw nothing.
func TestWatchFollowsNode(t *testing.T) {
	for _, shape := range nodewatchtest.Shapes() {
		t.Run(shape.Name, func(t *testing.T) { testWatchFollowsNode(t, shape) })
	}
}

func testWatchFollowsNode(t *testing.T, shape nodewatchtest.Shape) {
	api, states, _ := setup(t, Config{})
	s := states.last()
	if s.Node != "cp-1" || !strings.HasPrefix(s.Server, "https://127.0.0.1:") {
		t.Errorf("state %+v: want node cp-1 (from the certificate) read from the fake", s)
	}
	own := func(extra ...string) []string {
		var keys []string
		for _, tt := range shape.Taints() {
			keys = append(keys, tt.(map[string]any)["key"].(string))
		}
		return append(keys, extra...)
	}
	steps := []struct {
		what   string
		change func()
		want   string
	}{
		{"labelled and tainted as " + shape.Name + " does", func() { api.Shape(shape) }, "eligible"},
		{"kubectl cordon", func() { api.Cordon(true) }, ReasonCordoned},
		{"vipd's exclusion label", func() { api.Label(LabelExclude, "") }, ReasonCordoned + ", " + ReasonExcluded},
		{"kubectl uncordon", func() { api.Cordon(false) }, ReasonExcluded},
		{"label removed", func() { api.Unlabel(LabelExclude) }, "eligible"},
		{"graceful shutdown", func() { api.Ready("False", "KubeletNotReady", "node is shutting down") }, ReasonShutdown},
		{"shutdown cancelled", func() { api.Ready("True", "KubeletReady", "kubelet is posting ready status") }, "eligible"},
		{"out-of-service taint", func() { api.Taint(own(TaintOutOfService)...) }, ReasonOutOfService},
		{"taint removed", func() { api.Taint(own()...) }, "eligible"},
		{"deletion held by a finalizer", api.MarkDeleting, ReasonDeleting},
		{"kubectl delete node", api.Delete, ReasonDeleted},
		{"kubelet registers it again", api.Register, "eligible"},
	}
	for _, st := range steps {
		st.change()
		states.waitFor(t, st.what+" -> "+st.want, isVerdict(st.want))
	}
	if n := api.Count("list"); n != 1 {
		t.Errorf("%d lists; want 1 (every change through the watch): %v", n, api.Requests())
	}
	if !states.last().Registered {
		t.Error("node registered again but state says not registered")
	}
}

// TestUnregisteredNodeIsNotDeleted: a Node that does not exist yet (the
// kubelet has not registered it, at bootstrap) leaves the node eligible;
// once it appears its verdict counts.
func TestUnregisteredNodeIsNotDeleted(t *testing.T) {
	pki, api := fakeCluster(t)
	states, _ := runWatcher(t, Config{Kubeconfigs: []string{kubeletConf(t, pki, api.URL())}})
	s := states.waitFor(t, "reachable", func(s State) bool { return s.Reachable })
	if !s.Verdict.Eligible() || s.Registered {
		t.Errorf("no Node yet: state %+v; want eligible and not registered", s)
	}
	api.Cordon(true)
	states.waitFor(t, "registered cordoned", func(s State) bool { return s.Registered && reasons(s) == ReasonCordoned })
}

// TestDeletedWhileDisconnected: a Node deleted while the watch was down is
// found deleted by the relist.
func TestDeletedWhileDisconnected(t *testing.T) {
	api, states, _ := setup(t, Config{})
	api.FailWith(http.StatusServiceUnavailable)
	states.waitFor(t, "unreachable", func(s State) bool { return !s.Reachable })
	api.Delete()
	api.FailWith(0)
	states.waitFor(t, "deleted", isVerdict(ReasonDeleted))
}

// TestGoneRelists: after etcd compaction a watch from an old resource
// version gets 410 Gone, as a status or as an ERROR event; the watcher
// lists again and sees what changed meanwhile.
func TestGoneRelists(t *testing.T) {
	for _, as := range []string{"status", "event"} {
		t.Run(as, func(t *testing.T) {
			api, states, logs := setup(t, Config{})
			api.Stall(time.Hour) // hold the watcher off while the Node changes
			api.Cordon(true)
			api.Expire(as == "event")
			api.Stall(0)
			states.waitFor(t, "cordon seen after relist", isVerdict(ReasonCordoned))
			if n := api.Count("list"); n < 2 {
				t.Errorf("%d lists; want a relist after 410: %v", n, api.Requests())
			}
			if w := logs.lines("WARN", ""); len(w) != 0 {
				t.Errorf("410 Gone is routine, not a warning: %q", w)
			}
		})
	}
}

// TestBookmarkResumesWatch: a watch that ends is watched again from the
// last bookmark's resource version, without a list.
func TestBookmarkResumesWatch(t *testing.T) {
	api, _, _ := setup(t, Config{})
	waitRequests(t, api, "watch", 1)
	rv := api.Bookmark() // and the watch ends, as at its timeout
	want := fmt.Sprintf("watch rv=%d", rv)
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(api.Requests(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q after the cut: %v", want, api.Requests())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := api.Count("list"); n != 1 {
		t.Errorf("%d lists; a watch that ended resumes without one: %v", n, api.Requests())
	}
}

// waitRequests waits until the fake has had n requests starting with prefix.
func waitRequests(t *testing.T, api *nodewatchtest.Server, prefix string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for api.Count(prefix) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d %q requests: %v", n, prefix, api.Requests())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFailStatic: whatever the failure (an apiserver that is gone, errors,
// refuses the credentials, or is too slow), the verdict stays what it was,
// the failure is logged once however often the watcher retries, and the
// recovery once; after it, the verdict follows the Node again.
func TestFailStatic(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(api *nodewatchtest.Server)
		mendIt  func(api *nodewatchtest.Server)
	}{
		{"apiserver stopped", (*nodewatchtest.Server).Stop, func(api *nodewatchtest.Server) { api.Start() }},
		{"503", func(api *nodewatchtest.Server) { api.FailWith(http.StatusServiceUnavailable) }, func(api *nodewatchtest.Server) { api.FailWith(0) }},
		{"500", func(api *nodewatchtest.Server) { api.FailWith(http.StatusInternalServerError) }, func(api *nodewatchtest.Server) { api.FailWith(0) }},
		{"401", func(api *nodewatchtest.Server) { api.FailWith(http.StatusUnauthorized) }, func(api *nodewatchtest.Server) { api.FailWith(0) }},
		{"403", func(api *nodewatchtest.Server) { api.FailWith(http.StatusForbidden) }, func(api *nodewatchtest.Server) { api.FailWith(0) }},
		{"slower than the request timeout", func(api *nodewatchtest.Server) { api.Stall(time.Hour) }, func(api *nodewatchtest.Server) { api.Stall(0) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			api, states, logs := setup(t, Config{RequestTimeout: 300 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
			api.Cordon(true)
			states.waitFor(t, "cordoned", isVerdict(ReasonCordoned))
			before, statesBefore := len(api.Requests()), len(states.all())
			c.breakIt(api)
			s := states.waitFor(t, "unreachable", func(s State) bool { return !s.Reachable })
			if reasons(s) != ReasonCordoned || s.Err == "" {
				t.Errorf("unreachable: state %+v; want the cordon kept and the error said", s)
			}
			// Retries: several failed attempts, one warning.
			deadline := time.Now().Add(10 * time.Second)
			for len(logs.lines("DEBUG", "still failing")) < 3 {
				if time.Now().After(deadline) {
					t.Fatalf("fewer than 3 retries: %v", api.Requests()[before:])
				}
				time.Sleep(20 * time.Millisecond)
			}
			if w := logs.lines("WARN", "not readable"); len(w) != 1 {
				t.Errorf("%d warnings for one outage with retries; want 1: %q", len(w), w)
			}
			for _, st := range states.all()[statesBefore:] {
				if reasons(st) != ReasonCordoned {
					t.Errorf("the verdict changed while the API could not be read: %+v", st)
				}
			}
			c.mendIt(api)
			states.waitFor(t, "reachable again", isVerdict(ReasonCordoned))
			if i := logs.lines("INFO", "readable again"); len(i) != 1 {
				t.Errorf("%d recovery lines; want 1: %q", len(i), i)
			}
			api.Cordon(false)
			states.waitFor(t, "uncordon after recovery", isVerdict("eligible"))
		})
	}
}

// TestCutWatchIsNotAnOutage: a watch cut mid-stream (an apiserver restart
// behind a load balancer) is opened again from where it was, with no list
// and no warning; what changes after each cut is seen.
func TestCutWatchIsNotAnOutage(t *testing.T) {
	api, states, logs := setup(t, Config{})
	for i := range 4 {
		cordon := i%2 == 0
		api.Cordon(cordon)
		want := "eligible"
		if cordon {
			want = ReasonCordoned
		}
		states.waitFor(t, fmt.Sprintf("cut %d: %s", i, want), isVerdict(want))
		api.CutWatches()
		waitRequests(t, api, "watch", i+2)
	}
	if n := api.Count("list"); n != 1 {
		t.Errorf("%d lists; a cut watch resumes from its resource version: %v", n, api.Requests())
	}
	if w := logs.lines("WARN", ""); len(w) != 0 {
		t.Errorf("a cut watch that reopens is no outage: %q", w)
	}
	for _, s := range states.all() {
		if s.Registered && s.VerdictSince.IsZero() {
			t.Errorf("state without a verdict time: %+v", s)
		}
	}
}

// TestReconnect: asked to (vipd released the VIP its watch may go
// through), the watcher drops its connection and reads the Node again on a
// new one at once, with no warning and the verdict kept; the changes after
// it are seen.
func TestReconnect(t *testing.T) {
	api, states, logs := setup(t, Config{})
	api.Cordon(true)
	states.waitFor(t, "cordoned", isVerdict(ReasonCordoned))
	waitRequests(t, api, "watch", 1)
	if n := api.Conns(); n != 1 {
		t.Fatalf("%d connections before Reconnect, want 1", n)
	}
	for i := range 2 {
		states.w.Reconnect()
		waitRequests(t, api, "list", i+2)
		waitRequests(t, api, "watch", i+2)
		if n := api.Conns(); n != i+2 {
			t.Errorf("after Reconnect %d: %d connections, want %d (a new one each time)", i+1, n, i+2)
		}
	}
	api.Cordon(false)
	states.waitFor(t, "uncordoned after the reconnections", isVerdict("eligible"))
	for _, s := range states.all() {
		if !s.Reachable && s.Err != "" {
			t.Errorf("a reconnection on request reported a failure: %+v", s)
		}
	}
	if w := logs.lines("WARN", ""); len(w) != 0 {
		t.Errorf("a reconnection on request is no outage: %q", w)
	}
}

// TestWatchEndingAtOnce: an apiserver that accepts watches and ends them at
// once is backed off from, and after three in a row counts as a failure
// (said once); the verdict stays.
func TestWatchEndingAtOnce(t *testing.T) {
	api, states, logs := setup(t, Config{})
	api.Cordon(true)
	states.waitFor(t, "cordoned", isVerdict(ReasonCordoned))
	api.EndWatchesAtOnce(true)
	s := states.waitFor(t, "failing", func(s State) bool { return !s.Reachable })
	if !strings.Contains(s.Err, "ended at once") || reasons(s) != ReasonCordoned {
		t.Errorf("state %+v; want the cordon kept and the reason said", s)
	}
	waitRequests(t, api, "watch", 8)
	if w := logs.lines("WARN", "ended at once"); len(w) != 1 {
		t.Errorf("want one warning, got %q", w)
	}
}

// TestOtherNodeForbidden: the credentials belong to cp-1; a watcher told
// to follow cp-2 is refused (403) by the Node authorizer, and says so.
func TestOtherNodeForbidden(t *testing.T) {
	pki, api := fakeCluster(t)
	api.Register()
	states, logs := runWatcher(t, Config{Kubeconfigs: []string{kubeletConf(t, pki, api.URL())}, NodeName: "cp-2"})
	s := states.waitFor(t, "forbidden", func(s State) bool { return strings.Contains(s.Err, "403") })
	if s.Node != "cp-2" || !s.Verdict.Eligible() {
		t.Errorf("state %+v; want node cp-2, eligible (fail-static)", s)
	}
	if w := logs.lines("WARN", "only its own Node object"); len(w) != 1 {
		t.Errorf("want the apiserver's reason in one warning, got %q", w)
	}
}

// TestNodeNameFallback: credentials that do not name a node (a token) use
// FallbackNodeName; the certificate's name wins over it.
func TestNodeNameFallback(t *testing.T) {
	pki, api := fakeCluster(t)
	api.Register()
	states, _ := runWatcher(t, Config{Kubeconfigs: []string{kubeletConf(t, pki, api.URL())}, FallbackNodeName: "other"})
	states.waitFor(t, "cp-1 from the certificate", func(s State) bool { return s.Reachable && s.Node == "cp-1" })

	path := filepath.Join(t.TempDir(), "token.conf")
	writeFile(t, path, fmt.Sprintf(`current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abc}}]
`, api.URL()))
	states, _ = runWatcher(t, Config{Kubeconfigs: []string{path}, FallbackNodeName: "cp-1"})
	s := states.waitFor(t, "token refused", func(s State) bool { return strings.Contains(s.Err, "401") })
	if s.Node != "cp-1" {
		t.Errorf("token credentials: node %q; want the fallback cp-1", s.Node)
	}
}

// TestKubeconfigAppearsLater: vipd starts before kubeadm init writes
// kubelet.conf; the watch starts when it appears, and the wait is said once
// (not as a warning).
func TestKubeconfigAppearsLater(t *testing.T) {
	pki, api := fakeCluster(t)
	api.Cordon(true)
	missing := filepath.Join(t.TempDir(), "kubelet.conf")
	states, logs := runWatcher(t, Config{Kubeconfigs: []string{missing, filepath.Join(t.TempDir(), "rke2.kubeconfig")}})
	states.waitFor(t, "waiting for a kubeconfig", func(s State) bool { return strings.Contains(s.Err, "no kubeconfig found") })
	waitLogs(t, logs, "DEBUG", "still failing", 3)
	if i := logs.lines("INFO", "waits for a kubelet kubeconfig"); len(i) != 1 || len(logs.lines("WARN", "")) != 0 {
		t.Errorf("want one info line for the wait and no warning; info %q warn %q", i, logs.lines("WARN", ""))
	}
	conf := kubeletConf(t, pki, api.URL())
	if err := os.Rename(conf, missing); err != nil {
		t.Fatal(err)
	}
	s := states.waitFor(t, "watching", isVerdict(ReasonCordoned))
	if s.Kubeconfig != missing {
		t.Errorf("kubeconfig %q; want %q", s.Kubeconfig, missing)
	}
}

func waitLogs(t *testing.T, logs *logBuffer, level, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(logs.lines(level, s)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d %s lines with %q", n, level, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCertificateRotation: the kubelet replaces its client certificate
// file; the next connection presents the new one.
func TestCertificateRotation(t *testing.T) {
	pki, api := fakeCluster(t)
	api.Register()
	states, _ := runWatcher(t, Config{Kubeconfigs: []string{kubeletConf(t, pki, api.URL())}})
	states.waitFor(t, "eligible", isVerdict("eligible"))
	newSerial, err := pki.WriteClient(pki.ClientPEM, nodewatchtest.NodeUser("cp-1"))
	if err != nil {
		t.Fatal(err)
	}
	api.Stop() // new connections from here on
	if err := api.Start(); err != nil {
		t.Fatal(err)
	}
	api.Cordon(true)
	states.waitFor(t, "cordoned through a new connection", isVerdict(ReasonCordoned))
	if last := api.LastSerial(); last != newSerial {
		t.Errorf("the last request presented certificate %s; want the rotated %s", last, newSerial)
	}
}

// TestServerOverride: Server and TLSServerName replace the kubeconfig's
// (reading from this host's apiserver while the kubeconfig names the VIP).
func TestServerOverride(t *testing.T) {
	pki, api := fakeCluster(t)
	api.Register()
	_, port, _ := strings.Cut(api.Addr(), ":")
	conf := kubeletConf(t, pki, "https://192.0.2.10:6443") // a VIP nobody answers on
	states, _ := runWatcher(t, Config{Kubeconfigs: []string{conf}, Server: "https://localhost:" + port, TLSServerName: "kubernetes"})
	s := states.waitFor(t, "read from the override", isVerdict("eligible"))
	if s.Server != "https://localhost:"+port {
		t.Errorf("server %q; want the override", s.Server)
	}
}

// TestWatchFollowsExclusionLabel: Config.Rules reach the watch's verdict:
// following the Kubernetes exclusion label, kubeadm's marking of the Node
// withdraws it.
func TestWatchFollowsExclusionLabel(t *testing.T) {
	api, states, _ := setup(t, Config{Rules: Rules{FollowExclusionLabel: true}})
	api.Shape(nodewatchtest.ShapeNamed("kubeadm"))
	states.waitFor(t, "kubeadm's labels -> "+ReasonExcludedLB, isVerdict(ReasonExcludedLB))
	api.Unlabel(LabelExcludeLB)
	states.waitFor(t, "label removed -> eligible", isVerdict("eligible"))
}
