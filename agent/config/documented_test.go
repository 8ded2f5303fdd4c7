package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/vipd/vipd/bgp"
	"github.com/vipd/vipd/nodewatch"
)

// documentation returns vipd.toml.example and docs/configuration.md.
func documentation(t *testing.T) (example, ref []byte) {
	t.Helper()
	example, err := os.ReadFile("../../vipd.toml.example")
	if err != nil {
		t.Fatal(err)
	}
	ref, err = os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	return example, ref
}

// TestEveryKeyIsDocumented keeps vipd.toml.example and
// docs/configuration.md in step with the code.
func TestEveryKeyIsDocumented(t *testing.T) {
	example, ref := documentation(t)
	keys := Keys()
	if len(keys) < 30 {
		t.Fatalf("found only %d keys; reflection broke", len(keys))
	}
	// The example documents a key as "key = ..." (possibly commented out)
	// under its table header.
	sections := exampleSections(string(example))
	for _, k := range keys {
		table, leaf := "", k
		if i := strings.LastIndex(k, "."); i >= 0 {
			table, leaf = k[:i], k[i+1:]
		}
		if !sections[table][leaf] {
			t.Errorf("vipd.toml.example does not document %s", k)
		}
		if !strings.Contains(string(ref), "`"+k+"`") {
			t.Errorf("docs/configuration.md does not document %s", k)
		}
	}
	// And nothing documented that the code does not know.
	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
	}
	for _, m := range regexp.MustCompile("\\| `([a-z_.]+)` \\|").FindAllStringSubmatch(string(ref), -1) {
		if !known[m[1]] {
			t.Errorf("docs/configuration.md documents unknown key %s", m[1])
		}
	}
}

// exampleSections maps table ("", "cluster", "vip.health", "bgp.peer") to
// the keys written (or commented out) under it.
func exampleSections(text string) map[string]map[string]bool {
	out := map[string]map[string]bool{"": {}}
	walkExample(text, func(table, key string, _ []string) {
		if out[table] == nil {
			out[table] = map[string]bool{}
		}
		if key != "" {
			out[table][key] = true
		}
	})
	return out
}

// walkExample calls f for every table header of the example (key "") and
// for every key written or commented out under it, with the comment lines
// right above the key.
func walkExample(text string, f func(table, key string, comment []string)) {
	cur := ""
	header := regexp.MustCompile(`^#?\s*\[\[?([a-z0-9_.]+)\]\]?\s*$`)
	kv := regexp.MustCompile(`^#?\s*#?\s*([a-z_]+)\s*=`)
	var comment []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if m := header.FindStringSubmatch(line); m != nil {
			cur, comment = m[1], nil
			f(cur, "", nil)
			continue
		}
		if m := kv.FindStringSubmatch(line); m != nil {
			f(cur, m[1], comment)
			comment = nil
			continue
		}
		if strings.HasPrefix(line, "#") {
			comment = append(comment, line)
		} else {
			comment = nil
		}
	}
}

