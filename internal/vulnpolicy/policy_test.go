package vulnpolicy

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// testdata/govulncheck.json is govulncheck v1.9.0's -format json output for
// vipd with GoBGP v3.37.0, cut to its config, the OSV entry, the module and
// package level findings and two of the 1564 function level ones.
func readScan(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/govulncheck.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withFakeFinding appends a reachable finding of a vulnerability no policy
// lists: the real first function level finding under another ID.
func withFakeFinding(t *testing.T, scan []byte, id string) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(scan))
	for dec.More() {
		var m map[string]json.RawMessage
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		var f map[string]any
		if raw, ok := m["finding"]; ok {
			if err := json.Unmarshal(raw, &f); err != nil {
				t.Fatal(err)
			}
			trace := f["trace"].([]any)
			if trace[0].(map[string]any)["function"] == nil {
				continue
			}
			f["osv"] = id
			f["fixed_version"] = "v3.99.0"
			b, err := json.Marshal(map[string]any{"finding": f})
			if err != nil {
				t.Fatal(err)
			}
			return append(append(append([]byte(nil), scan...), '\n'), b...)
		}
	}
	t.Fatal("no function level finding in the scan")
	return nil
}

const policy = `# Security

## Something else

| GO-2026-9999 | elsewhere | a table outside the section does not count |

### Accepted vulnerabilities

| ID | Module | Why it is accepted |
|----|--------|--------------------|
| GO-2026-4736 | github.com/osrg/gobgp/v3 | no fixed v3 release; the fuzzer shows the NEXT_HOP shapes are treated as withdraw |

## After
`

func TestParseScan(t *testing.T) {
	fs, err := ParseScan(bytes.NewReader(readScan(t)))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 {
		t.Fatalf("findings = %+v, want one (GO-2026-4736)", fs)
	}
	f := fs[0]
	if f.ID != "GO-2026-4736" || f.Module != "github.com/osrg/gobgp/v3" || f.Version != "v3.37.0" || !f.Reachable || f.Fixed != "" {
		t.Errorf("finding = %+v, want GO-2026-4736 in github.com/osrg/gobgp/v3@v3.37.0, reachable, no fix", f)
	}
	if !strings.HasPrefix(f.Trace, "github.com/osrg/gobgp/v3/pkg/log.DefaultLogger.SetLevel <- ") {
		t.Errorf("trace = %q, want it to start at the vulnerable function", f.Trace)
	}
}

func TestParseScanNotReached(t *testing.T) {
	// Only the module and package level findings: imported, never called.
	scan := readScan(t)
	var kept []byte
	dec := json.NewDecoder(bytes.NewReader(scan))
	for dec.More() {
		var m struct {
			Finding *struct {
				Trace []map[string]any `json:"trace"`
			} `json:"finding"`
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		if m.Finding != nil && m.Finding.Trace[0]["function"] != nil {
			continue
		}
		kept = append(append(kept, raw...), '\n')
	}
	fs, err := ParseScan(bytes.NewReader(kept))
	if err != nil {
		t.Fatal(err)
	}
	r := Check(fs, map[string]string{})
	if len(fs) != 1 || fs[0].Reachable || len(r.Unlisted) != 0 || len(r.Unreached) != 1 {
		t.Errorf("findings %+v, result %+v: want GO-2026-4736 not reached, nothing unlisted", fs, r)
	}
}

func TestCheckFakeFinding(t *testing.T) {
	accepted, err := ParsePolicy(strings.NewReader(policy))
	if err != nil {
		t.Fatal(err)
	}
	if len(accepted) != 1 || accepted["GO-2026-4736"] == "" {
		t.Fatalf("accepted = %v, want only GO-2026-4736 (the row outside the section ignored)", accepted)
	}
	fs, err := ParseScan(bytes.NewReader(withFakeFinding(t, readScan(t), "GO-2099-0001")))
	if err != nil {
		t.Fatal(err)
	}
	r := Check(fs, accepted)
	if len(r.Unlisted) != 1 || r.Unlisted[0].ID != "GO-2099-0001" || r.Unlisted[0].Fixed != "v3.99.0" {
		t.Errorf("unlisted = %+v, want the fake GO-2099-0001 (fixed in v3.99.0)", r.Unlisted)
	}
	if len(r.Accepted) != 1 || r.Accepted[0].ID != "GO-2026-4736" {
		t.Errorf("accepted = %+v, want GO-2026-4736", r.Accepted)
	}

	// The real scan alone passes this policy; with nothing listed it fails.
	fs, err = ParseScan(bytes.NewReader(readScan(t)))
	if err != nil {
		t.Fatal(err)
	}
	if r := Check(fs, accepted); len(r.Unlisted) != 0 || len(r.Stale) != 0 {
		t.Errorf("real scan: %+v, want nothing unlisted or stale", r)
	}
	if r := Check(fs, map[string]string{}); len(r.Unlisted) != 1 {
		t.Errorf("real scan, empty policy: %+v, want GO-2026-4736 unlisted", r)
	}
	if r := Check(nil, accepted); len(r.Stale) != 1 || r.Stale[0] != "GO-2026-4736" {
		t.Errorf("empty scan: stale %v, want GO-2026-4736", r.Stale)
	}
}

func TestParsePolicyErrors(t *testing.T) {
	for name, doc := range map[string]string{
		"no section":     "# Security\n\n| GO-2026-4736 | m | reason |\n",
		"empty reason":   "### Accepted vulnerabilities\n\n| GO-2026-4736 | github.com/osrg/gobgp/v3 |  |\n",
		"reason missing": "### Accepted vulnerabilities\n\n| GO-2026-4736 | github.com/osrg/gobgp/v3 |\n",
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := ParsePolicy(strings.NewReader(doc)); err == nil {
				t.Errorf("ParsePolicy = %v, nil; want an error", got)
			}
		})
	}
}

// TestSecurityDoc: docs/security.md parses, and every accepted
// vulnerability has its reason.
func TestSecurityDoc(t *testing.T) {
	f, err := os.Open("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := ParsePolicy(f); err != nil {
		t.Fatalf("docs/security.md: %v", err)
	}
}
