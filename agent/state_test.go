package agent

import (
	"bytes"
	"encoding/binary"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vipd/vipd/agent/config"
)

func TestMetaRoundTrip(t *testing.T) {
	in := NodeMeta{Valid: true, Withdrawn: true, Leaving: true, VIPs: map[uint32]VIPMeta{
		config.VIPKey("a"): {Healthy: true}, config.VIPKey("b"): {Held: true}, config.VIPKey("c"): {Healthy: true, Held: true},
	}}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Valid || !out.Withdrawn || !out.Leaving || len(out.VIPs) != 3 || out.VIP(config.VIPKey("c")) != (VIPMeta{Healthy: true, Held: true}) || out.VIP(config.VIPKey("b")) != (VIPMeta{Held: true}) {
		t.Errorf("round trip: %+v", out)
	}
	b2, _ := out.Encode()
	if !bytes.Equal(b, b2) {
		t.Errorf("encoding not stable: %x vs %x", b, b2)
	}
}

func TestMetaFitsMaxVIPs(t *testing.T) {
	m := NodeMeta{Valid: true, VIPs: map[uint32]VIPMeta{}}
	for i := 0; i < config.MaxVIPs; i++ {
		m.VIPs[uint32(i)] = VIPMeta{Healthy: true, Held: true}
	}
	b, err := m.Encode()
	if err != nil || len(b) > 512 {
		t.Fatalf("%d VIPs: %d bytes, %v", config.MaxVIPs, len(b), err)
	}
	for i := 0; i < 3; i++ {
		m.VIPs[uint32(9000+i)] = VIPMeta{Held: true}
	}
	if _, err := m.Encode(); err == nil {
		t.Errorf("metadata over 512 bytes encoded without error")
	}
}

// metaV2 encodes m the way a later version (2) might: with flag bits and
// per-VIP fields this release does not know, and trailing fields.
func metaV2(m NodeMeta) []byte {
	b := []byte{2, 0, byte(len(m.VIPs)), 8} // 8-byte entries (every node flag bit is known now)
	if m.Withdrawn {
		b[1] |= metaFlagWithdraw
	}
	if m.Leaving {
		b[1] |= metaFlagLeaving
	}
	for _, k := range slices.Sorted(maps.Keys(m.VIPs)) {
		v := m.VIPs[k]
		f := byte(0) // (every VIP flag bit is known now: 4-7 are forwarding, lingering, ending a lingering, waiting)
		if v.Healthy {
			f |= vipFlagHealthy
		}
		if v.Held {
			f |= vipFlagHeld
		}
		if v.Down {
			f |= vipFlagDown
		}
		b = binary.BigEndian.AppendUint32(b, k)
		b = append(b, f, 0xaa, 0xbb, 0xcc) // three bytes of a later per-VIP field
	}
	return append(b, []byte("later fields")...)
}

// oldReleaseView is what a release from before the Node watch reads of
// metadata b: its DecodeMeta read only the flag bits it knew (0-3 of the
// node's flags, 0-2 of a VIP's) and ignored the others, which is DecodeMeta
// on b with those bits cleared.
func oldReleaseView(t *testing.T, b []byte) NodeMeta {
	t.Helper()
	b = bytes.Clone(b)
	if b[0] != metaVersion {
		t.Fatalf("version %d: the previous release reads version 1 only", b[0])
	}
	b[1] &= metaFlagWithdraw | metaFlagLeaving | metaFlagFenced | metaFlagRemoved
	for p := 2; p+5 <= len(b); p += 5 {
		b[p+4] &= vipFlagHealthy | vipFlagHeld | vipFlagDown
	}
	m, err := DecodeMeta(b)
	if err != nil {
		t.Fatalf("the previous release cannot read %x: %v", b, err)
	}
	return m
}

