// Package ifname holds the kernel's rule for network interface names
// (dev_valid_name in net/core/dev.c): the one place the l2 announcers and
// the configuration check a name, so that a file vipd --check accepts
// names only interfaces an announcer can be built for.
package ifname

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Check reports what is wrong with name as an interface name, or nil: it
// must not be empty, ".", or "..", must be shorter than IFNAMSIZ (16, with
// the terminating NUL) and must hold no '/', ':' or white space.
func Check(name string) error {
	if name == "" {
		return errors.New("interface is required")
	}
	if !Valid(name) {
		return fmt.Errorf("invalid interface name %q (at most 15 bytes, no '/', ':' or white space)", name)
	}
	return nil
}

// Valid reports whether the kernel takes name for an interface.
func Valid(name string) bool {
	return name != "" && len(name) < unix.IFNAMSIZ && name != "." && name != ".." && !strings.ContainsAny(name, "/: \t\n\v\f\r")
}
