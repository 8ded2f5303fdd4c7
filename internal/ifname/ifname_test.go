package ifname

import (
	"strings"
	"testing"
)

// TestCheck: the kernel's rule, name by name, and the message a refused
// one gets.
func TestCheck(t *testing.T) {
	for _, tt := range []struct{ name, want string }{
		{"eth0", ""},
		{"lo", ""},
		{"enp0s31f6.100", ""},
		{strings.Repeat("a", 15), ""},
		{"", "interface is required"},
		{strings.Repeat("a", 16), `invalid interface name "aaaaaaaaaaaaaaaa" (at most 15 bytes, no '/', ':' or white space)`},
		{".", `invalid interface name "."`},
		{"..", `invalid interface name ".."`},
		{"eth0:1", `invalid interface name "eth0:1"`},
		{"a/b", `invalid interface name "a/b"`},
		{"eth 0", `invalid interface name "eth 0"`},
		{"eth0\n", `invalid interface name "eth0\n"`},
	} {
		err := Check(tt.name)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Check(%q) = %v, want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
			t.Errorf("Check(%q) = %v, want %q", tt.name, err, tt.want)
		}
		if Valid(tt.name) != (tt.want == "") {
			t.Errorf("Valid(%q) = %v", tt.name, Valid(tt.name))
		}
	}
}