// TestDocumentedDefaults keeps the defaults written in vipd.toml.example
// ("[300ms]" in the comment above a key) and docs/configuration.md (the
// table's default column) equal to the ones the code applies.
func TestDocumentedDefaults(t *testing.T) {
	example, ref := documentation(t)
	d := func(v time.Duration) string {
		if v%time.Second == 0 {
			return fmt.Sprintf("%ds", int(v/time.Second))
		}
		return v.String()
	}
	defaults := map[string]string{
		"cluster.bind_port":        strconv.Itoa(DefaultBindPort),
		"cluster.rejoin_interval":  d(DefaultRejoinInterval),
		"cluster.handoff_timeout":  d(DefaultHandoffTimeout),
		"cluster.restart_grace":    d(DefaultRestartGrace),
		"vip.health.interval":      d(DefaultHealthInterval),
		"vip.health.timeout":       d(DefaultHealthTimeout),
		"vip.health.rise":          strconv.Itoa(DefaultHealthRise),
		"vip.health.fall":          strconv.Itoa(DefaultHealthFall),
		"bgp.graceful_shutdown":    d(DefaultGracefulShutdown),
		"bgp.peer.hold_time":       d(bgp.DefaultHoldTime),
		"bgp.listen_port":          strconv.Itoa(DefaultBGPListenPort),
		"connections.reset":        "true",
		"connections.poke_rate":    strconv.Itoa(DefaultPokeRate),
		"connections.poke_timeout": d(DefaultPokeTimeout),
		"l2.refresh_interval":      d(DefaultL2RefreshInterval),
		"hooks.timeout":            d(DefaultHookTimeout),
	}
	bracketed := exampleDefaults(string(example))
	for key, want := range defaults {
		if got, ok := bracketed[key]; !ok {
			t.Errorf("vipd.toml.example: no [default] in the comment above %s", key)
		} else if got != want {
			t.Errorf("vipd.toml.example: %s documented as [%s], the code's default is %s", key, got, want)
		}
		row := regexp.MustCompile("\\| `" + regexp.QuoteMeta(key) + "` \\| `([^`]*)` \\|").FindStringSubmatch(string(ref))
		if row == nil {
			t.Errorf("docs/configuration.md: no row with a default for %s", key)
		} else if row[1] != want {
			t.Errorf("docs/configuration.md: %s documented as %s, the code's default is %s", key, row[1], want)
		}
	}
	// The kubelet kubeconfigs looked for, in the order they are.
	paths := nodewatch.DefaultKubeconfigs()
	if got, want := bracketed["kubernetes.kubeconfig"], strings.Join(paths, ", "); got != want {
		t.Errorf("vipd.toml.example: kubernetes.kubeconfig documented as [%s], the code's default is %s", got, want)
	}
	row := regexp.MustCompile("(?m)^\\| `kubernetes\\.kubeconfig` \\|.*$").FindString(string(ref))
	at := -1
	for _, p := range paths {
		i := strings.Index(row, "`"+p+"`")
		if i <= at {
			t.Errorf("docs/configuration.md: the kubernetes.kubeconfig row does not name %s after the ones before it: %s", p, row)
		}
		at = i
	}
}

// exampleDefaults maps key paths to the last "[...]" of the comment lines
// right above the key in the example.
func exampleDefaults(text string) map[string]string {
	out := map[string]string{}
	bracket := regexp.MustCompile(`\[([^\]]+)\]`)
	walkExample(text, func(table, key string, comment []string) {
		if key == "" {
			return
		}
		if table != "" {
			key = table + "." + key
		}
		for i := len(comment) - 1; i >= 0; i-- {
			if b := bracket.FindAllStringSubmatch(comment[i], -1); b != nil {
				out[key] = b[len(b)-1][1]
				return
			}
		}
	})
	return out
}

// uncommentExample turns the example's commented-out settings on: a block
// that starts with a commented table header ("# [bgp]", "# [[vip]]") is
// uncommented line by line up to the next blank or uncommented line (its
// own comments are written "# # ..."), and elsewhere a commented
// "# key = value" line is.
func uncommentExample(text string) string {
	var out []string
	inBlock := false
	key := regexp.MustCompile(`^# [a-z_]+ = `)
	header := regexp.MustCompile(`^# \[\[?[a-z][a-z0-9.]*\]\]?$`)
	for _, line := range strings.Split(text, "\n") {
		switch {
		case header.MatchString(line):
			inBlock = true
		case line == "" || !strings.HasPrefix(line, "#"):
			inBlock = false
		}
		switch {
		case inBlock && line == "#":
			line = ""
		case inBlock:
			line = strings.TrimPrefix(line, "# ")
		case key.MatchString(line):
			line = strings.TrimPrefix(line, "# ")
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// TestExampleUncommented: the example's commented-out blocks and keys,
// uncommented as an operator would, are valid TOML whose keys and types
// are vipd's (secret files and the host aside).
func TestExampleUncommented(t *testing.T) {
	example, _ := documentation(t)
	text := uncommentExample(string(example))
	if strings.Count(text, "\n[") <= strings.Count(string(example), "\n[") {
		t.Fatal("uncommenting turned no table on; the example's convention changed?")
	}
	var generic map[string]any
	if _, err := toml.Decode(text, &generic); err != nil {
		t.Fatalf("the example, uncommented, is not TOML: %v", err)
	}
	v := &validator{path: "vipd.toml.example (uncommented)", keys: indexKeys([]byte(text))}
	v.checkTypes(generic, reflect.TypeOf(Config{}), "")
	var c Config
	md, err := toml.Decode(text, &c)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range md.Undecoded() {
		v.unknownKey(k)
	}
	for _, p := range v.problems {
		t.Error(p)
	}
}
