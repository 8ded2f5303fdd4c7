package childcaps

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLowered(t *testing.T) {
	const dac = 1<<unix.CAP_DAC_READ_SEARCH | 1<<unix.CAP_DAC_OVERRIDE
	net := uint32(1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_NET_RAW | 1<<unix.CAP_NET_BIND_SERVICE)
	cases := []struct {
		name        string
		in          [2]unix.CapUserData
		wantInh     uint32
		wantChanged bool
	}{
		{"the unit's three network capabilities only", [2]unix.CapUserData{{Permitted: net, Effective: net, Inheritable: net}}, net, false},
		{"the kubelet-credentials drop-in", [2]unix.CapUserData{{Permitted: net | 1<<unix.CAP_DAC_READ_SEARCH, Effective: net | 1<<unix.CAP_DAC_READ_SEARCH, Inheritable: net | 1<<unix.CAP_DAC_READ_SEARCH}}, net, true},
		{"both read-any-file capabilities", [2]unix.CapUserData{{Permitted: dac, Inheritable: dac}}, 0, true},
	}
	for _, tc := range cases {
		got, changed := lowered(tc.in)
		if got[0].Inheritable != tc.wantInh || changed != tc.wantChanged {
			t.Errorf("%s: inheritable %#x changed %v, want %#x %v", tc.name, got[0].Inheritable, changed, tc.wantInh, tc.wantChanged)
		}
		if got[0].Permitted != tc.in[0].Permitted || got[0].Effective != tc.in[0].Effective || got[1] != tc.in[1] {
			t.Errorf("%s: lowered changed more than the inheritable set: %+v from %+v", tc.name, got, tc.in)
		}
	}
}

// childCaps runs "cat /proc/self/status" through start and returns the
// child's inheritable and ambient sets.
func childCaps(t *testing.T, start func(*exec.Cmd) error) (inh, amb uint64) {
	t.Helper()
	var out strings.Builder
	cmd := exec.Command("cat", "/proc/self/status")
	cmd.Stdout = &out
	if err := start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(out.String()) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":\t")
		n, _ := strconv.ParseUint(v, 16, 64)
		switch k {
		case "CapInh":
			inh = n
		case "CapAmb":
			amb = n
		}
	}
	return inh, amb
}

// TestStartDropsAmbient: from a thread with CAP_DAC_READ_SEARCH
// inheritable and ambient (raised by the test, as root), a plain start
// hands it to the child; startHere does not, and leaves the network
// capabilities. Root and VIPD_NETNS_TESTS=1 only.
func TestStartDropsAmbient(t *testing.T) {
	if os.Geteuid() != 0 || os.Getenv("VIPD_NETNS_TESTS") != "1" {
		t.Skip("needs root and VIPD_NETNS_TESTS=1 (raises an ambient capability on a thread)")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the thread's capabilities change, it ends with
		// this goroutine.
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			t.Error(err)
			return
		}
		raise := []uint{unix.CAP_DAC_READ_SEARCH, unix.CAP_NET_RAW}
		for _, c := range raise {
			data[c/32].Inheritable |= 1 << (c % 32)
		}
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			t.Error(err)
			return
		}
		for _, c := range raise {
			if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c), 0, 0); err != nil {
				t.Errorf("raise ambient %d: %v", c, err)
				return
			}
		}
		const dac, raw = 1 << unix.CAP_DAC_READ_SEARCH, 1 << unix.CAP_NET_RAW
		if inh, amb := childCaps(t, (*exec.Cmd).Start); inh&dac == 0 || amb&dac == 0 {
			t.Errorf("setup: a plain start's child has inheritable %#x ambient %#x, without CAP_DAC_READ_SEARCH", inh, amb)
			return
		}
		inh, amb := childCaps(t, startHere)
		if inh&dac != 0 || amb&dac != 0 {
			t.Errorf("the child has CAP_DAC_READ_SEARCH: inheritable %#x ambient %#x", inh, amb)
		}
		if inh&raw == 0 || amb&raw == 0 {
			t.Errorf("the child lost CAP_NET_RAW: inheritable %#x ambient %#x", inh, amb)
		}
	}()
	<-done
}

func TestByName(t *testing.T) {
	for name, want := range map[string]uint{"CAP_NET_ADMIN": unix.CAP_NET_ADMIN, "CAP_NET_RAW": unix.CAP_NET_RAW,
		"CAP_CHOWN": unix.CAP_CHOWN, "CAP_CHECKPOINT_RESTORE": unix.CAP_CHECKPOINT_RESTORE, "CAP_SETUID": unix.CAP_SETUID} {
		if got, ok := ByName(name); !ok || got != want {
			t.Errorf("ByName(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
	for _, bad := range []string{"", "NET_ADMIN", "cap_net_admin", "CAP_NOPE"} {
		if _, ok := ByName(bad); ok {
			t.Errorf("ByName(%q) found a capability", bad)
		}
	}
	if len(names) != unix.CAP_LAST_CAP+1 {
		t.Errorf("%d names, want CAP_LAST_CAP+1 = %d", len(names), unix.CAP_LAST_CAP+1)
	}
}

func TestKeptOnly(t *testing.T) {
	net := uint32(1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_NET_RAW | 1<<unix.CAP_NET_BIND_SERVICE)
	in := [2]unix.CapUserData{{Permitted: net | 1<<unix.CAP_DAC_READ_SEARCH, Effective: net, Inheritable: net | 1<<unix.CAP_DAC_READ_SEARCH}, {Inheritable: 1 << (unix.CAP_BPF - 32)}}
	cases := []struct {
		name string
		keep []uint
		want [2]uint32
	}{
		{"nothing kept", nil, [2]uint32{0, 0}},
		{"CAP_NET_ADMIN kept", []uint{unix.CAP_NET_ADMIN}, [2]uint32{1 << unix.CAP_NET_ADMIN, 0}},
		{"a read-any-file capability is never kept", []uint{unix.CAP_DAC_READ_SEARCH, unix.CAP_NET_RAW}, [2]uint32{1 << unix.CAP_NET_RAW, 0}},
		{"one of the upper word", []uint{unix.CAP_BPF}, [2]uint32{0, 1 << (unix.CAP_BPF - 32)}},
		{"one the process lacks is not added", []uint{unix.CAP_SYS_ADMIN}, [2]uint32{0, 0}},
	}
	for _, tc := range cases {
		got := keptOnly(in, tc.keep)
		if got[0].Inheritable != tc.want[0] || got[1].Inheritable != tc.want[1] {
			t.Errorf("%s: inheritable %#x %#x, want %#x %#x", tc.name, got[0].Inheritable, got[1].Inheritable, tc.want[0], tc.want[1])
		}
		if got[0].Permitted != in[0].Permitted || got[0].Effective != in[0].Effective {
			t.Errorf("%s: changed more than the inheritable set", tc.name)
		}
	}
}
