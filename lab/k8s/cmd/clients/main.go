// Command clients is the lab's Kubernetes clients: real client-go (the
// version kube-apiserver is built from) talking to the apiserver VIP the way
// a cluster's clients do, recording what each of them sees as JSON lines
// for lab/k8slab to measure.
//
//   - A writer creates a ConfigMap every -write-every (100 ms), each create
//     on its own goroutine (so one stuck request does not stop the others),
//     over its own connection, as admin.
//   - Informers on those ConfigMaps (label run=RUN): -separate of them each
//     on its own connection (controllers of their own), and per name in
//     -kubelets a group of -per-kubelet informers sharing one HTTP/2
//     connection with that node's identity (system:node:NAME), which also
//     renews the node's Lease every -lease-every (10 s), as a kubelet does
//     on its one connection.
//   - With -controller-watches N, a controller: N informers and creates
//     of its own every -write-every, all on one HTTP/2 connection (its
//     watches busy with both writers' objects; its objects' names end in
//     "-ctlSEQ" and are not counted as the writer's).
//   - A request loop like kubectl's: every -request-every, a fresh client
//     (new TCP and TLS connection) gets the namespace; and a loop doing the
//     same on one long-lived client.
//
// Every client keeps client-go's defaults (HTTP/2 with its 30 s read-idle
// ping and 15 s ping timeout, the reflector's backoff, watch-list); each
// request is bounded by -request-timeout (client-go sets none) so the
// record ends. Records, one JSON object a line, times in Unix microseconds:
//
//	{"k":"ready","t":T}                     every informer has synced
//	{"k":"write","s":SEQ,"t":T,"d":D,"e":E,"a":[ID]}  a create: start, duration, error ("" = ok)
//	{"k":"req","c":"fresh"|"long"|"lease"|"controller","t":T,"d":D,"e":E,"a":[ID]}
//	{"k":"ev","w":W,"s":SEQ,"t":T}          informer W first saw object SEQ
//	{"k":"list","w":W,"t":T}                W (re)lists: a list or a watch-list
//	{"k":"watch","w":W,"t":T}               W starts a watch from a resource version
//	{"k":"werr","w":W,"t":T,"e":E}          W's watch ended with an error
//	{"k":"end","t":T}
//
// A request's "a" is the audit ID it sent (Audit-ID header) with each of
// its attempts (client-go's retries, a lease renewal's get and update):
// the apiservers' audit logs have, under it, when each attempt was
// received and answered, so the request's time outside the apiserver (the
// network, the client's retries) can be told from the apiserver's own,
// even for an attempt whose answer never reached the client.
//
// SIGTERM or SIGINT (or -duration) ends the run: the clients stop, this
// run's objects are deleted, the output is flushed.
package main

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

type options struct {
	server, pki, namespace, run, out string
	kubelets                         []string
	separate, perKubelet             int
	controllerWatches                int
	writeEvery, requestEvery         time.Duration
	leaseEvery                       time.Duration
	requestTimeout, duration         time.Duration
}

func main() {
	var o options
	var kubelets string
	flag.StringVar(&o.server, "server", "https://192.0.2.10:6443", "apiserver URL (the VIP)")
	flag.StringVar(&o.pki, "pki", "", "directory with ca.crt, admin.crt/.key and node-NAME.crt/.key (required)")
	flag.StringVar(&o.namespace, "namespace", "vipd-lab", "namespace of the objects")
	flag.StringVar(&o.run, "run", "", "label value of this run's objects [time-based]")
	flag.StringVar(&o.out, "out", "", "write records here (required)")
	flag.StringVar(&kubelets, "kubelets", "n1,n2,n3", "node names: one kubelet-like group of informers on one connection each")
	flag.IntVar(&o.separate, "separate", 8, "informers on connections of their own")
	flag.IntVar(&o.perKubelet, "per-kubelet", 4, "informers per kubelet-like group")
	flag.IntVar(&o.controllerWatches, "controller-watches", 0, "a controller: this many informers and creates every -write-every on one connection (0: none)")
	flag.DurationVar(&o.writeEvery, "write-every", 100*time.Millisecond, "the writer creates an object this often")
	flag.DurationVar(&o.requestEvery, "request-every", 200*time.Millisecond, "the request loops' period")
	flag.DurationVar(&o.leaseEvery, "lease-every", 10*time.Second, "a kubelet-like group renews its node's Lease this often (kubelet: 10 s)")
	flag.DurationVar(&o.requestTimeout, "request-timeout", 10*time.Second, "bound of one request")
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "end the run after this long")
	klog.InitFlags(nil)
	flag.Parse()
	if o.pki == "" || o.out == "" {
		fmt.Fprintln(os.Stderr, "clients: -pki and -out are required")
		os.Exit(2)
	}
	if kubelets != "" {
		o.kubelets = strings.Split(kubelets, ",")
	}
	if o.run == "" {
		o.run = strconv.FormatInt(time.Now().UnixMilli(), 36)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "clients:", err)
		os.Exit(1)
	}
}

