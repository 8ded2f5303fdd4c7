package vm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// readCPIO decodes a newc archive (the reader the kernel has, in the
// test's words): names, modes, contents, and that the trailer ends it.
func readCPIO(t *testing.T, b []byte) map[string]cpioFile {
	t.Helper()
	files := map[string]cpioFile{}
	for off := 0; ; {
		if len(b)-off < 110 || string(b[off:off+6]) != "070701" {
			t.Fatalf("cpio: no newc header at %d", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("cpio: header field %d at %d: %v", i, off, err)
			}
			return int(v)
		}
		mode, size, namesize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+namesize-1])
		if b[off+110+namesize-1] != 0 {
			t.Fatalf("cpio: name %q not NUL-terminated", name)
		}
		off = (off + 110 + namesize + 3) &^ 3
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("cpio: %d bytes after the trailer", len(b)-off)
			}
			return files
		}
		data := b[off : off+size]
		off = (off + size + 3) &^ 3
		f := cpioFile{Name: name, Mode: uint32(mode) & 0o7777}
		switch uint32(mode) &^ 0o7777 {
		case cpioDir:
			f.Dir = true
		case cpioLink:
			f.Link = string(data)
		case cpioReg:
			f.Data = data
		default:
			t.Fatalf("cpio: %s: mode %o", name, mode)
		}
		if _, dup := files[name]; dup {
			t.Fatalf("cpio: %s twice", name)
		}
		files[name] = f
	}
}