// TestMetaNodeWithdrawnAsOldReleaseReadsIt: during a rolling upgrade,
// nodes of the previous release read the metadata of nodes their Node
// withdraws as unhealthy (not as eligible), so they elect the owner this
// release elects whenever a healthy node that is not withdrawn by its Node
// exists, and keep a holder when every healthy node is withdrawn by its
// Node, as this release does.
func TestMetaNodeWithdrawnAsOldReleaseReadsIt(t *testing.T) {
	m := NodeMeta{Valid: true, NodeWithdrawn: true, VIPs: map[uint32]VIPMeta{config.VIPKey("api"): {Healthy: true, Held: true}}}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := DecodeMeta(b); !got.NodeWithdrawn || !got.VIP(config.VIPKey("api")).Healthy {
		t.Errorf("this release reads %+v, want withdrawn by its Node and healthy", got)
	}
	if old := oldReleaseView(t, b); old.NodeWithdrawn || old.Withdrawn || old.VIP(config.VIPKey("api")).Healthy || !old.VIP(config.VIPKey("api")).Held {
		t.Errorf("the previous release reads %+v, want a holder that is unhealthy (and no withdraw flag: it would be ineligible even at bootstrap)", old)
	}
	// Elect over members without NodeWithdrawn applies the previous
	// release's rules (healthy, else alive and not withdrawn).
	situations := map[string][]Member{
		"owner cordoned":           {node("cp-1", holds, cordoned), node("cp-2"), node("cp-3")},
		"a successor cordoned too": {node("cp-1", holds, cordoned), node("cp-2", cordoned), node("cp-3")},
		"all cordoned":             {node("cp-1", cordoned), node("cp-2", holds, cordoned), node("cp-3", cordoned)},
		"cordoned healthy holder, the others unhealthy": {node("cp-1", holds, cordoned), node("cp-2", unhealthy), node("cp-3", unhealthy)},
		"nobody cordoned": {node("cp-1"), node("cp-2", holds), node("cp-3")},
	}
	for name, ms := range situations {
		var old []Member
		for _, m := range ms {
			b, err := m.Meta.Encode()
			if err != nil {
				t.Fatal(err)
			}
			old = append(old, Member{Name: m.Name, State: m.State, Meta: oldReleaseView(t, b)})
		}
		vip := ElectionVIP{Name: "api"}
		if now, then := Elect(ms, vip).Owner, Elect(old, vip).Owner; now != then || now == "" {
			t.Errorf("%s: this release elects %q, the previous one %q", name, now, then)
		}
	}
}

// TestDecodeMetaNewerVersion: metadata of a later version decodes to its
// known fields; unknown flags, per-VIP fields and trailing fields are
// ignored.
func TestDecodeMetaNewerVersion(t *testing.T) {
	want := NodeMeta{Valid: true, Withdrawn: true, VIPs: map[uint32]VIPMeta{
		config.VIPKey("a"): {Healthy: true}, config.VIPKey("b"): {Held: true, Healthy: true}, config.VIPKey("c"): {Down: true},
	}}
	got, err := DecodeMeta(metaV2(want))
	if err != nil {
		t.Fatalf("decode version 2: %v", err)
	}
	if !got.Valid || got.Withdrawn != want.Withdrawn || got.Leaving || got.NodeWithdrawn || got.RestartAware || got.RestartGrace != 0 ||
		!maps.Equal(got.VIPs, want.VIPs) {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	for name, b := range map[string][]byte{
		"header cut":           {2, 0, 1},
		"entries overrun":      {2, 0, 3, 5, 0, 0, 0, 1, 1},
		"entry shorter than 5": {7, 0, 1, 4, 0, 0, 0, 1},
		"version 0":            {0, 0},
	} {
		if m, err := DecodeMeta(b); err == nil || m.Valid {
			t.Errorf("%s: DecodeMeta(%x) = %+v, %v; want an error", name, b, m, err)
		}
	}
}

// TestMetaRestart: restart-aware is a flag of version 1; restarting is
// written as version 2 with the grace after the entries (which the
// previous release reads, ignoring both); without them the bytes are
// exactly version 1's, as before.
func TestMetaRestart(t *testing.T) {
	vips := map[uint32]VIPMeta{config.VIPKey("a"): {Healthy: true, Held: true}}
	plain, err := NodeMeta{Valid: true, VIPs: vips}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	aware, err := NodeMeta{Valid: true, RestartAware: true, VIPs: vips}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if aware[0] != 1 || aware[1] != metaFlagAware || !bytes.Equal(aware[2:], plain[2:]) {
		t.Errorf("restart-aware metadata %x, want version 1 %x with flag bit 5", aware, plain)
	}
	in := NodeMeta{Valid: true, RestartAware: true, RestartGrace: 3 * time.Second, VIPs: vips}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 2 || b[1] != metaFlagAware|metaFlagRestart || b[2] != 1 || b[3] != 5 || binary.BigEndian.Uint32(b[len(b)-4:]) != 3000 {
		t.Errorf("restarting metadata %x, want version 2: flags, 1 entry of 5 bytes, then 3000 (ms)", b)
	}
	out, err := DecodeMeta(b)
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Errorf("round trip %+v -> %+v, %v", in, out, err)
	}
	// Everything the previous release reads of it (its flags, the entries)
	// is as before.
	if out.Withdrawn || out.Leaving || out.Fenced || out.Removed || !maps.Equal(out.VIPs, vips) {
		t.Errorf("restarting changed the fields every release reads: %+v", out)
	}
	for name, bad := range map[string][]byte{
		"restarting without a grace": b[:len(b)-4],
		"restarting with grace 0":    append(slices.Clone(b[:len(b)-4]), 0, 0, 0, 0),
	} {
		if m, err := DecodeMeta(bad); err == nil || m.Valid {
			t.Errorf("%s: DecodeMeta(%x) = %+v, %v; want an error", name, bad, m, err)
		}
	}
	m := NodeMeta{Valid: true, RestartGrace: time.Minute, VIPs: map[uint32]VIPMeta{}}
	for i := 0; i < config.MaxVIPs; i++ {
		m.VIPs[uint32(i)] = VIPMeta{Healthy: true, Held: true}
	}
	if b, err := m.Encode(); err != nil || len(b) > metaMaxSize {
		t.Errorf("restarting with %d VIPs: %d bytes, %v", config.MaxVIPs, len(b), err)
	}
}

