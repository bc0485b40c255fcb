package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

var update = flag.Bool("update", false, "rewrite docs/reference/cli.md")

const cliReferencePath = "../../docs/reference/cli.md"

// TestCLIReference checks that docs/reference/cli.md is what the commands
// say: each command's usage, description and flags. `make docs` rewrites it.
func TestCLIReference(t *testing.T) {
	got := cliReference(rootCmd())
	if *update {
		if err := os.WriteFile(cliReferencePath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(cliReferencePath)
	if err != nil {
		t.Fatalf("%v: run `make docs`", err)
	}
	if string(want) != got {
		t.Fatalf("%s is stale: run `make docs` and commit it", cliReferencePath)
	}
}

func cliReference(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("# Command line\n\n")
	b.WriteString("Generated from the commands in `cmd/xce` by `make docs`; do not edit.\n\n")
	b.WriteString("Exit codes of every command: 0 ok, 1 any other error, 2 usage error, 3 not ready\n")
	b.WriteString("until the deadline (no primary could serve), 4 not found.\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c != root && !c.Hidden && c.Name() != "help" && c.Name() != "completion" {
			fmt.Fprintf(&b, "\n## %s\n\n", c.CommandPath())
			long := strings.TrimSpace(c.Long)
			if long == "" {
				long = c.Short
			}
			fmt.Fprintf(&b, "%s\n\n```\n%s\n", long, c.UseLine())
			if fl := c.LocalFlags().FlagUsages(); fl != "" {
				b.WriteString("\n" + strings.TrimRight(fl, "\n") + "\n")
			}
			b.WriteString("```\n")
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return b.String()
}