func TestWriteCPIO(t *testing.T) {
	in := []cpioFile{
		{Name: "init", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
		{Name: "bin", Dir: true, Mode: 0o755},
		{Name: "bin/sh", Link: "busybox", Mode: 0o777},
		{Name: "bin/busybox", Mode: 0o755, Data: bytes.Repeat([]byte{0xAB}, 4097)},
		{Name: "etc", Dir: true, Mode: 0o755},
		{Name: "etc/empty", Mode: 0o644},
	}
	var buf bytes.Buffer
	if err := writeCPIO(&buf, in); err != nil {
		t.Fatal(err)
	}
	got := readCPIO(t, buf.Bytes())
	for _, f := range in {
		g, ok := got[f.Name]
		if !ok {
			t.Errorf("%s missing", f.Name)
			continue
		}
		if g.Mode != f.Mode || g.Dir != f.Dir || g.Link != f.Link || !bytes.Equal(g.Data, f.Data) {
			t.Errorf("%s: got %+v, want %+v", f.Name, g, f)
		}
	}
	if len(got) != len(in) {
		t.Errorf("got %d entries, want %d", len(got), len(in))
	}
	// Directories come before what they hold, as the kernel needs.
	if i, j := bytes.Index(buf.Bytes(), []byte("bin\x00")), bytes.Index(buf.Bytes(), []byte("bin/busybox\x00")); i < 0 || j < i {
		t.Errorf("bin at %d, bin/busybox at %d: the directory must come first", i, j)
	}
	if err := writeCPIO(&buf, []cpioFile{{Name: "/abs"}}); err == nil {
		t.Error("an absolute name was accepted")
	}

	// Another reader agrees: busybox cpio unpacks it.
	if _, err := os.Stat(Busybox); err != nil {
		t.Logf("no %s: busybox cpio check left out", Busybox)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(Busybox, "cpio", "-i", "-d")
	cmd.Dir, cmd.Stdin = dir, bytes.NewReader(buf.Bytes())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("busybox cpio -i: %v: %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "bin/busybox")); err != nil || len(b) != 4097 {
		t.Errorf("busybox cpio: bin/busybox: %d bytes, %v", len(b), err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "bin/sh")); err != nil || l != "busybox" {
		t.Errorf("busybox cpio: bin/sh -> %q, %v", l, err)
	}
}

// elfWithModinfo returns a minimal ELF64 relocatable holding a .modinfo
// section with the given NUL-separated strings, as a kernel module has.
func elfWithModinfo(modinfo string) []byte {
	shstr := "\x00.modinfo\x00.shstrtab\x00"
	const ehsize, shentsize = 64, 64
	infoOff := ehsize
	strOff := infoOff + len(modinfo)
	shOff := (strOff + len(shstr) + 7) &^ 7
	b := make([]byte, shOff+3*shentsize)
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = 2, 1, 1 // 64-bit, little endian, version 1
	le := binary.LittleEndian
	le.PutUint16(b[16:], 1)  // ET_REL
	le.PutUint16(b[18:], 62) // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[40:], uint64(shOff))
	le.PutUint16(b[52:], ehsize)
	le.PutUint16(b[58:], shentsize)
	le.PutUint16(b[60:], 3) // sections
	le.PutUint16(b[62:], 2) // .shstrtab index
	copy(b[infoOff:], modinfo)
	copy(b[strOff:], shstr)
	sh := func(i int, name, typ uint32, off, size int) {
		p := b[shOff+i*shentsize:]
		le.PutUint32(p[0:], name)
		le.PutUint32(p[4:], typ)
		le.PutUint64(p[24:], uint64(off))
		le.PutUint64(p[32:], uint64(size))
		le.PutUint64(p[48:], 1)
	}
	sh(1, 1, 1, infoOff, len(modinfo)) // .modinfo, PROGBITS
	sh(2, 10, 3, strOff, len(shstr))   // .shstrtab, STRTAB
	return b
}

func TestParseModinfo(t *testing.T) {
	for _, tc := range []struct {
		name, path, modinfo string
		want                ModuleInfo
	}{
		{"name and dependencies", "lib/modules/6.1.0-56-amd64/kernel/net/8021q/8021q.ko",
			"license=GPL\x00depends=mrp,garp,stp,llc\x00retpoline=Y\x00name=8021q\x00vermagic=6.1.0\x00",
			ModuleInfo{Name: "8021q", Depends: []string{"mrp", "garp", "stp", "llc"}}},
		{"no dependencies", "kernel/drivers/net/veth.ko", "depends=\x00name=veth\x00",
			ModuleInfo{Name: "veth"}},
		{"no name: from the file, dashes as underscores", "kernel/drivers/char/hw_random/virtio-rng.ko",
			"depends=virtio-ring\x00", ModuleInfo{Name: "virtio_rng", Depends: []string{"virtio_ring"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseModinfo(tc.path, elfWithModinfo(tc.modinfo))
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Path = tc.path
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := parseModinfo("x.ko", []byte("not an ELF")); err == nil {
		t.Error("garbage parsed as a module")
	}
}

func TestLoadOrder(t *testing.T) {
	index := map[string]ModuleInfo{}
	for _, line := range []string{
		"8021q:mrp,garp,stp,llc", "mrp:", "garp:stp,llc", "stp:llc", "llc:", "bridge:stp,llc",
		"bonding:tls", "tls:", "veth:", "virtio_ring:", "needs_ghost:ghost", "cyc_a:cyc_b", "cyc_b:cyc_a",
	} {
		name, deps, _ := strings.Cut(line, ":")
		m := ModuleInfo{Name: name, Path: "kernel/" + name + ".ko"}
		if deps != "" {
			m.Depends = strings.Split(deps, ",")
		}
		index[name] = m
	}
	names := func(ms []ModuleInfo) string {
		var s []string
		for _, m := range ms {
			s = append(s, m.Name)
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct {
		name    string
		want    []string
		order   string
		errLike string
	}{
		{"dependencies first, shared ones once", []string{"bridge", "8021q", "veth"}, "llc stp bridge garp mrp 8021q veth", ""},
		{"a dependency's dependencies first", []string{"8021q", "bonding"}, "llc stp garp mrp 8021q tls bonding", ""},
		{"dashes are underscores", []string{"virtio-ring"}, "virtio_ring", ""},
		{"an unknown module", []string{"veth", "nosuch"}, "", "module nosuch is not in the kernel package"},
		{"an unknown dependency names who needs it", []string{"needs_ghost"}, "", "module ghost (needed by needs_ghost)"},
		{"a cycle", []string{"cyc_a"}, "", "cycle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadOrder(index, tc.want)
			if tc.errLike != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errLike) {
					t.Fatalf("error %v, want one saying %q", err, tc.errLike)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if names(got) != tc.order {
				t.Errorf("order %q, want %q", names(got), tc.order)
			}
		})
	}
}

func TestModuleIndexRoundTrip(t *testing.T) {
	text := "8021q\tlib/modules/r/kernel/net/8021q/8021q.ko\tmrp,garp\nveth\tlib/modules/r/kernel/drivers/net/veth.ko\t\n"
	index, err := parseModuleIndex(text)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ModuleInfo{
		"8021q": {Name: "8021q", Path: "lib/modules/r/kernel/net/8021q/8021q.ko", Depends: []string{"mrp", "garp"}},
		"veth":  {Name: "veth", Path: "lib/modules/r/kernel/drivers/net/veth.ko"},
	}
	if !reflect.DeepEqual(index, want) {
		t.Errorf("got %+v, want %+v", index, want)
	}
	if _, err := parseModuleIndex("veth\tonly two\n"); err == nil || !strings.Contains(err.Error(), "modules.tsv:1") {
		t.Errorf("a short line: error %v, want one naming modules.tsv:1", err)
	}
}

func TestMountsFile(t *testing.T) {
	dir := t.TempDir()
	usr, etc := filepath.Join(dir, "usr"), filepath.Join(dir, "etc")
	for _, d := range []string{usr, etc} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Symlink("usr/bin", bin); err != nil {
		t.Fatal(err)
	}
	text, tags, err := mountsFile([]string{usr, etc, bin})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("ro h0 %s\nro h1 %s\nlink usr/bin %s\n", usr, etc, bin)
	if text != want {
		t.Errorf("mounts:\n%s\nwant:\n%s", text, want)
	}
	if !reflect.DeepEqual(tags, map[string]string{"h0": usr, "h1": etc}) {
		t.Errorf("tags %v", tags)
	}
	c := Config{Kernel: "k", Initramfs: "i", Accel: TCG, CPUs: 2, MemoryMiB: 512, Share: dir}
	args := strings.Join(c.args(tags), " ")
	for _, s := range []string{"mount_tag=h0,security_model=none,readonly=on", "path=" + etc + ",mount_tag=h1",
		"path=" + dir + ",mount_tag=vipdvm", "-accel tcg,thread=multi", "-no-reboot"} {
		if !strings.Contains(args, s) {
			t.Errorf("qemu args lack %q: %s", s, args)
		}
	}
	if _, _, err := mountsFile([]string{filepath.Join(dir, "nosuch")}); err == nil {
		t.Error("a missing directory was accepted")
	}
}

func TestInitScriptSyntax(t *testing.T) {
	sh := "sh"
	if _, err := os.Stat(Busybox); err == nil {
		sh = Busybox // what runs it in the guest
	}
	args := []string{"-n", "-c", string(initScript)}
	if sh == Busybox {
		args = append([]string{"sh"}, args...)
	}
	if out, err := exec.Command(sh, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s -n init.sh: %v: %s", sh, err, out)
	}
	// The host waits for this line to know the guest booted.
	if !strings.Contains(string(initScript), `say "running the job"`) || !strings.HasPrefix(bootedLine, "vm-init: running the job") {
		t.Errorf("init.sh no longer prints %q", bootedLine)
	}
}

func TestTopLevelResults(t *testing.T) {
	out := `=== RUN   TestA
--- PASS: TestA (1.00s)
=== RUN   TestB
    --- PASS: TestB/sub (0.10s)
--- SKIP: TestB (0.00s)
--- FAIL: TestC (2.00s)
FAIL
`
	pass, skip, fail := topLevelResults(out)
	if !reflect.DeepEqual(pass, []string{"TestA"}) || !reflect.DeepEqual(skip, []string{"TestB"}) || !reflect.DeepEqual(fail, []string{"TestC"}) {
		t.Errorf("pass %v skip %v fail %v", pass, skip, fail)
	}
}

func TestTail(t *testing.T) {
	out := `=== RUN   TestA
    a_test.go:1: a log
--- PASS: TestA (1.00s)
=== RUN   TestB
    b_test.go:1: one
    b_test.go:2: two
    netlab.go:358: ==== vipd log of n1 ====
        time=... level=INFO msg=starting
    b_test.go:3: three
--- FAIL: TestB (2.00s)
=== RUN   TestBB
--- FAIL: TestBB (0.00s)
FAIL
`
	want := "    b_test.go:2: two\n    b_test.go:3: three\n--- FAIL: TestB (2.00s)"
	if got := tail(out, "TestB", 2); got != want {
		t.Errorf("tail(TestB, 2) = %q, want %q", got, want)
	}
	if got := tail(out, "TestC", 3); got != "" {
		t.Errorf("tail of a test that never ran = %q, want nothing", got)
	}
}