// recorder writes records, flushed every 100 ms and at close.
type recorder struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

func (r *recorder) put(rec map[string]any) {
	b, _ := json.Marshal(rec)
	r.mu.Lock()
	r.w.Write(b)
	r.w.WriteByte('\n')
	r.mu.Unlock()
}

// request records a request that started at start and ended now with err
// ("" when it succeeded): rec's fields plus t, d and e, and a, the audit
// ID ctx carries (withAuditIDs).
func (r *recorder) request(ctx context.Context, rec map[string]any, start time.Time, err error) {
	rec["t"], rec["d"], rec["e"] = start.UnixMicro(), time.Since(start).Microseconds(), errText(err)
	if ids, ok := ctx.Value(auditKey{}).(*auditIDs); ok {
		rec["a"] = ids.ids
	}
	r.put(rec)
}

// auditKey is the context key of a request's *auditIDs.
type auditKey struct{}

// auditIDs is the audit ID of one request: sent with every attempt
// (auditTransport), so the apiserver logs each attempt it received under
// it, answered or not.
type auditIDs struct{ ids []string }

// withAuditIDs returns ctx with a new audit ID for its request.
func withAuditIDs(ctx context.Context) context.Context {
	var b [16]byte
	crand.Read(b[:])
	return context.WithValue(ctx, auditKey{}, &auditIDs{ids: []string{hex.EncodeToString(b[:])}})
}

// auditTransport sends the request context's audit ID as the Audit-ID
// header: kube-apiserver takes a client's Audit-ID as the request's audit
// ID (k8s.io/apiserver's WithAuditInit).
type auditTransport struct{ rt http.RoundTripper }

func (a auditTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if ids, ok := req.Context().Value(auditKey{}).(*auditIDs); ok {
		req = req.Clone(req.Context())
		req.Header.Set("Audit-ID", ids.ids[0])
	}
	return a.rt.RoundTrip(req)
}

// every calls f(n), n = 1, 2, ..., at each tick of period until ctx ends;
// with async each call runs on a goroutine of its own (one stuck request
// must not hold up the next), and every waits for them before it returns.
func every(ctx context.Context, period time.Duration, async bool, f func(n int)) {
	var inflight sync.WaitGroup
	defer inflight.Wait()
	t := time.NewTicker(period)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !async {
			f(n)
			continue
		}
		inflight.Add(1)
		go func() { defer inflight.Done(); f(n) }()
	}
}

func (r *recorder) flush() {
	r.mu.Lock()
	r.w.Flush()
	r.mu.Unlock()
}

func now() int64 { return time.Now().UnixMicro() }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// config is a rest.Config for identity file name (admin, node-NAME). With
// own set it has a dialer of its own, which keeps client-go from sharing
// its transport (and connection) with any other config.
func (o options) config(name string, own bool) *rest.Config {
	c := &rest.Config{
		Host: o.server,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:   filepath.Join(o.pki, "ca.crt"),
			CertFile: filepath.Join(o.pki, name+".crt"),
			KeyFile:  filepath.Join(o.pki, name+".key"),
		},
		// client-go's defaults for a client: 5 queries a second, bursts of
		// 10, are for controllers; the lab's loops are paced themselves.
		QPS: 100, Burst: 200,
	}
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return auditTransport{rt} })
	if own {
		// client-go's own default dialer, as a value of this config only.
		c.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return c
}

