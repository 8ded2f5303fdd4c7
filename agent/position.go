package agent

import (
	"strconv"
	"strings"
)

// keyPos is where a key was written in a TOML file.
type keyPos struct {
	Line, Col int
}

// keyIndex maps key paths to where they were written. Paths name array
// elements with their index, for example "vip[1].address" or
// "bgp.peer[0].asn"; tables are recorded too ("vip[1]", "api").
//
// The TOML library reports positions for syntax errors (toml.ParseError)
// but keeps the positions of keys private, so vipd's own problems (type
// errors, semantic checks) are placed by this small line scanner: table
// headers, arrays of tables, key = value lines (bare, quoted and dotted
// keys) and multi-line strings and arrays, whose continuation lines it
// skips; a key inside an inline table is placed at its enclosing key.
// FuzzKeyIndex checks it against the library: every key the library parses
// is placed at a line that holds it.
type keyIndex struct {
	pos map[string]keyPos
	// plain lists indexed paths by their index-free spelling
	// ("vip.address" -> "vip[0].address", "vip[1].address"), in file order,
	// to place keys the decoder reports without an index.
	plain map[string][]string
}

func indexKeys(data []byte) *keyIndex {
	ki := &keyIndex{pos: map[string]keyPos{}, plain: map[string][]string{}}
	arrays := map[string]int{} // indexed array path -> last index
	prefix := ""
	inMultiString := ""
	depth := 0 // open brackets of a multi-line array value
	for n, line := range strings.Split(string(data), "\n") {
		lineNo := n + 1
		if inMultiString != "" {
			if strings.Contains(line, inMultiString) {
				inMultiString = ""
			}
			continue
		}
		if depth > 0 {
			depth += bracketDelta(line)
			continue
		}
		trimmed := strings.TrimSpace(line)
		col := len(line) - len(strings.TrimLeft(line, " \t")) + 1
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasPrefix(trimmed, "[") {
			isArray := strings.HasPrefix(trimmed, "[[")
			end := strings.Index(trimmed, "]")
			if end < 0 {
				continue
			}
			name := strings.Trim(trimmed[:end], "[ \t")
			parts := splitKey(name)
			path := ""
			for i, p := range parts {
				if path != "" {
					path += "."
				}
				path += p
				last := i == len(parts)-1
				if last && isArray {
					arrays[path]++
					path += "[" + strconv.Itoa(arrays[path]-1) + "]"
				} else if idx, ok := arrays[path]; ok {
					path += "[" + strconv.Itoa(idx-1) + "]"
				}
			}
			prefix = path
			ki.add(path, keyPos{lineNo, col})
			continue
		}
		eq := strings.Index(trimmed, "=")
		if eq < 0 {
			continue
		}
		key := strings.Join(splitKey(strings.TrimSpace(trimmed[:eq])), ".")
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		ki.add(path, keyPos{lineNo, col})
		value := strings.TrimSpace(trimmed[eq+1:])
		for _, q := range []string{`"""`, `'''`} {
			if strings.HasPrefix(value, q) && !strings.Contains(value[3:], q) {
				inMultiString = q
			}
		}
		if strings.HasPrefix(value, "[") {
			depth = bracketDelta(value)
		}
	}
	return ki
}

func (ki *keyIndex) add(path string, p keyPos) {
	if path == "" {
		return // "[]" or " = 1": not a key; the decoder reports the syntax error
	}
	if _, dup := ki.pos[path]; !dup {
		ki.pos[path] = p
		plain := stripIndexes(path)
		ki.plain[plain] = append(ki.plain[plain], path)
	}
}

// lookup returns where path (or, failing that, its closest enclosing table)
// was written.
func (ki *keyIndex) lookup(path string) (keyPos, bool) {
	for path != "" {
		if p, ok := ki.pos[path]; ok {
			return p, true
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return keyPos{}, false
}

// bracketDelta counts [ minus ] outside strings and comments.
func bracketDelta(s string) int {
	d := 0
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '#':
			return d
		case r == '[':
			d++
		case r == ']':
			d--
		}
	}
	return d
}

// splitKey splits a dotted TOML key, removing quotes around parts.
func splitKey(k string) []string {
	var parts []string
	var cur strings.Builder
	var quote rune
	for _, r := range k {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '.':
			parts = append(parts, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
	}
	return append(parts, strings.TrimSpace(cur.String()))
}

func stripIndexes(path string) string {
	var b strings.Builder
	skip := false
	for _, r := range path {
		switch {
		case r == '[':
			skip = true
		case r == ']':
			skip = false
		case !skip:
			b.WriteRune(r)
		}
	}
	return b.String()
}