// TestMetaFlagBits pins the node flags to their wire bits (the Node
// watch's withdrawn-by-its-Node is bit 4; restart-aware and restarting came
// after it, bits 5 and 6) and round-trips every combination of them, so
// no two fields share a bit.
func TestMetaFlagBits(t *testing.T) {
	vips := map[uint32]VIPMeta{config.VIPKey("a"): {Healthy: true, Held: true}}
	for name, tt := range map[string]struct {
		m       NodeMeta
		version byte
		flags   byte
	}{
		"withdrawn":             {NodeMeta{Withdrawn: true}, 1, 1 << 0},
		"leaving":               {NodeMeta{Leaving: true}, 1, 1 << 1},
		"fenced":                {NodeMeta{Fenced: true}, 1, 1 << 2},
		"removed":               {NodeMeta{Removed: true}, 1, 1 << 3},
		"withdrawn by its Node": {NodeMeta{NodeWithdrawn: true}, 1, 1 << 4},
		"restart-aware":         {NodeMeta{RestartAware: true}, 1, 1 << 5},
		"restarting":            {NodeMeta{RestartGrace: time.Second}, 2, 1 << 6},
	} {
		tt.m.Valid, tt.m.VIPs = true, vips
		b, err := tt.m.Encode()
		if err != nil || b[0] != tt.version || b[1] != tt.flags {
			t.Errorf("%s: encoded %x (%v), want version %d with flags %#02x", name, b, err, tt.version, tt.flags)
		}
	}
	for i := 0; i < 1<<7; i++ {
		in := NodeMeta{Valid: true, Withdrawn: i&1 != 0, Leaving: i&2 != 0, Fenced: i&4 != 0, Removed: i&8 != 0,
			NodeWithdrawn: i&16 != 0, RestartAware: i&32 != 0, VIPs: vips}
		if i&64 != 0 {
			in.RestartGrace = 2500 * time.Millisecond
		}
		b, err := in.Encode()
		if err != nil {
			t.Fatalf("%+v: %v", in, err)
		}
		if out, err := DecodeMeta(b); err != nil || !reflect.DeepEqual(out, in) {
			t.Errorf("round trip %+v -> %x -> %+v, %v", in, b, out, err)
		}
	}
}

func TestDecodeMetaGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {1}, {1, 0, 1, 2, 3}, {2, 0}, bytes.Repeat([]byte{0xff}, 40)} {
		if m, err := DecodeMeta(b); err == nil || m.Valid {
			t.Errorf("DecodeMeta(%x) = %+v, %v; want error and invalid", b, m, err)
		}
	}
}

