package netlab

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/vipd/vipd/internal/netnstest"
)

// InNamespace runs f on an OS thread switched into h's network namespace,
// so sockets f creates (net.Dial, net.ListenPacket) live there and keep
// living there after f returns (netnstest.In: the thread is thrown away
// afterwards, and f must not start goroutines that create sockets).
func (l *Lab) InNamespace(h *Host, f func() error) error {
	return netnstest.In(h.NS, f)
}

// ErrKernelLacks is wrapped by the errors of BondVLANSupport that say the
// kernel lacks a feature (rather than that the probe failed).
var ErrKernelLacks = errors.New("this kernel lacks a feature the lab needs")

// SkipUnlessBondVLAN skips t unless this kernel creates bonds and 802.1Q
// VLAN interfaces (BondVLANSupport), which Options.BondVLAN needs.
func SkipUnlessBondVLAN(t testing.TB) {
	t.Helper()
	SkipUnlessEnabled(t)
	if err := BondVLANSupport(); errors.Is(err, ErrKernelLacks) {
		t.Skipf("%v (make test runs this lab in a VM with Debian's kernel instead: lab/vm)", err)
	} else if err != nil {
		t.Fatal(err)
	}
}

// BondVLANSupport returns nil when this kernel creates bonds and 802.1Q
// VLAN interfaces (CONFIG_BONDING, CONFIG_VLAN_8021Q, built in or loaded
// on demand), an error wrapping ErrKernelLacks when it does not. It tries
// both in a scratch namespace of its own, removed before it returns. It
// needs root and ip(8).
func BondVLANSupport() error {
	ns := fmt.Sprintf("vt-%d-probe-bond", os.Getpid())
	if _, err := Run("ip", "netns", "add", ns); err != nil {
		return fmt.Errorf("netlab: %w", err)
	}
	defer Run("ip", "netns", "del", ns)
	if _, err := Run("ip", "-n", ns, "link", "add", "bond0", "type", "bond", "mode", "active-backup"); err != nil {
		return fmt.Errorf("%w: no bond interface (CONFIG_BONDING): %v", ErrKernelLacks, err)
	}
	if _, err := Run("ip", "-n", ns, "link", "add", "link", "bond0", "name", "bond0.100", "type", "vlan", "id", "100"); err != nil {
		return fmt.Errorf("%w: no 802.1Q VLAN interface (CONFIG_VLAN_8021Q): %v", ErrKernelLacks, err)
	}
	return nil
}