func run(o options) error {
	f, err := os.Create(o.out)
	if err != nil {
		return err
	}
	rec := &recorder{f: f, w: bufio.NewWriterSize(f, 1<<16)}
	defer func() { rec.flush(); f.Close() }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); every(ctx, 100*time.Millisecond, false, func(int) { rec.flush() }) }()

	admin, err := kubernetes.NewForConfig(o.config("admin", true))
	if err != nil {
		return err
	}
	selector := "run=" + o.run

	// Informers: first the separate ones, then the kubelet-like groups.
	type informer struct {
		id  string
		inf cache.SharedIndexInformer
	}
	var infs []informer
	add := func(id string, cs kubernetes.Interface) {
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				rec.put(map[string]any{"k": "list", "w": id, "t": now()})
				opts.LabelSelector = selector
				return cs.CoreV1().ConfigMaps(o.namespace).List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				kind := "watch"
				if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
					kind = "list" // a watch-list: the reflector relists
				}
				rec.put(map[string]any{"k": kind, "w": id, "t": now()})
				opts.LabelSelector = selector
				return cs.CoreV1().ConfigMaps(o.namespace).Watch(ctx, opts)
			},
		}
		inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
		inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			rec.put(map[string]any{"k": "werr", "w": id, "t": now(), "e": errText(err)})
			cache.DefaultWatchErrorHandler(ctx, r, err)
		})
		var mu sync.Mutex
		seen := map[int]bool{}
		deliver := func(obj any) {
			cm, ok := obj.(*corev1.ConfigMap)
			if !ok {
				return
			}
			i := strings.LastIndexByte(cm.Name, '-')
			seq, err := strconv.Atoi(cm.Name[i+1:])
			if i < 0 || err != nil {
				return
			}
			t := now()
			mu.Lock()
			first := !seen[seq]
			seen[seq] = true
			mu.Unlock()
			if first {
				rec.put(map[string]any{"k": "ev", "w": id, "s": seq, "t": t})
			}
		}
		inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    deliver,
			UpdateFunc: func(_, obj any) { deliver(obj) },
		})
		infs = append(infs, informer{id, inf})
	}
	for i := 0; i < o.separate; i++ {
		cs, err := kubernetes.NewForConfig(o.config("admin", true))
		if err != nil {
			return err
		}
		add(fmt.Sprintf("sep-%d", i), cs)
	}
	kubelets := map[string]kubernetes.Interface{}
	for _, node := range o.kubelets {
		cfg := o.config("node-"+node, false)
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return err
		}
		for i := 0; i < o.perKubelet; i++ {
			cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
			if err != nil {
				return err
			}
			add(fmt.Sprintf("%s-%d", node, i), cs)
			kubelets[node] = cs
		}
	}
	var controller kubernetes.Interface
	if o.controllerWatches > 0 {
		cfg := o.config("admin", true)
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return err
		}
		for i := 0; i < o.controllerWatches; i++ {
			if controller, err = kubernetes.NewForConfigAndClient(cfg, hc); err != nil {
				return err
			}
			add(fmt.Sprintf("ctl-%d", i), controller)
		}
	}
	for _, in := range infs {
		wg.Add(1)
		go func() { defer wg.Done(); in.inf.RunWithContext(ctx) }()
	}
	var synced []cache.InformerSynced
	for _, in := range infs {
		synced = append(synced, in.inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("informers did not sync: %v", ctx.Err())
	}
	rec.put(map[string]any{"k": "ready", "t": now()})

	// The writer, the kubectl-like loop (a fresh client, and so a fresh
	// connection, per request) and a long-lived client's loop (a
	// controller's reads).
	long := o.config("admin", true)
	longHC, err := rest.HTTPClientFor(long)
	if err != nil {
		return err
	}
	loops := []func(){
		func() {
			every(ctx, o.writeEvery, true, func(seq int) {
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", o.run, seq), Labels: map[string]string{"run": o.run}},
					Data:       map[string]string{"seq": strconv.Itoa(seq)},
				}
				rctx, cancel := context.WithTimeout(withAuditIDs(context.WithoutCancel(ctx)), o.requestTimeout)
				defer cancel()
				start := time.Now()
				_, err := admin.CoreV1().ConfigMaps(o.namespace).Create(rctx, cm, metav1.CreateOptions{})
				rec.request(rctx, map[string]any{"k": "write", "s": seq}, start, err)
			})
		},
		func() {
			every(ctx, o.requestEvery, true, func(int) {
				rctx := withAuditIDs(ctx)
				start := time.Now()
				err := getNamespace(rctx, o, o.config("admin", true), nil)
				rec.request(rctx, map[string]any{"k": "req", "c": "fresh"}, start, err)
			})
		},
		func() {
			every(ctx, o.requestEvery, false, func(int) {
				rctx := withAuditIDs(ctx)
				start := time.Now()
				err := getNamespace(rctx, o, long, longHC)
				rec.request(rctx, map[string]any{"k": "req", "c": "long"}, start, err)
			})
		},
	}
	if controller != nil {
		loops = append(loops, func() {
			every(ctx, o.writeEvery, true, func(seq int) {
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-ctl%d", o.run, seq), Labels: map[string]string{"run": o.run}},
					Data:       map[string]string{"seq": strconv.Itoa(seq)},
				}
				rctx, cancel := context.WithTimeout(withAuditIDs(context.WithoutCancel(ctx)), o.requestTimeout)
				defer cancel()
				start := time.Now()
				_, err := controller.CoreV1().ConfigMaps(o.namespace).Create(rctx, cm, metav1.CreateOptions{})
				rec.request(rctx, map[string]any{"k": "req", "c": "controller"}, start, err)
			})
		})
	}
	for node, cs := range kubelets {
		loops = append(loops, func() {
			var lease *coordinationv1.Lease
			every(ctx, o.leaseEvery, false, func(int) {
				rctx := withAuditIDs(ctx)
				start := time.Now()
				err := renewLease(rctx, o, cs, node, &lease)
				rec.request(rctx, map[string]any{"k": "req", "c": "lease"}, start, err)
			})
		})
	}
	for _, loop := range loops {
		wg.Add(1)
		go func() { defer wg.Done(); loop() }()
	}

	<-ctx.Done()
	wg.Wait()
	// This run's objects go; the record is complete without them.
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin.CoreV1().ConfigMaps(o.namespace).DeleteCollection(dctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector})
	rec.put(map[string]any{"k": "end", "t": now()})
	return nil
}

