// Command vipctl talks to the local vipd over its unix socket: status,
// withdraw and restore (for drain hooks), forget, decommission and events. The commands
// live in package cli, which cmd/docgen also reads to write vipctl(8) and
// the shell completions.
package main

import (
	"os"

	"github.com/vipd/vipd/cmd/vipctl/cli"
)

// version is set at build time (-ldflags -X main.version=...).
var version = "dev"

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr, version))
}
