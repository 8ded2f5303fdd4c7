package config

import (
	"strconv"
	"strings"
	"unicode/utf8"
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
// errors, semantic checks) are placed by this small scanner (keyScanner):
// table headers, arrays of tables and key = value statements (bare, quoted
// and dotted keys, escapes decoded as the decoder does); values are only
// skipped, strings of all four kinds and arrays and inline tables that
// span lines included. A key inside an inline table is placed at its
// enclosing key.
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
	sc := &keyScanner{s: string(data), line: 1}
	arrays := map[string]int{}   // indexed array path -> last index
	prefix, inTable := "", false // inTable: after a header, even [""]
	for sc.i < len(sc.s) {
		sc.skipBlank(false)
		if sc.i >= len(sc.s) {
			break
		}
		if c := sc.s[sc.i]; c == '\n' || c == '#' {
			sc.endLine()
			continue
		}
		at := sc.here()
		if sc.s[sc.i] == '[' {
			isArray := strings.HasPrefix(sc.s[sc.i:], "[[")
			sc.i++
			if isArray {
				sc.i++
			}
			parts, ok := sc.key()
			if ok && sc.peek() == ']' {
				path := ""
				for n, p := range parts {
					if n > 0 {
						path += "."
					}
					path += p
					last := n == len(parts)-1
					if last && isArray {
						arrays[path]++
						path += "[" + strconv.Itoa(arrays[path]-1) + "]"
					} else if idx, ok := arrays[path]; ok {
						path += "[" + strconv.Itoa(idx-1) + "]"
					}
				}
				prefix, inTable = path, true
				ki.add(path, at)
			}
			sc.endLine()
			continue
		}
		parts, ok := sc.key()
		if !ok || sc.peek() != '=' {
			sc.endLine() // not a key = value line; the decoder reports it
			continue
		}
		sc.i++
		path := strings.Join(parts, ".")
		if inTable {
			path = prefix + "." + path
		}
		ki.add(path, at)
		sc.skipValue()
	}
	return ki
}

// keyScanner walks TOML text for indexKeys: keys, and values only as far as
// to skip them (strings of all four kinds, arrays and inline tables that
// span lines, comments). It never fails; on text it does not understand it
// goes on at the next line, and the decoder reports the syntax error.
type keyScanner struct {
	s         string
	i         int
	line      int
	lineStart int // byte offset of the current line
}

func (sc *keyScanner) here() keyPos {
	return keyPos{sc.line, sc.i - sc.lineStart + 1}
}

func (sc *keyScanner) peek() byte {
	if sc.i < len(sc.s) {
		return sc.s[sc.i]
	}
	return 0
}

// next moves past one byte, counting lines.
func (sc *keyScanner) next() {
	if sc.s[sc.i] == '\n' {
		sc.line++
		sc.lineStart = sc.i + 1
	}
	sc.i++
}

// skipBlank skips spaces and tabs, and with lines also newlines and
// comments.
func (sc *keyScanner) skipBlank(lines bool) {
	for sc.i < len(sc.s) {
		switch sc.s[sc.i] {
		case ' ', '\t', '\r':
			sc.i++
		case '\n':
			if !lines {
				return
			}
			sc.next()
		case '#':
			if !lines {
				return
			}
			for sc.i < len(sc.s) && sc.s[sc.i] != '\n' {
				sc.i++
			}
		default:
			return
		}
	}
}

// endLine goes to the start of the next line.
func (sc *keyScanner) endLine() {
	for sc.i < len(sc.s) && sc.s[sc.i] != '\n' {
		sc.i++
	}
	if sc.i < len(sc.s) {
		sc.next()
	}
}

