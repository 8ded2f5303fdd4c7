package apipb

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestStatusJSONStable pins the field names of `vipctl status --json`:
// scripts parse them; renaming or removing one is a breaking change, and
// a new field needs an entry in docs/operations.md.
func TestStatusJSONStable(t *testing.T) {
	since := time.Date(2026, 5, 4, 12, 3, 10, 0, time.UTC)
	st := &StatusResponse{
		Node: "cp-1", Version: "v1", Quorum: true, Healthy: true, KnownMembers: 3, AliveMembers: 2,
		Fence:   &FenceStatus{State: "held", EvidenceAgeMs: 120, ReleaseAfterMs: 3000},
		Members: []*MemberStatus{{Name: "cp-1", Address: "192.0.2.11:7946", State: "alive", Healthy: true, Self: true}},
		Vips: []*VIPStatus{{Name: "apiserver", Address: "192.0.2.10", Mode: "l2", Owner: "cp-1", Held: true, Holders: []string{"cp-1"},
			Healthy: true, Reason: "r", HealthDetail: "passing since 12:00:00",
			Eligibility: []*NodeEligibility{
				{Node: "cp-1", Eligible: true},
				{Node: "cp-2", Reason: "unhealthy", SinceUnixNano: since.UnixNano()},
			}}},
		BgpPeers: []*BGPPeerStatus{{Address: "192.0.2.1", Asn: 64512, State: "established", UptimeSeconds: 5, Received: 0, Advertised: 1,
			MaxPrefixes: 10, BfdState: "up"}},
		NodeWithdrawReasons: []string{"node cordoned"},
		Kubernetes: &KubernetesStatus{Enabled: true, Node: "cp-1", Server: "https://192.0.2.10:6443", Kubeconfig: "/etc/kubernetes/kubelet.conf",
			Reachable: true, SinceUnixNano: since.UnixNano(), Registered: true},
		Warnings: []string{"w"},
	}
	b, err := json.Marshal(st.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"node":"cp-1","version":"v1","withdrawn":false,"healthy":true,"quorum":true,` +
		`"members":[{"name":"cp-1","address":"192.0.2.11:7946","state":"alive","withdrawn":false,"healthy":true,"self":true,"node_withdrawn":false}],` +
		`"vips":[{"name":"apiserver","address":"192.0.2.10","mode":"l2","owner":"cp-1","held":true,"holders":["cp-1"],"healthy":true,"reason":"r",` +
		`"health_detail":"passing since 12:00:00","eligibility":[` +
		`{"node":"cp-1","eligible":true,"reason":"","since":null,"priority":0,"order":0,"waiting":false},` +
		`{"node":"cp-2","eligible":false,"reason":"unhealthy","since":"2026-05-04T12:03:10Z","priority":0,"order":0,"waiting":false}]}],` +
		`"bgp_peers":[{"address":"192.0.2.1","asn":64512,"state":"established","uptime_seconds":5,"received":0,"advertised":1,` +
		`"accepted":0,"max_prefixes":10,"bfd_state":"up","bfd_diagnostic":""}],` +
		`"known_members":3,"alive_members":2,"fence":{"state":"held","evidence_age_ms":120,"release_after_ms":3000},` +
		`"node_withdraw_reasons":["node cordoned"],` +
		`"kubernetes":{"explicit":false,"node":"cp-1","server":"https://192.0.2.10:6443","kubeconfig":"/etc/kubernetes/kubelet.conf",` +
		`"reachable":true,"error":"","since":"2026-05-04T12:03:10Z","registered":true,"verdict_since":null},` +
		`"warnings":["w"]}`
	if string(b) != want {
		t.Errorf("status JSON changed:\n got %s\nwant %s", b, want)
	}
	// Empty lists are [] not null; an unreported fence is an object with
	// state "".
	b, _ = json.Marshal((&StatusResponse{Node: "x", Vips: []*VIPStatus{{Name: "v"}}}).ToJSON())
	for _, s := range []string{`"members":[]`, `"bgp_peers":[]`, `"node_withdraw_reasons":[]`, `"warnings":[]`, `"kubernetes":null`, `"holders":[]`, `"eligibility":[]`, `"fence":{"state":"",`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("want %s in %s", s, b)
		}
	}
}

// TestStatusJSONRoundTrip: tools (the lab harness) decode the JSON into the
// same types and get the same values back, the eligibility time included.
func TestStatusJSONRoundTrip(t *testing.T) {
	since := time.Date(2026, 5, 4, 12, 3, 10, 500, time.UTC)
	in := (&StatusResponse{Node: "cp-1", Vips: []*VIPStatus{{Name: "apiserver",
		Eligibility: []*NodeEligibility{{Node: "cp-3", Reason: "withdrawn", SinceUnixNano: since.UnixNano()}}}}}).ToJSON()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out StatusJSON
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	v, ok := out.VIP("apiserver")
	if !ok || len(v.Eligibility) != 1 || v.Eligibility[0].Since == nil || !v.Eligibility[0].Since.Equal(since) || v.Eligibility[0].Reason != "withdrawn" {
		t.Errorf("round trip lost the eligibility: %+v", v)
	}
}

// TestStatusJSONDocumented: every field of the stable JSON has a row in
// docs/operations.md, and the table names no field the JSON lacks.
func TestStatusJSONDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(doc)
	start := strings.Index(sec, "### `vipctl status --json`")
	if start < 0 {
		t.Fatal("no status --json section in docs/operations.md")
	}
	sec = sec[start:]
	if end := strings.Index(sec[1:], "\n## "); end > 0 {
		sec = sec[:end]
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_.\\[\\]]+)` \\|").FindAllStringSubmatch(sec, -1) {
		documented[m[1]] = true
	}
	fields := jsonFields(reflect.TypeOf(StatusJSON{}), "")
	for _, f := range fields {
		if !documented[f] {
			t.Errorf("docs/operations.md does not document %s", f)
		}
		delete(documented, f)
	}
	for f := range documented {
		t.Errorf("docs/operations.md documents %s, which the JSON does not have", f)
	}
}

// jsonFields lists the paths of t's JSON fields: "vips[]", "vips[].name",
// "vips[].holders".
func jsonFields(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		path := prefix + name
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem() // an object or null
		}
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			path += "[]" // a list of objects; a list of strings is documented by its name
			ft = ft.Elem()
		}
		out = append(out, path)
		if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}) {
			out = append(out, jsonFields(ft, path+".")...)
		}
	}
	return out
}
