// Command vulnpolicy checks a govulncheck -format json scan (stdin) against
// the accepted vulnerabilities listed in docs/security.md (-policy) and
// exits 1 when the scan reaches one the list does not accept: make
// vulncheck.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/vipd/vipd/internal/vulnpolicy"
)

func main() {
	policy := flag.String("policy", "docs/security.md", "the file with the accepted vulnerabilities table")
	flag.Parse()
	if err := run(*policy); err != nil {
		fmt.Fprintln(os.Stderr, "vulnpolicy:", err)
		os.Exit(1)
	}
}

func run(policy string) error {
	f, err := os.Open(policy)
	if err != nil {
		return err
	}
	accepted, err := vulnpolicy.ParsePolicy(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", policy, err)
	}
	findings, err := vulnpolicy.ParseScan(os.Stdin)
	if err != nil {
		return err
	}
	r := vulnpolicy.Check(findings, accepted)
	for _, f := range r.Unreached {
		fmt.Printf("not reached: %s in %s@%s (imported or required, not called)\n", f.ID, f.Module, f.Version)
	}
	for _, f := range r.Accepted {
		fmt.Printf("accepted:    %s in %s@%s: %s\n", f.ID, f.Module, f.Version, accepted[f.ID])
	}
	for _, id := range r.Stale {
		fmt.Printf("stale:       %s is listed in %s but no longer reached: remove it\n", id, policy)
	}
	for _, f := range r.Unlisted {
		fixed := f.Fixed
		if fixed == "" {
			fixed = "no fixed version"
		}
		fmt.Printf("REACHABLE:   %s in %s@%s (fixed in: %s)\n             %s\n", f.ID, f.Module, f.Version, fixed, f.Trace)
	}
	if len(r.Unlisted) > 0 {
		return fmt.Errorf("%d reachable vulnerabilities not listed in %s (%q): upgrade, or list each with its reason",
			len(r.Unlisted), policy, vulnpolicy.PolicyHeading)
	}
	fmt.Printf("vulncheck: %d reachable, all listed in %s with their reasons\n", len(r.Accepted), policy)
	return nil
}
