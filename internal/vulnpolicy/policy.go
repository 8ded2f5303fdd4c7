// Package vulnpolicy decides whether a govulncheck scan passes vipd's
// policy: every vulnerability the scan finds reachable from vipd's code
// (a finding whose trace ends in a function) must be listed, with the reason
// it is accepted, in the table of the "Accepted vulnerabilities" section of
// docs/security.md (the section ends at the next heading). make vulncheck runs govulncheck -format json and feeds
// its output to cmd/vulnpolicy.
//
// Findings at the module or package level (vulnerable code that is
// required or imported but never called) do not fail the policy; they are
// reported as notes.
package vulnpolicy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// Finding is one vulnerability govulncheck reports, reduced to what the
// policy needs.
type Finding struct {
	// ID is the OSV identifier (GO-2026-4736).
	ID string
	// Module and Version are the vulnerable module as the build uses it.
	Module, Version string
	// Fixed is the first fixed version of Module ("" when there is none).
	Fixed string
	// Reachable is true when the trace reaches a vulnerable function.
	Reachable bool
	// Trace is the call chain govulncheck printed, vulnerable symbol first
	// ("pkg.Func <- pkg.Caller <- ..."); empty when not Reachable.
	Trace string
}

// message is one JSON object of govulncheck's -format json stream (only the
// fields read here; see golang.org/x/vuln/internal/govulncheck).
type message struct {
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module   string `json:"module"`
			Version  string `json:"version"`
			Package  string `json:"package"`
			Function string `json:"function"`
			Receiver string `json:"receiver"`
		} `json:"trace"`
	} `json:"finding"`
}

// ParseScan reads govulncheck -format json output and returns its
// findings, one per vulnerability: reachable if any of its traces is.
func ParseScan(r io.Reader) ([]Finding, error) {
	byID := map[string]*Finding{}
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("govulncheck json: %w", err)
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 {
			continue
		}
		top := f.Trace[0]
		got, ok := byID[f.OSV]
		if !ok {
			got = &Finding{ID: f.OSV, Module: top.Module, Version: top.Version, Fixed: f.FixedVersion}
			byID[f.OSV] = got
		}
		if top.Function == "" || got.Reachable {
			continue
		}
		got.Reachable = true
		var frames []string
		for _, fr := range f.Trace {
			name := fr.Function
			if fr.Receiver != "" {
				name = strings.TrimPrefix(fr.Receiver, "*") + "." + name
			}
			frames = append(frames, fr.Package+"."+name)
		}
		got.Trace = strings.Join(frames, " <- ")
	}
	var out []Finding
	for _, f := range byID {
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// PolicyHeading is the heading of the section of docs/security.md whose
// table lists the accepted vulnerabilities.
const PolicyHeading = "### Accepted vulnerabilities"

var rowRE = regexp.MustCompile(`^\|\s*(GO-\d{4}-\d+)\s*\|([^|]*)\|(.*)\|\s*$`)

// ParsePolicy reads docs/security.md and returns the accepted
// vulnerabilities of its PolicyHeading section: table rows
// "| GO-YYYY-NNNN | module | reason |". A row without a reason is an error.
func ParsePolicy(r io.Reader) (map[string]string, error) {
	accepted := map[string]string{}
	sc := bufio.NewScanner(r)
	in, seen, line := false, false, 0
	for sc.Scan() {
		line++
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			in = strings.TrimSpace(l) == PolicyHeading
			seen = seen || in
			continue
		}
		if !in {
			continue
		}
		if !strings.HasPrefix(strings.TrimSpace(l), "| GO-") {
			continue
		}
		m := rowRE.FindStringSubmatch(l)
		if m == nil {
			return nil, fmt.Errorf("line %d: want | GO-YYYY-NNNN | module | reason |, got %q", line, l)
		}
		reason := strings.TrimSpace(m[3])
		if reason == "" {
			return nil, fmt.Errorf("line %d: %s is listed without a reason", line, m[1])
		}
		accepted[m[1]] = reason
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !seen {
		return nil, fmt.Errorf("no %q section", PolicyHeading)
	}
	return accepted, nil
}

// Result is what Check decided.
type Result struct {
	// Unlisted are reachable findings the policy does not accept: each
	// fails the check.
	Unlisted []Finding
	// Accepted are reachable findings the policy lists.
	Accepted []Finding
	// Unreached are findings in required modules or imported packages
	// whose vulnerable functions vipd does not call.
	Unreached []Finding
	// Stale are listed IDs the scan no longer finds reachable: the list
	// should drop them.
	Stale []string
}

// Check applies the policy to the scan's findings.
func Check(findings []Finding, accepted map[string]string) Result {
	var r Result
	reached := map[string]bool{}
	for _, f := range findings {
		switch {
		case !f.Reachable:
			r.Unreached = append(r.Unreached, f)
		case accepted[f.ID] != "":
			reached[f.ID] = true
			r.Accepted = append(r.Accepted, f)
		default:
			r.Unlisted = append(r.Unlisted, f)
		}
	}
	for id := range accepted {
		if !reached[id] {
			r.Stale = append(r.Stale, id)
		}
	}
	sort.Strings(r.Stale)
	return r
}
