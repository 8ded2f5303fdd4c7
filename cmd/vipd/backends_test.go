package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vipd/vipd/bgp"
	"github.com/vipd/vipd/internal/backendconfig"
	"github.com/vipd/vipd/l2"
)

// fakeHalf is either half of a routed VIP: it records calls and answers
// Verify/Announced with what the test set.
type fakeHalf struct {
	present   bool
	err       error
	announces int
	life      time.Duration // the lifetime SetLifetime set
}

func (f *fakeHalf) Announce(context.Context, netip.Addr) error {
	f.announces++
	f.present = true
	return nil
}
func (f *fakeHalf) Withdraw(context.Context, netip.Addr) error { f.present = false; return nil }
func (f *fakeHalf) Drain(context.Context, netip.Addr) error    { return nil }
func (f *fakeHalf) Verify(context.Context, netip.Addr) (bool, error) {
	return f.present, f.err
}
func (f *fakeHalf) SetLifetime(_ context.Context, _ netip.Addr, life time.Duration) error {
	f.life = life
	return nil
}
func (f *fakeHalf) Held(netip.Addr) (bool, error) { return f.present, f.err }
func (f *fakeHalf) Announced(context.Context, netip.Addr) (bool, error) {
	return f.present, f.err
}

func TestRoutedVIPVerify(t *testing.T) {
	ctx := context.Background()
	vip := netip.MustParseAddr("203.0.113.10")
	boom := errors.New("netlink: boom")
	cases := []struct {
		name           string
		bound, routed  bool
		bindErr, rtErr error
		want           bool
		wantErr        error
	}{
		{"bound and in the rib", true, true, nil, nil, true, nil},
		{"address gone from lo", false, true, nil, nil, false, nil},
		{"path gone from the rib", true, false, nil, nil, false, nil},
		{"bind check fails", true, true, boom, nil, false, boom},
		{"rib read fails", true, true, nil, boom, false, boom},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bind := &fakeHalf{present: c.bound, err: c.bindErr}
			route := &fakeHalf{present: c.routed, err: c.rtErr}
			r := &routedVIP{bind: bind, route: route}
			got, err := r.Verify(ctx, vip)
			if got != c.want || !errors.Is(err, c.wantErr) {
				t.Fatalf("Verify = %v, %v; want %v, %v", got, err, c.want, c.wantErr)
			}
			if c.wantErr != nil || c.want {
				return
			}
			// What the agent does next: Announce restores both halves.
			if err := r.Announce(ctx, vip); err != nil {
				t.Fatal(err)
			}
			if ok, err := r.Verify(ctx, vip); !ok || err != nil || bind.announces != 1 || route.announces != 1 {
				t.Fatalf("after Announce: Verify = %v, %v; announces bind %d route %d", ok, err, bind.announces, route.announces)
			}
		})
	}
}

// TestCheckedConfigsBuildBackends: every configuration `vipd --check`
// accepts (config.Parse with backendconfig.Rules: the fuzz corpus of agent/config and the
// configurations documented in vipd.toml.example, the README and docs/)
// builds every backend the daemon builds for it at start: the BGP speaker
// and each VIP's l2 announcer. A documented configuration that is complete
// (it has [cluster] and [[vip]]) must be accepted too.
func TestCheckedConfigsBuildBackends(t *testing.T) {
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	accepted := 0
	for name, text := range checkedConfigs(t) {
		c, err := backendconfig.Rules().Parse(name, text)
		if err != nil {
			if strings.Contains(name, ".md") && bytes.Contains(text, []byte("[cluster]")) && bytes.Contains(text, []byte("[[vip]]")) {
				t.Errorf("documented configuration refused:\n%v", err)
			}
			continue
		}
		accepted++
		t.Logf("accepted: %s", name)
		if c.BGP != nil {
			if _, err := bgp.New(speakerConfig(c, lg)); err != nil {
				t.Errorf("%s: accepted, then the BGP speaker refuses it: %v", name, err)
			}
		}
		for _, v := range c.VIPs {
			a, err := l2.New(backendconfig.L2(v.L2()))
			if err != nil {
				t.Errorf("%s: vip %s accepted, then its l2 announcer refuses it: %v", name, v.Name, err)
				continue
			}
			a.Close()
		}
	}
	if accepted < 5 {
		t.Errorf("only %d configurations accepted: the test shows little", accepted)
	}
}

// checkedConfigs returns configurations by name: the fuzz corpus of
// config.Parse, vipd.toml.example and every ```toml block of the README and
// docs/*.md. Secret files they name (key_file, password_file) are replaced
// by files the test writes.
func checkedConfigs(t *testing.T) map[string][]byte {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "cluster.key")
	pass := filepath.Join(dir, "bgp.pass")
	if err := os.WriteFile(key, []byte("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pass, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := regexp.MustCompile(`(?m)^(\s*#?\s*)(key_file|password_file)(\s*=\s*)"[^"]*"`)
	withSecrets := func(b []byte) []byte {
		return secrets.ReplaceAllFunc(b, func(m []byte) []byte {
			g := secrets.FindSubmatch(m)
			path := key
			if string(g[2]) == "password_file" {
				path = pass
			}
			return []byte(fmt.Sprintf("%s%s%s%q", g[1], g[2], g[3], path))
		})
	}
	out := map[string][]byte{}
	corpus, err := filepath.Glob("../../agent/config/testdata/fuzz/FuzzParse/*")
	if err != nil || len(corpus) == 0 {
		t.Fatalf("no fuzz corpus: %v", err)
	}
	for _, p := range corpus {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		_, arg, ok := strings.Cut(string(b), "\n[]byte(")
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimSpace(arg), ")"))
		if !ok || err != nil {
			t.Fatalf("%s: not a fuzz corpus file of one []byte: %v", p, err)
		}
		out[p] = withSecrets([]byte(s))
	}
	example, err := os.ReadFile("../../vipd.toml.example")
	if err != nil {
		t.Fatal(err)
	}
	out["vipd.toml.example"] = withSecrets(example)
	docs, _ := filepath.Glob("../../docs/*.md")
	block := regexp.MustCompile("(?s)```toml\n(.*?)```")
	for _, p := range append(docs, "../../README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range block.FindAllSubmatch(b, -1) {
			out[fmt.Sprintf("%s block %d", filepath.Base(p), i+1)] = withSecrets(m[1])
		}
	}
	return out
}
