package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/xce/xce/upgrade"
)

func upgradeCmd() *cobra.Command {
	var pidFile string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "upgrade --pid-file FILE",
		Short: "Upgrade a running server in place (sends SIGHUP and waits for the outcome)",
		Long: `Upgrade a running server in place: send SIGHUP to the pid in --pid-file and
wait until the new process (the binary now at the server's path) serves and the
old one has handed over, or until the upgrade fails. Exits 0 on success, 1 on
failure with the reason.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if pidFile == "" {
				return usageErr("upgrade: --pid-file is required")
			}
			return upgrade.Request(cmd.OutOrStdout(), pidFile, timeout)
		},
	}
	cmd.Flags().StringVar(&pidFile, "pid-file", "", "the server's pid file (xce server --pid-file)")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "give up waiting after this long")
	return cmd
}
