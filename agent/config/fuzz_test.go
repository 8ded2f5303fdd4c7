package config

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// FuzzParse: any input gives a config or a *ConfigError; never a panic, and
// every problem names the file. A config accepted is one the backends take:
// the speaker's configuration and every VIP's l2 configuration validate
// (what the daemon builds at start; vipd --check and start-up agree).
func FuzzParse(f *testing.F) {
	f.Add([]byte(goodConfig))
	if b, err := os.ReadFile("../../vipd.toml.example"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("[cluster]\nbind_address = \"192.0.2.300\"\n[[vip]]\nname=\"a\"\n[[vip]]\nname=\"a\"\n"))
	f.Add([]byte("[bgp]\nasn = 0\n[[bgp.peer]]\naddress = \"x\"\nhold_time = \"1s\"\n"))
	f.Add([]byte("a = \"\"\"\n[[x]]\n\"\"\"\nb = [\n1,\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := rules.Parse("fuzz.toml", data)
		if err == nil {
			if c == nil || len(c.VIPs) == 0 {
				t.Fatalf("Parse accepted a config without VIPs")
			}
			if c.BGP != nil {
				if errs := toSpeaker(c.Speaker()).Validate(); len(errs) > 0 {
					t.Fatalf("accepted, and the BGP speaker refuses it: %v", errs)
				}
			}
			for _, v := range c.VIPs {
				if err := toL2(v.L2()).Validate(); err != nil {
					t.Fatalf("accepted, and vip %s's l2 announcer refuses it: %v", v.Name, err)
				}
			}
			return
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if !strings.HasPrefix(line, "fuzz.toml") {
				t.Fatalf("problem without file name: %q", line)
			}
		}
	})
}

// FuzzKeyIndex checks the position scanner against the TOML library: for
// any file the library parses, every key the library found is placed by the
// scanner (a key inside an inline table at its enclosing key) at a line that
// holds that key (its last part, bare or quoted) or the header of its table.
// Text the library rejects must not crash it.
func FuzzKeyIndex(f *testing.F) {
	f.Add([]byte(goodConfig))
	f.Add([]byte("[[a.b]]\n[a.b.c]\n'x.y'.z = 1\n\"\"\"\n"))
	f.Add([]byte("a = 1\n[t]\n  b = \"\"\"\nx = 2\n\"\"\"\nc = [\n 1,\n]\n[[arr]]\ne = 1\n[[arr]]\n'e' = 2\n"))
	if b, err := os.ReadFile("../../vipd.toml.example"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ki := indexKeys(data)
		var generic map[string]any
		md, err := toml.Decode(string(data), &generic)
		if err != nil {
			return
		}
		lines := strings.Split(string(data), "\n")
		for _, k := range md.Keys() {
			plain := strings.Join(k, ".")
			var places []string
			for n := len(k); n > 0 && len(places) == 0; n-- {
				places = ki.plain[strings.Join(k[:n], ".")]
			}
			if len(places) == 0 {
				t.Fatalf("key %q parsed by the library is not indexed (indexed: %v)", plain, slices.Sorted(maps.Keys(ki.plain)))
			}
			last := k[len(k)-1]
			for _, path := range places {
				p := ki.pos[path]
				if p.Line < 1 || p.Line > len(lines) || p.Col < 1 || p.Col > len(lines[p.Line-1])+1 {
					t.Fatalf("key %q placed at %d:%d, outside the text", path, p.Line, p.Col)
				}
				text := lines[p.Line-1][p.Col-1:]
				if !strings.HasPrefix(text, "[") && !strings.Contains(text, last) {
					t.Fatalf("key %q placed at %d:%d, where the line is %q", path, p.Line, p.Col, lines[p.Line-1])
				}
			}
		}
	})
}
