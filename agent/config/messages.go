package config

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// encodingProblem finds what keeps data from being read as UTF-8 TOML
// text before the TOML library sees it: a UTF-16 byte-order mark (the
// library skips it and may then read the file) and NUL bytes (which the
// library places on the line before when one starts a line).
func encodingProblem(data []byte) (Problem, bool) {
	if bytes.HasPrefix(data, []byte{0xff, 0xfe}) || bytes.HasPrefix(data, []byte{0xfe, 0xff}) {
		return Problem{Line: 1, Col: 1, Msg: "the file starts with a UTF-16 byte-order mark: vipd reads UTF-8 (iconv -f UTF-16 -t UTF-8 FILE > FILE.new, then move it into place)"}, true
	}
	i := bytes.IndexByte(data, 0)
	if i < 0 {
		return Problem{}, false
	}
	line := 1 + bytes.Count(data[:i], []byte{'\n'})
	col := i - (bytes.LastIndexByte(data[:i], '\n') + 1) + 1
	return Problem{Line: line, Col: col, Msg: "a NUL byte: TOML files are UTF-8 text (was the file saved as UTF-16, or is it not the configuration?)"}, true
}

// syntaxProblem is the TOML library's error as a Problem: the key it was
// reading named, and a key written twice told where it was first.
func (v *validator) syntaxProblem(data []byte, pe toml.ParseError) Problem {
	p := Problem{Path: v.path, Line: pe.Position.Line, Col: pe.Position.Col, Msg: pe.Message}
	if key, ok := strings.CutPrefix(pe.Message, "Key '"); ok && strings.HasSuffix(key, "' has already been defined.") {
		key = strings.TrimSuffix(key, "' has already been defined.")
		p.Col = firstColumn(data, p.Line)
		p.Msg = key + ": written twice"
		// The first writing is the last one before this line (an earlier
		// [[vip]] has a key of the same name of its own).
		var first keyPos
		for _, path := range v.keys.plain[key] {
			if at := v.keys.pos[path]; at.Line < p.Line {
				first = at
			}
		}
		if first.Line > 0 {
			p.Msg += fmt.Sprintf(" (first at line %d, column %d)", first.Line, first.Col)
		}
		p.Msg += ": keep one"
		return p
	}
	if pe.LastKey != "" {
		p.Msg = pe.LastKey + ": " + p.Msg
	}
	return p
}

// firstColumn is the column of the first character on line that is not a
// space or tab.
func firstColumn(data []byte, line int) int {
	lines := bytes.Split(data, []byte{'\n'})
	if line < 1 || line > len(lines) {
		return 1
	}
	return len(lines[line-1]) - len(bytes.TrimLeft(lines[line-1], " \t")) + 1
}

// written reports whether the file has a value at path ("vip[0].health.rise",
// "bgp.asn"), by the generically decoded data.
func (v *validator) written(path string) bool {
	var cur any = v.generic
	for _, part := range strings.Split(path, ".") {
		name, index := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			n, err := strconv.Atoi(part[i+1 : len(part)-1])
			if err != nil {
				return false
			}
			name, index = part[:i], n
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[name]; !ok {
			return false
		}
		if index >= 0 {
			switch a := cur.(type) {
			case []map[string]any:
				if index >= len(a) {
					return false
				}
				cur = a[index]
			case []any:
				if index >= len(a) {
					return false
				}
				cur = a[index]
			default:
				return false
			}
		}
	}
	return true
}

// suggest returns the known key or table closest to an unknown one, when
// it is close enough to be a misspelling ("" otherwise).
func suggest(unknown string) string {
	known := map[string]bool{}
	for _, k := range Keys() {
		known[k] = true
		for i := strings.LastIndexByte(k, '.'); i > 0; i = strings.LastIndexByte(k[:i], '.') {
			known[k[:i]] = true
		}
	}
	best, bestD := "", 0
	for k := range known {
		d := editDistance(unknown, k)
		if d <= max(1, len(unknown)/4) && (best == "" || d < bestD || d == bestD && k < best) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
