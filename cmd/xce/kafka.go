package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/fence"
	"github.com/xce/xce/internal/fielderr"
	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/tlsconf"
)

// defaultEventsTopic is the events topic unless kafka.topic says otherwise:
// kafka.topic's default.
var defaultEventsTopic = fence.DefaultConfig().Topic

func kafkaDevCmd() *cobra.Command {
	var addr, dataDir, saslUser, saslPasswordFile, tlsCert, tlsKey string
	var topics []string
	cmd := &cobra.Command{
		Use:   "kafka-dev",
		Short: "Run an in-process Kafka broker (kfake) for development and tests",
		Long: `Run an in-process Kafka broker with the controller's topics created. Its log is
kept in memory unless --data-dir is given; with one, a restarted broker keeps
what was committed. With --sasl-user and --sasl-password-file every client must
authenticate as that user (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512); with
--tls-cert-file and --tls-key-file the broker speaks TLS. Not for production:
real deployments set kafka.brokers to their cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			host, portStr, err := net.SplitHostPort(addr)
			if err != nil {
				return usageErr("--addr %q: %v", addr, err)
			}
			port, err := strconv.Atoi(portStr)
			if err != nil || port < 0 || port > 65535 {
				return usageErr("--addr %q: invalid port", addr)
			}
			opts := []kfake.Opt{
				kfake.Ports(port),
				kfake.ListenFn(func(network, _ string) (net.Listener, error) {
					return net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
				}),
				kfake.SeedTopics(1, topics...),
				kfake.ClusterID("xce-dev"),
			}
			if dataDir != "" {
				opts = append(opts, kfake.DataDir(dataDir), kfake.SyncWrites())
			}
			if (saslUser == "") != (saslPasswordFile == "") {
				return usageErr("--sasl-user and --sasl-password-file are given together")
			}
			if saslUser != "" {
				pw, err := kafkaopts.ReadPassword(saslPasswordFile)
				if err != nil {
					return err
				}
				opts = append(opts, kfake.EnableSASL())
				for _, m := range kafkaopts.Mechanisms {
					opts = append(opts, kfake.Superuser(m, saslUser, pw))
				}
			}
			if (tlsCert == "") != (tlsKey == "") {
				return usageErr("--tls-cert-file and --tls-key-file are given together")
			}
			if tlsCert != "" {
				src, err := tlsconf.NewSource(tlsconf.Files{Cert: tlsCert, Key: tlsKey})
				if err != nil {
					return fmt.Errorf("kafka-dev: %w", err)
				}
				opts = append(opts, kfake.TLS(src.ServerConfig(tlsconf.ClientAuthNone, nil)))
			}
			c, err := kfake.NewCluster(opts...)
			if err != nil {
				return fmt.Errorf("kafka-dev: %w", err)
			}
			defer c.Close()
			where := "memory"
			if dataDir != "" {
				where = dataDir
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kafka-dev listening on %s (topics %s; log in %s)\n",
				strings.Join(c.ListenAddrs(), ","), strings.Join(topics, ","), where)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:9092", "listen address")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "keep the broker's log here across restarts")
	cmd.Flags().StringSliceVar(&topics, "topic", []string{defaultEventsTopic}, "topics to create (one partition each)")
	cmd.Flags().StringVar(&saslUser, "sasl-user", "", "require SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) as this user")
	cmd.Flags().StringVar(&saslPasswordFile, "sasl-password-file", "", "file whose first line is the --sasl-user's password")
	cmd.Flags().StringVar(&tlsCert, "tls-cert-file", "", "serve TLS with this certificate (PEM)")
	cmd.Flags().StringVar(&tlsKey, "tls-key-file", "", "the key of --tls-cert-file (PEM)")
	return cmd
}

// kafkaSecurityFlags are a Kafka client's TLS and SASL flags.
type kafkaSecurityFlags struct {
	tls                           bool
	ca, cert, key                 string
	mechanism, user, passwordFile string
}

// kafkaSecurityFlag names each field of kafkaopts.Security by the flag
// that sets it, for the problems Validate finds.
var kafkaSecurityFlag = map[string]string{
	"TLS.Enabled":       "--tls",
	"TLS.Files.CA":      "--tls-ca-file",
	"TLS.Files.Cert":    "--tls-cert-file",
	"TLS.Files.Key":     "--tls-key-file",
	"SASL.Mechanism":    "--sasl-mechanism",
	"SASL.Username":     "--sasl-user",
	"SASL.PasswordFile": "--sasl-password-file",
}

func (f *kafkaSecurityFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&f.tls, "tls", false, "connect to the brokers with TLS (implied by --tls-ca-file and --tls-cert-file)")
	fl.StringVar(&f.ca, "tls-ca-file", "", "CA that signs the brokers' certificates (default: the system's roots)")
	fl.StringVar(&f.cert, "tls-cert-file", "", "client certificate (PEM) for brokers that ask for one")
	fl.StringVar(&f.key, "tls-key-file", "", "the key of --tls-cert-file (PEM)")
	fl.StringVar(&f.mechanism, "sasl-mechanism", kafkaopts.ScramSHA256, "SASL mechanism with --sasl-user: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	fl.StringVar(&f.user, "sasl-user", "", "authenticate to the brokers as this user")
	fl.StringVar(&f.passwordFile, "sasl-password-file", "", "file whose first line is the --sasl-user's password")
}

// security is what the flags ask for, checked (a usage error otherwise).
func (f *kafkaSecurityFlags) security() (kafkaopts.Security, error) {
	sec := kafkaopts.Security{TLS: kafkaopts.TLS{Enabled: f.tls, Files: tlsconf.Files{CA: f.ca, Cert: f.cert, Key: f.key}}}
	if f.user != "" || f.passwordFile != "" {
		sec.SASL = kafkaopts.SASL{Mechanism: f.mechanism, Username: f.user, PasswordFile: f.passwordFile}
	}
	if err := sec.Validate(); err != nil {
		flag := func(path string) string {
			if f, ok := kafkaSecurityFlag[path]; ok {
				return f
			}
			return fielderr.Snake(path)
		}
		var problems []string
		for _, e := range fielderr.All(err) {
			problems = append(problems, e.Text(flag))
		}
		return kafkaopts.Security{}, usageErr("%s", strings.Join(problems, "; "))
	}
	return sec, nil
}

// opts are the kgo options the flags ask for; a refused authentication is
// told on stderr.
func (f *kafkaSecurityFlags) opts(stderr io.Writer) ([]kgo.Opt, error) {
	sec, err := f.security()
	if err != nil {
		return nil, err
	}
	return sec.Opts(zerolog.New(zerolog.ConsoleWriter{Out: stderr, NoColor: true}))
}

// kafkaSecurityArgs are the flags of kafkaSecurityFlags that ask for sec,
// for a command line that `xce dev` runs or prints; the password stays in
// its file.
func kafkaSecurityArgs(sec kafkaopts.Security) []string {
	var args []string
	files := sec.TLS.Files
	if sec.TLS.Enabled && files.CA == "" && files.Cert == "" {
		args = append(args, "--tls")
	}
	for _, f := range []struct{ flag, path string }{
		{"--tls-ca-file", files.CA}, {"--tls-cert-file", files.Cert}, {"--tls-key-file", files.Key},
	} {
		if f.path != "" {
			args = append(args, f.flag, f.path)
		}
	}
	if a := sec.SASL; a.Mechanism != "" {
		args = append(args, "--sasl-mechanism", a.Mechanism, "--sasl-user", a.Username, "--sasl-password-file", a.PasswordFile)
	}
	return args
}

func eventsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "Read the controller's downstream events"}
	var brokers, topic string
	var fromStart, asJSON bool
	var sec kafkaSecurityFlags
	tail := &cobra.Command{
		Use:   "tail",
		Short: "Print committed events (read_committed) with their term, index and epoch",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			start := kgo.NewOffset().AtEnd()
			if fromStart {
				start = kgo.NewOffset().AtStart()
			}
			conn, err := sec.opts(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cl, err := kgo.NewClient(append([]kgo.Opt{
				kgo.SeedBrokers(strings.Split(brokers, ",")...),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: start}}),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			}, conn...)...)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			for {
				fs := cl.PollFetches(ctx)
				if ctx.Err() != nil {
					return nil
				}
				for _, fe := range fs.Errors() {
					fmt.Fprintf(cmd.ErrOrStderr(), "xce: %s[%d]: %v\n", fe.Topic, fe.Partition, fe.Err)
				}
				var perr error
				fs.EachRecord(func(r *kgo.Record) {
					p, err := fence.Decode(r)
					if err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "xce: offset %d: %v\n", r.Offset, err)
						return
					}
					if asJSON {
						perr = enc.Encode(map[string]any{
							"offset": p.Offset, "key": p.Key, "term": p.Term, "index": p.Index, "epoch": p.Epoch,
							"kind": p.Event.Kind, "task_id": p.Event.TaskID, "timestamp": r.Timestamp.UTC().Format(time.RFC3339Nano),
						})
						return
					}
					fmt.Fprintf(out, "offset=%d term=%d index=%d epoch=%d %s %s\n", p.Offset, p.Term, p.Index, p.Epoch, p.Event.Kind, p.Event.TaskID)
				})
				if perr != nil {
					return perr
				}
			}
		},
	}
	tail.Flags().StringVar(&brokers, "brokers", "127.0.0.1:9092", "comma-separated bootstrap brokers")
	tail.Flags().StringVar(&topic, "topic", defaultEventsTopic, "events topic")
	tail.Flags().BoolVar(&fromStart, "from-start", false, "read from the first event (default: only new ones)")
	tail.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line")
	sec.register(tail)
	cmd.AddCommand(tail)
	return cmd
}