func TestPeerCacheRoundTripAndAtomicWrite(t *testing.T) {
	dir := t.TempDir()
	if got, err := loadPeerCache(dir); err != nil || got != nil {
		t.Fatalf("missing cache: %v, %v", got, err)
	}
	peers := []CachedPeer{{"cp-2", "192.0.2.12:7946"}, {"cp-1", "192.0.2.11:7946"}}
	if err := savePeerCache(dir, peers); err != nil {
		t.Fatal(err)
	}
	got, err := loadPeerCache(dir)
	if err != nil || len(got) != 2 || got[0].Name != "cp-1" || got[1].Address != "192.0.2.12:7946" {
		t.Fatalf("loadPeerCache = %v, %v", got, err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

func TestCorruptPeerCacheIsSetAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, peersFile)
	if err := os.WriteFile(path, []byte(`{"version":1,"peers":[{"name":`), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := loadPeerCache(dir)
	if err == nil || got != nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("corrupt cache: %v, %v", got, err)
	}
	if _, err := os.Stat(path + ".corrupt"); err != nil {
		t.Errorf("corrupt cache not set aside: %v", err)
	}
	if got, err := loadPeerCache(dir); err != nil || got != nil {
		t.Errorf("after setting aside: %v, %v; want empty cache", got, err)
	}
}

func TestWithdrawFlag(t *testing.T) {
	dir := t.TempDir()
	if s := loadWithdraw(dir); s.Withdrawn || s.Corrupt != nil {
		t.Fatalf("fresh state: %+v", s)
	}
	if err := saveWithdraw(dir, true); err != nil {
		t.Fatal(err)
	}
	if s := loadWithdraw(dir); !s.Withdrawn || s.Corrupt != nil {
		t.Fatalf("after withdraw: %+v", s)
	}
	if err := saveWithdraw(dir, false); err != nil {
		t.Fatal(err)
	}
	if s := loadWithdraw(dir); s.Withdrawn {
		t.Fatalf("after restore: %+v", s)
	}
	if err := saveWithdraw(dir, false); err != nil {
		t.Errorf("restore twice: %v", err)
	}
}

func TestCorruptWithdrawFlagFailsSafe(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, withdrawFile), []byte("\x00\x13garbage"), 0o640); err != nil {
		t.Fatal(err)
	}
	s := loadWithdraw(dir)
	if !s.Withdrawn || s.Corrupt == nil {
		t.Errorf("corrupt flag: %+v; want withdrawn with an error", s)
	}
	// A flag that cannot be read (a directory in its place) also fails safe.
	dir2 := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir2, withdrawFile), 0o750); err != nil {
		t.Fatal(err)
	}
	if s := loadWithdraw(dir2); !s.Withdrawn || s.Corrupt == nil {
		t.Errorf("unreadable flag: %+v; want withdrawn with an error", s)
	}
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }

// TestPeerCacheDropsInvalidEntries: entries that no admitted member could
// have produced (empty or garbage names and addresses) are not loaded, so
// they count neither towards quorum nor as rejoin targets.
func TestPeerCacheDropsInvalidEntries(t *testing.T) {
	dir := t.TempDir()
	text := `{"version":1,"peers":[{"name":"cp-2","address":"192.0.2.12:7946"},{"name":"","address":"192.0.2.13:7946"},{"name":"cp-4","address":"not-an-addr"},{"name":"x\nINFO","address":"192.0.2.14:7946"},{"name":"cp-5","address":""}]}`
	if err := os.WriteFile(filepath.Join(dir, peersFile), []byte(text), 0o640); err != nil {
		t.Fatal(err)
	}
	peers, err := loadPeerCache(dir)
	if err == nil {
		t.Errorf("invalid entries dropped silently")
	}
	if len(peers) != 1 || peers[0].Name != "cp-2" {
		t.Errorf("loaded %v, want only cp-2", peers)
	}
}

// TestMetaForwardingBit: a VIP's forwarding flag is bit 4 of its flags
// byte and survives a round trip; a release that reads only bits 0-3 sees
// the same holder (the bit is ignored, not taken for another).
func TestMetaForwardingBit(t *testing.T) {
	k := config.VIPKey("a")
	in := NodeMeta{Valid: true, VIPs: map[uint32]VIPMeta{k: {Healthy: true, Held: true, Forwarding: true}}}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if f := b[len(b)-1]; f != vipFlagHealthy|vipFlagHeld|1<<4 {
		t.Errorf("flags byte %#02x, want healthy, held and bit 4", f)
	}
	out, err := DecodeMeta(b)
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Errorf("round trip %+v -> %x -> %+v, %v", in, b, out, err)
	}
	old := b[len(b)-1] & 0x0f // what a release before the bit reads
	if old != vipFlagHealthy|vipFlagHeld {
		t.Errorf("without bit 4: %#02x, want healthy and held", old)
	}
}
