// Command salvage is the failure-recovery layer for long-running agent
// pipelines on NATS JetStream. See README.md.
package main

import (
	"os"

	"github.com/salvagehq/salvage/cmd/salvage/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
