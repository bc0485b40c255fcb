package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xce/xce/persist"
)

// checkDBCmd is `xce check-db PATH`: the server runs it in a child process
// before opening its raft.db, because bbolt panics on some corrupt pages in
// goroutines of its own, where no recover reaches. Exit 0: the file passed;
// 1: it is corrupt (the reason on stderr); a crash is corrupt too.
func checkDBCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "check-db PATH",
		Short:  "Check a raft.db file's structure (run by the server before it opens one)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := persist.CheckBoltFile(args[0]); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			return nil
		},
	}
}

// checkDBTimeout bounds the check of one raft.db.
const checkDBTimeout = 5 * time.Minute

// checkDBInChild runs `xce check-db path` with this very binary
// (/proc/self/exe still works after an upgrade replaced the file).
func checkDBInChild(path string) error {
	exe := "/proc/self/exe"
	if _, err := os.Stat(exe); err != nil {
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("cannot find this binary to check %s: %w", path, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkDBTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, "check-db", path)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil {
		return nil
	}
	// The first line says why: the check's error, or the panic that ended it.
	first, _, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
	first = strings.TrimPrefix(first, "xce: ")
	if ctx.Err() != nil {
		return fmt.Errorf("structure check did not finish within %v", checkDBTimeout)
	}
	return fmt.Errorf("structure check failed (%v): %s", err, first)
}