// key reads a dotted key (bare, "basic" with escapes, 'literal' parts) and
// the blanks after it.
func (sc *keyScanner) key() ([]string, bool) {
	var parts []string
	for {
		sc.skipBlank(false)
		var part string
		switch c := sc.peek(); {
		case c == '"':
			raw, ok := sc.quoted('"')
			if !ok {
				return nil, false
			}
			if part, ok = unescapeBasic(raw); !ok {
				return nil, false
			}
		case c == '\'':
			raw, ok := sc.quoted('\'')
			if !ok {
				return nil, false
			}
			part = raw
		default:
			j := sc.i
			for j < len(sc.s) && isBareKeyByte(sc.s[j]) {
				j++
			}
			if j == sc.i {
				return nil, false
			}
			part, sc.i = sc.s[sc.i:j], j
		}
		parts = append(parts, part)
		sc.skipBlank(false)
		if sc.peek() != '.' {
			return parts, true
		}
		sc.i++
	}
}

// quoted reads a one-line string that starts at sc.i with quote and
// returns what is between the quotes, escapes untouched.
func (sc *keyScanner) quoted(quote byte) (string, bool) {
	start := sc.i + 1
	for j := start; j < len(sc.s); j++ {
		switch c := sc.s[j]; {
		case c == '\n':
			return "", false
		case c == '\\' && quote == '"':
			j++
		case c == quote:
			sc.i = j + 1
			return sc.s[start:j], true
		}
	}
	return "", false
}

// skipValue moves past the value after "=" and the rest of its line:
// brackets and braces nest across lines, strings and comments hide them.
func (sc *keyScanner) skipValue() {
	depth := 0
	for sc.i < len(sc.s) {
		switch c := sc.s[sc.i]; c {
		case '\n':
			sc.next()
			if depth <= 0 {
				return
			}
		case '#':
			for sc.i < len(sc.s) && sc.s[sc.i] != '\n' {
				sc.i++
			}
		case '"', '\'':
			sc.skipString(c)
		case '[', '{':
			depth++
			sc.i++
		case ']', '}':
			depth--
			sc.i++
		default:
			sc.i++
		}
	}
}

// skipString moves past a string of either kind, one-line or multi-line
// (whose closing quotes may be followed by up to two more of the same).
func (sc *keyScanner) skipString(quote byte) {
	q3 := strings.Repeat(string(quote), 3)
	if strings.HasPrefix(sc.s[sc.i:], q3) {
		sc.i += 3
		for sc.i < len(sc.s) {
			switch {
			case sc.s[sc.i] == '\\' && quote == '"' && sc.i+1 < len(sc.s):
				sc.i++
				sc.next()
			case strings.HasPrefix(sc.s[sc.i:], q3):
				sc.i += 3
				for n := 0; n < 2 && sc.peek() == quote; n++ {
					sc.i++
				}
				return
			default:
				sc.next()
			}
		}
		return
	}
	sc.i++
	for sc.i < len(sc.s) {
		switch c := sc.s[sc.i]; {
		case c == '\n':
			return // unterminated; the decoder reports it
		case c == '\\' && quote == '"' && sc.i+1 < len(sc.s) && sc.s[sc.i+1] != '\n':
			sc.i += 2
		case c == quote:
			sc.i++
			return
		default:
			sc.i++
		}
	}
}

func isBareKeyByte(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// unescapeBasic decodes the escapes of a TOML basic string (TOML 1.1, as
// the decoder reads it).
func unescapeBasic(raw string) (string, bool) {
	if !strings.Contains(raw, "\\") {
		return raw, true
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			b.WriteByte(raw[i])
			continue
		}
		if i+1 >= len(raw) {
			return "", false
		}
		i++
		hex := 0
		switch raw[i] {
		case 'b':
			b.WriteByte('\b')
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'f':
			b.WriteByte('\f')
		case 'r':
			b.WriteByte('\r')
		case 'e':
			b.WriteByte(0x1b)
		case '"', '\\':
			b.WriteByte(raw[i])
		case 'x':
			hex = 2
		case 'u':
			hex = 4
		case 'U':
			hex = 8
		default:
			return "", false
		}
		if hex > 0 {
			if i+hex >= len(raw) {
				return "", false
			}
			n, err := strconv.ParseUint(raw[i+1:i+1+hex], 16, 32)
			if err != nil || !utf8.ValidRune(rune(n)) {
				return "", false
			}
			b.WriteRune(rune(n))
			i += hex
		}
	}
	return b.String(), true
}

func (ki *keyIndex) add(path string, p keyPos) {
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
