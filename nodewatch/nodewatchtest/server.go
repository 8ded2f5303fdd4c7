// Package nodewatchtest runs a fake Kubernetes apiserver that serves one
// Node, for tests of code that follows a Node (nodewatch, vipd's agent) and
// for the lab's measurements; like net/http/httptest, it is never linked
// into vipd.
//
// The Server speaks the part of the API a kubelet's Node watch uses:
// GET /api/v1/nodes with a field selector, as a list or a watch (resource
// versions, bookmarks, 410 Gone), over TLS with client certificates. It
// enforces what the Node authorizer enforces: a kubelet (system:node:NAME)
// may list and watch only its own Node, through a field selector on its
// name. It keeps the Node as the apiserver sends it (JSON with kind and
// apiVersion), and can be made to fail, stall, expire resource versions,
// cut or end watches, and stop and start again on the same address.
//
// Shapes are each distribution's control-plane Node and kubelet
// kubeconfig (kubeadm, RKE2, k3s, Talos) as the distribution writes them,
// each file naming the source that writes it, for every Node-aware test.
package nodewatchtest

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server is the fake apiserver. Its methods are safe for concurrent use.
type Server struct {
	pki  *PKI
	node string

	mu       sync.Mutex
	addr     string
	srv      *httptest.Server
	obj      map[string]any // the Node; nil: none
	rv       int
	history  []event
	changed  chan struct{} // closed and replaced on every change
	cut      chan struct{} // closed to abort every open watch
	minRV    int           // a watch from an older resource version gets 410
	goneAs   string        // "status" (HTTP 410) or "event" (an ERROR event)
	endAt    int           // a watch that sent this resource version ends
	endNow   bool          // every watch ends once it sent what it had
	failCode int           // answer every request with this status (0: none)
	delay    time.Duration // wait before answering
	requests []string      // "list", "watch rv=N"
	serials  []string      // the client certificate serial of each request
	conns    int           // connections accepted
}

type event struct {
	rv  int
	typ string
	obj json.RawMessage
}

// NewServer starts a fake apiserver on 127.0.0.1 for the Node named node
// (not registered yet: see Register), with pki's serving certificate.
func NewServer(pki *PKI, node string) (*Server, error) {
	s := &Server{pki: pki, node: node, rv: 100, changed: make(chan struct{}), cut: make(chan struct{}), goneAs: "status"}
	return s, s.Start()
}

// Start serves, on the same address as before if it ran already.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return nil
	}
	addr := s.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fake apiserver: %w", err)
	}
	s.addr = ln.Addr().String()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	srv.Listener.Close()
	srv.Listener = ln
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
		}
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{s.pki.server}, ClientCAs: s.pki.pool, ClientAuth: tls.VerifyClientCertIfGiven}
	srv.StartTLS()
	s.srv = srv
	return nil
}

// Stop closes the server and every connection to it: the apiserver is
// gone (connections are refused) until Start.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.CloseClientConnections()
		srv.Close()
	}
}

// Addr is the server's host:port; URL its https URL.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL is the server's https URL.
func (s *Server) URL() string { return "https://" + s.Addr() }