// renewLease renews node's Lease in kube-node-lease as a kubelet does: an
// update of the lease it holds, a get (or the create) first when it holds
// none (at the start, after a failure).
func renewLease(ctx context.Context, o options, cs kubernetes.Interface, node string, cur **coordinationv1.Lease) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.requestTimeout)
	defer cancel()
	leases := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	if *cur == nil {
		l, err := leases.Get(rctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			duration := int32(40)
			l, err = leases.Create(rctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &duration, RenewTime: &now},
			}, metav1.CreateOptions{})
			if err == nil {
				*cur = l
			}
			return err
		}
		if err != nil {
			return err
		}
		*cur = l
	}
	l := (*cur).DeepCopy()
	l.Spec.RenewTime = &now
	updated, err := leases.Update(rctx, l, metav1.UpdateOptions{})
	if err != nil {
		*cur = nil
		return err
	}
	*cur = updated
	return nil
}

// getNamespace gets the namespace with cfg, on hc when given, else on a
// client of its own that is closed afterwards (kubectl's process exits).
func getNamespace(ctx context.Context, o options, cfg *rest.Config, hc *http.Client) error {
	own := hc == nil
	if own {
		var err error
		if hc, err = rest.HTTPClientFor(cfg); err != nil {
			return err
		}
		defer hc.CloseIdleConnections()
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.requestTimeout)
	defer cancel()
	_, err = cs.CoreV1().Namespaces().Get(rctx, o.namespace, metav1.GetOptions{})
	return err
}
