// Command xce is the one binary of the controller: the server, the local dev
// cluster, and the client commands.
package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xce/xce/client"
)

// version, commit and date are set at build time with -ldflags
// "-X main.version=... -X main.commit=... -X main.date=..." (make build,
// make release, the image).
var (
	version = ""
	commit  = ""
	date    = ""
)

// Exit codes, documented in the README.
const (
	exitOK       = 0
	exitOther    = 1
	exitUsage    = 2
	exitNotReady = 3
	exitNotFound = 4
	// exitUnauthenticated: the node could not tell who called.
	exitUnauthenticated = 5
	// exitPermissionDenied: the caller's roles do not allow the call.
	exitPermissionDenied = 6
)

// exitError carries a process exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return "dev-" + rev
		}
	}
	return "dev"
}

func main() {
	err := rootCmd().Execute()
	os.Exit(exitCode(err))
}

// rootCmd is the xce command with every subcommand.
func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "xce",
		Short:         "A highly available controller for fleets of stateful workers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageErr("%v", err) })
	root.AddCommand(serverCmd(), upgradeCmd(), devCmd(), statusCmd(), versionCmd(),
		submitCmd(), taskCmd(), tasksCmd(), benchCmd(), kafkaDevCmd(), eventsCmd(), assignCmd(),
		workerCmd(), workersCmd(), assignmentCmd(), checkDBCmd(), tlsCmd(),
		membersCmd(), leaderCmd(), snapshotCmd(), placementCmd(), podConfigCmd())
	return root
}

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(os.Stderr, "xce: "+err.Error())
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, client.ErrNotReady):
		return exitNotReady
	case errors.Is(err, client.ErrNotFound):
		return exitNotFound
	case errors.Is(err, client.ErrUnauthenticated):
		return exitUnauthenticated
	case errors.Is(err, client.ErrPermissionDenied):
		return exitPermissionDenied
	case isUsage(err):
		return exitUsage
	}
	return exitOther
}

// isUsage recognises cobra's own argument errors.
func isUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "requires exactly", "invalid argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			line := "xce " + versionString()
			if commit != "" || date != "" {
				line += fmt.Sprintf(" (commit %s, built %s)", cmp.Or(commit, "unknown"), cmp.Or(date, "unknown"))
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	}
}