// Set changes the Node as JSON (creating it when absent, as the kubelet
// registers it) and sends the change to open watches.
func (s *Server) Set(change func(node map[string]any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	typ := "MODIFIED"
	if s.obj == nil {
		typ = "ADDED"
		s.obj = map[string]any{
			"kind": "Node", "apiVersion": "v1",
			"metadata": map[string]any{"name": s.node, "labels": map[string]any{"kubernetes.io/hostname": s.node}},
			"spec":     map[string]any{},
			"status": map[string]any{"conditions": []any{map[string]any{
				"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}}},
		}
	}
	change(s.obj)
	s.record(typ)
}

// Register creates the Node if it does not exist.
func (s *Server) Register() { s.Set(func(map[string]any) {}) }

// Cordon sets spec.unschedulable (kubectl cordon; false: uncordon).
func (s *Server) Cordon(on bool) {
	s.Set(func(n map[string]any) {
		if on {
			Field(n, "spec")["unschedulable"] = true
		} else {
			delete(Field(n, "spec"), "unschedulable")
		}
	})
}

// Label sets a label; Unlabel removes it.
func (s *Server) Label(key, value string) {
	s.Set(func(n map[string]any) { Field(n, "metadata", "labels")[key] = value })
}

// Unlabel removes a label.
func (s *Server) Unlabel(key string) {
	s.Set(func(n map[string]any) { delete(Field(n, "metadata", "labels"), key) })
}

// Ready sets the Ready condition (the kubelet's graceful shutdown sets
// "False", "KubeletNotReady", "node is shutting down").
func (s *Server) Ready(status, reason, message string) {
	s.Set(func(n map[string]any) {
		Field(n, "status")["conditions"] = []any{map[string]any{"type": "Ready", "status": status, "reason": reason, "message": message}}
	})
}

// Taint replaces the Node's taints with one taint per key, effect
// NoExecute (none: no taints).
func (s *Server) Taint(keys ...string) {
	s.Set(func(n map[string]any) {
		var ts []any
		for _, k := range keys {
			ts = append(ts, map[string]any{"key": k, "effect": "NoExecute"})
		}
		Field(n, "spec")["taints"] = ts
	})
}

// MarkDeleting sets metadata.deletionTimestamp (a deletion held by a
// finalizer).
func (s *Server) MarkDeleting() {
	s.Set(func(n map[string]any) {
		Field(n, "metadata")["deletionTimestamp"] = time.Now().UTC().Format(time.RFC3339)
	})
}

// Delete deletes the Node.
func (s *Server) Delete() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.obj == nil {
		return
	}
	s.record("DELETED")
	s.obj = nil
}

// Field returns the map at path in obj, creating the maps on the way.
func Field(obj map[string]any, path ...string) map[string]any {
	m := obj
	for _, p := range path {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	return m
}

// Bookmark sends a bookmark to open watches, ends them after it (as at
// their timeout), and returns its resource version.
func (s *Server) Bookmark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	s.endAt = s.rv
	b, _ := json.Marshal(map[string]any{"kind": "Node", "apiVersion": "v1", "metadata": map[string]any{"resourceVersion": strconv.Itoa(s.rv)}})
	s.history = append(s.history, event{rv: s.rv, typ: "BOOKMARK", obj: b})
	s.broadcast()
	return s.rv
}

func (s *Server) record(typ string) {
	s.rv++
	Field(s.obj, "metadata")["resourceVersion"] = strconv.Itoa(s.rv)
	b, err := json.Marshal(s.obj)
	if err != nil {
		panic(err) // only maps, strings, bools and slices of them
	}
	s.history = append(s.history, event{rv: s.rv, typ: typ, obj: b})
	s.broadcast()
}

func (s *Server) broadcast() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Expire forgets every resource version so far (etcd compaction): open
// watches are cut, and a watch from an old version gets 410 Gone, as an
// ERROR event in the stream when asEvent, else as the HTTP status.
func (s *Server) Expire(asEvent bool) {
	s.reconfigure(func() {
		s.minRV, s.goneAs = s.rv+1, "status"
		if asEvent {
			s.goneAs = "event"
		}
	})
}

// CutWatches aborts every open watch stream (an apiserver restart, a
// proxy dropping the stream).
func (s *Server) CutWatches() { s.reconfigure(func() {}) }

// reconfigure changes the server's behaviour with change and cuts open
// watches, so the next request sees the change.
func (s *Server) reconfigure(change func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	change()
	close(s.cut)
	s.cut = make(chan struct{})
}

// EndWatchesAtOnce makes every watch end as soon as it sent what it had
// (false: watches last until their timeout again).
func (s *Server) EndWatchesAtOnce(on bool) { s.reconfigure(func() { s.endNow = on }) }

// FailWith makes every request fail with the HTTP status code (0: answer
// again), cutting open watches so the next request sees it. 429 and 503
// carry Retry-After: 1.
func (s *Server) FailWith(code int) { s.reconfigure(func() { s.failCode = code }) }

// Stall delays every answer by d (0: answer at once), cutting open
// watches so the next request sees it.
func (s *Server) Stall(d time.Duration) { s.reconfigure(func() { s.delay = d }) }

// Requests lists the requests received: "list", or "watch rv=N".
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// Count is the number of requests that start with prefix.
func (s *Server) Count(prefix string) int {
	n := 0
	for _, r := range s.Requests() {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// Conns is the number of connections the server accepted.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// LastSerial is the serial number of the client certificate of the last
// request ("" when it had none).
func (s *Server) LastSerial() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.serials) == 0 {
		return ""
	}
	return s.serials[len(s.serials)-1]
}

func status(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": msg})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	watch := q.Get("watch") == "1" || q.Get("watch") == "true" // kubectl and client-go say true
	s.mu.Lock()
	delay, failCode, cut := s.delay, s.failCode, s.cut
	serial := ""
	if len(r.TLS.PeerCertificates) > 0 {
		serial = r.TLS.PeerCertificates[0].SerialNumber.String()
	}
	s.serials = append(s.serials, serial)
	if watch {
		s.requests = append(s.requests, "watch rv="+q.Get("resourceVersion"))
	} else {
		s.requests = append(s.requests, "list")
	}
	s.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		case <-cut:
			panic(http.ErrAbortHandler)
		}
	}
	if failCode != 0 {
		status(w, failCode, "injected failure")
		return
	}
	// Authentication, then the Node authorizer's rule for nodes.
	user := ""
	if len(r.TLS.PeerCertificates) > 0 {
		user = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	if user == "" {
		status(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	name, isNode := strings.CutPrefix(user, "system:node:")
	if r.URL.Path != "/api/v1/nodes" {
		status(w, http.StatusNotFound, "the server could not find the requested resource")
		return
	}
	if sel := q.Get("fieldSelector"); !isNode || sel != "metadata.name="+name || name != s.node {
		status(w, http.StatusForbidden, fmt.Sprintf(`nodes is forbidden: User %q cannot list resource "nodes" in API group "" at the cluster scope: node %q cannot read all nodes, only its own Node object`, user, name))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if !watch {
		s.mu.Lock()
		items := []any{}
		if s.obj != nil {
			items = append(items, s.obj)
		}
		b, err := json.Marshal(map[string]any{"kind": "NodeList", "apiVersion": "v1",
			"metadata": map[string]any{"resourceVersion": strconv.Itoa(s.rv)}, "items": items})
		s.mu.Unlock()
		if err != nil {
			panic(err)
		}
		w.Write(b)
		return
	}
	s.watch(w, r)
}

func (s *Server) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, err := strconv.Atoi(q.Get("resourceVersion"))
	if err != nil {
		// client-go first asks for a streaming list (sendInitialEvents);
		// an apiserver without it answers so, and client-go lists.
		status(w, http.StatusBadRequest, "resourceVersion: "+err.Error())
		return
	}
	timeout := time.Hour
	if secs, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && secs > 0 {
		timeout = time.Duration(secs) * time.Second
	}
	s.mu.Lock()
	gone, goneAs := from < s.minRV, s.goneAs
	s.mu.Unlock()
	if gone && goneAs == "status" {
		status(w, http.StatusGone, "too old resource version: "+strconv.Itoa(from))
		return
	}
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	if gone {
		b, _ := json.Marshal(map[string]any{"type": "ERROR", "object": map[string]any{
			"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410, "reason": "Expired", "message": "too old resource version"}})
		w.Write(append(b, '\n'))
		return
	}
	timeUp := time.After(timeout)
	sent := from
	for {
		s.mu.Lock()
		var out bytes.Buffer
		for _, ev := range s.history {
			if ev.rv <= sent || (ev.typ == "BOOKMARK" && q.Get("allowWatchBookmarks") != "true") {
				continue
			}
			b, _ := json.Marshal(map[string]any{"type": ev.typ, "object": ev.obj})
			out.Write(append(b, '\n'))
			sent = ev.rv
		}
		changed, cut := s.changed, s.cut
		end := s.endNow || (s.endAt != 0 && sent >= s.endAt)
		s.mu.Unlock()
		if out.Len() > 0 {
			w.Write(out.Bytes())
			w.(http.Flusher).Flush()
		}
		if end {
			return
		}
		select {
		case <-changed:
		case <-cut:
			panic(http.ErrAbortHandler)
		case <-timeUp:
			return
		case <-r.Context().Done():
			return
		}
	}
}
