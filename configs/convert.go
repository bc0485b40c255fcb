package configs

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/xce/xce/fence"
	"github.com/xce/xce/ha/autopilot"
	"github.com/xce/xce/ha/kafkaha"
	"github.com/xce/xce/ha/raftha"
	"github.com/xce/xce/ha/succession"
	"github.com/xce/xce/internal/fielderr"
	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/placement"
	"github.com/xce/xce/tlsconf"
)

// The bindings below are the one place where the file's sections become
// the settings of the packages that use them (docs/design.md, "Adding a
// setting"). Each package owns its defaults (Default starts from them) and
// its rules (Validate converts and asks the package); a binding's links
// carry the values both ways, and name each problem a package reports by
// the YAML key of the field it came from.

// A link ties one setting of a package's Config to the field of the file
// it comes from. pkg and file point at the two; get copies the file's
// value to the package's setting, put the package's value to the file.
type link struct {
	pkg, file any
	get, put  func()
}

// conv links two fields of different types through a conversion each way.
func conv[P, F any](pkg *P, file *F, get func(F) P, put func(P) F) link {
	return link{pkg, file, func() { *pkg = get(*file) }, func() { *file = put(*pkg) }}
}

// same links two fields of one type.
func same[T any](pkg, file *T) link {
	return link{pkg, file, func() { *pkg = *file }, func() { *file = *pkg }}
}

// dur links a time.Duration to a Duration.
func dur(pkg *time.Duration, file *Duration) link {
	return conv(pkg, file, Duration.D, func(d time.Duration) Duration { return Duration{d} })
}

// millis links a count of milliseconds to a Duration.
func millis(pkg *int64, file *Duration) link {
	return conv(pkg, file, func(d Duration) int64 { return d.Milliseconds() },
		func(n int64) Duration { return Duration{time.Duration(n) * time.Millisecond} })
}

// A binding is what the file gives of one package's Config, P: the
// package's defaults and the links of the settings the file sets.
type binding[P any] struct {
	defaults func() P
	links    func(c *Config, p *P) []link
}

// config returns P as c sets it: the package's defaults, each linked
// setting taken from c.
func (b binding[P]) config(c *Config) P {
	p := b.defaults()
	for _, l := range b.links(c, &p) {
		l.get()
	}
	return p
}

// fill sets each of c's linked fields to the package's default.
func (b binding[P]) fill(c *Config) {
	p := b.defaults()
	for _, l := range b.links(c, &p) {
		l.put()
	}
}

// keys maps the Go path of each of P's linked settings to the YAML key of
// the field it comes from.
func (b binding[P]) keys() map[string]string {
	var c Config
	var p P
	keys := map[string]string{}
	for _, l := range b.links(&c, &p) {
		keys[fieldPath(&p, l.pkg, goName)] = fieldPath(&c, l.file, yamlName)
	}
	return keys
}

// bindings are every binding, for Default.
var bindings = []interface{ fill(*Config) }{
	raftBinding, autopilotBinding, assignorBinding, fenceBinding, clientLimitsBinding, leaseBinding,
}

// raftBinding: the raft section, and the peer port's bounds from
// limits.peer.
var raftBinding = binding[raftha.Config]{raftha.DefaultConfig, func(c *Config, r *raftha.Config) []link {
	f, p := &c.Raft, &c.Limits.Peer
	return []link{
		dur(&r.HeartbeatTimeout, &f.HeartbeatTimeout),
		dur(&r.ElectionTimeout, &f.ElectionTimeout),
		dur(&r.LeaderLeaseTimeout, &f.LeaderLeaseTimeout),
		dur(&r.CommitTimeout, &f.CommitTimeout),
		dur(&r.SnapshotInterval, &f.SnapshotInterval),
		same(&r.SnapshotThreshold, &f.SnapshotThreshold),
		same(&r.SnapshotWrites, &f.SnapshotWrites),
		same(&r.TrailingLogs, &f.TrailingLogs),
		same(&r.DetectLeaderExit, &f.DetectLeaderExit),
		conv(&r.MaxRPCSize, &p.MaxMessageBytes, func(n int) int64 { return int64(n) }, func(n int64) int { return int(n) }),
		dur(&r.RPCTimeout, &p.ReadTimeout),
		dur(&r.IdleTimeout, &p.IdleTimeout),
		dur(&r.FirstByteTimeout, &p.FirstByteTimeout),
		same(&r.MaxInboundConns, &p.MaxConnections),
	}
}}

// autopilotBinding: the autopilot section.
var autopilotBinding = binding[autopilot.Config]{autopilot.DefaultConfig, func(c *Config, a *autopilot.Config) []link {
	f := &c.Autopilot
	return []link{
		dur(&a.StabilizationTime, &f.StabilizationTime),
		same(&a.MaxLag, &f.MaxLag),
		dur(&a.LastContactThreshold, &f.LastContactThreshold),
		same(&a.CleanupDeadServers, &f.CleanupDeadServers),
		dur(&a.DeadServerTimeout, &f.DeadServerTimeout),
	}
}}

// assignorBinding: the assignor section; the placement loop's own timings
// keep placement's defaults.
var assignorBinding = binding[placement.Config]{placement.DefaultConfig, func(c *Config, p *placement.Config) []link {
	f := &c.Assignor
	return []link{
		same(&p.Assign.AcceptableRecoveryLag, &f.AcceptableRecoveryLag),
		same(&p.Assign.MaxWarmupReplicas, &f.MaxWarmupReplicas),
		same(&p.Assign.NumStandbyReplicas, &f.NumStandbyReplicas),
		dur(&p.Assign.ProbingRebalanceInterval, &f.ProbingRebalanceInterval),
		dur(&p.SessionTimeout, &f.SessionTimeout),
		dur(&p.HeartbeatInterval, &f.HeartbeatInterval),
		dur(&p.GrantMargin, &f.GrantMargin),
		dur(&p.ReplaceDelay, &f.ReplaceDelay),
		same(&p.Assign.MinCopies, &f.MinCopies),
		same(&p.Assign.SpreadBy, &f.SpreadBy),
		same(&p.Assign.Balance, &f.Balance),
		same(&p.Assign.LoadTolerance, &f.LoadTolerance),
		same(&p.Assign.MaxLoadMoves, &f.MaxLoadMoves),
	}
}}

// fenceBinding: the kafka section's brokers, topic, tls and sasl.
var fenceBinding = binding[fence.Config]{fence.DefaultConfig, func(c *Config, f *fence.Config) []link {
	return append([]link{
		same(&f.Brokers, &c.Kafka.Brokers),
		same(&f.Topic, &c.Kafka.Topic),
	}, securityLinks(c, &f.Security)...)
}}

// securityLinks: kafka.tls and kafka.sasl, which every Kafka client uses.
func securityLinks(c *Config, s *kafkaopts.Security) []link {
	t, a := &c.Kafka.TLS, &c.Kafka.SASL
	return []link{
		same(&s.TLS.Enabled, &t.Enabled),
		same(&s.TLS.Files.CA, &t.CAFile),
		same(&s.TLS.Files.Cert, &t.CertFile),
		same(&s.TLS.Files.Key, &t.KeyFile),
		same(&s.SASL.Mechanism, &a.Mechanism),
		same(&s.SASL.Username, &a.Username),
		same(&s.SASL.PasswordFile, &a.PasswordFile),
	}
}

// clientLimitsBinding: limits.client.
var clientLimitsBinding = binding[netio.Limits]{netio.DefaultLimits, func(c *Config, l *netio.Limits) []link {
	f := &c.Limits.Client
	return []link{
		same(&l.MaxConnections, &f.MaxConnections),
		same(&l.HealthReserve, &f.HealthReserve),
		dur(&l.ReadHeaderTimeout, &f.ReadHeaderTimeout),
		dur(&l.ReadTimeout, &f.ReadTimeout),
		dur(&l.WriteTimeout, &f.WriteTimeout),
		dur(&l.IdleTimeout, &f.IdleTimeout),
		same(&l.MaxHeaderBytes, &f.MaxHeaderBytes),
	}
}}

// leaseBinding: the Kafka backend's lease, from the ha section.
var leaseBinding = binding[succession.LeaseConfig]{succession.DefaultLeaseConfig, func(c *Config, l *succession.LeaseConfig) []link {
	return []link{
		millis(&l.LeaseMillis, &c.HA.Lease),
		millis(&l.RenewMillis, &c.HA.Renew),
		millis(&l.StaggerMillis, &c.HA.Stagger),
	}
}}

// RaftConfig returns the Raft backend's settings: the raft section, the
// limits.peer section, node_id, peer_addr and peer_listen_addr, each
// peer's peer_addr, and Join when join lists any address. The caller sets
// CampaignAllowed and Snapshots.
func (c *Config) RaftConfig() raftha.Config {
	rc := raftBinding.config(c)
	rc.NodeID = c.NodeID
	rc.PeerAddr, rc.PeerListenAddr = c.PeerAddr, c.PeerListenAddr
	rc.Join = len(c.Join) > 0
	for _, pe := range c.Peers {
		rc.Peers = append(rc.Peers, raftha.Peer{ID: pe.ID, Addr: pe.PeerAddr})
	}
	return rc
}

// AutopilotConfig returns autopilot's settings from the autopilot section.
func (c *Config) AutopilotConfig() autopilot.Config { return autopilotBinding.config(c) }

// PeerTLSFiles are the peer_tls section's files (all empty: plaintext).
func (c *Config) PeerTLSFiles() tlsconf.Files {
	return tlsconf.Files{CA: c.PeerTLS.CAFile, Cert: c.PeerTLS.CertFile, Key: c.PeerTLS.KeyFile}
}

// AssignorConfig returns the placement service's settings, the assignor's
// among them, from the assignor section; the loop's own timings keep
// placement's defaults.
func (c *Config) AssignorConfig() placement.Config {
	pc := assignorBinding.config(c)
	// A held heartbeat must be answered well within the client port's
	// write deadline.
	if wt := c.Limits.Client.WriteTimeout.Duration; wt > 0 {
		pc.MaxHold = min(pc.HeartbeatInterval, placement.MaxHoldLimit, wt/2)
	}
	return pc
}

// FenceConfig returns the outbox publisher's settings from the kafka
// section; the transactional id names the cluster's primary role,
// <transactional_id_prefix>.<cluster_id>.primary. The caller sets the
// logger.
func (c *Config) FenceConfig() fence.Config {
	fc := fenceBinding.config(c)
	fc.TransactionalID = c.Kafka.TransactionalIDPrefix + "." + c.ClusterID + ".primary"
	return fc
}

// KafkaSecurity returns the TLS and SASL of every Kafka client from
// kafka.tls and kafka.sasl.
func (c *Config) KafkaSecurity() kafkaopts.Security {
	var s kafkaopts.Security
	for _, l := range securityLinks(c, &s) {
		l.get()
	}
	return s
}

// ClientLimits returns the client port's limits from limits.client; the
// descriptors kept for everything else count limits.peer.max_connections.
func (c *Config) ClientLimits() netio.Limits {
	l := clientLimitsBinding.config(c)
	l.FDHeadroom = netio.FDHeadroom(c.Limits.Peer.MaxConnections)
	return l
}

// KafkaLease returns the Kafka backend's lease timing from the ha section.
func (c *Config) KafkaLease() succession.LeaseConfig { return leaseBinding.config(c) }

// KafkaHAConfig returns the Kafka backend's settings (ha.backend: kafka):
// the brokers, this node as the member of the primary role, the topics and
// transactional id kafkaha.Names derives from transactional_id_prefix and
// cluster_id, the lease, and the raft section's snapshot settings and
// election timeout. The caller sets the logger.
func (c *Config) KafkaHAConfig() kafkaha.Config {
	coord, state, txn := kafkaha.Names(c.Kafka.TransactionalIDPrefix, c.ClusterID)
	return kafkaha.Config{
		Brokers: c.Kafka.Brokers, Security: c.KafkaSecurity(), Member: c.NodeID, Role: "primary",
		CoordTopic: coord, StateTopic: state, TransactionalID: txn,
		Lease:             c.KafkaLease(),
		SnapshotInterval:  c.Raft.SnapshotInterval.Duration,
		SnapshotThreshold: c.Raft.SnapshotThreshold,
		// Half the raft section's election timeout, as for Raft without
		// the exit watch.
		ElectingHint: c.Raft.ElectionTimeout.Duration / 2,
	}
}

// from adds the problems a package's Validate found, each setting named
// by keys (a binding's), or in snake case when keys does not have it. An
// error that names no setting is added as it is.
func (p *problems) from(err error, keys map[string]string) {
	if err == nil {
		return
	}
	all := fielderr.All(err)
	if len(all) == 0 {
		p.add("", "%s", err)
		return
	}
	name := func(path string) string {
		if k, ok := keys[path]; ok {
			return k
		}
		return fielderr.Snake(path)
	}
	for _, e := range all {
		p.add(name(e.Field), "%s", e.Describe(name))
	}
}

// fieldPath returns the path of the field ptr points to within the struct
// root points to, each field named by name. A link that points elsewhere is
// a bug: it panics.
func fieldPath(root, ptr any, name func(reflect.StructField) string) string {
	want := reflect.ValueOf(ptr)
	path, ok := findField(reflect.ValueOf(root).Elem(), want.Pointer(), want.Type().Elem(), name)
	if !ok {
		panic(fmt.Sprintf("configs: a link points to a %s outside its %T", want.Type().Elem(), root))
	}
	return path
}

func findField(v reflect.Value, addr uintptr, t reflect.Type, name func(reflect.StructField) string) (string, bool) {
	for i := range v.NumField() {
		f, fv := v.Type().Field(i), v.Field(i)
		if !f.IsExported() {
			continue
		}
		// A struct's first field has the struct's address: the type
		// tells them apart.
		if fv.Addr().Pointer() == addr && fv.Type() == t {
			return name(f), true
		}
		if fv.Kind() == reflect.Struct {
			if p, ok := findField(fv, addr, t, name); ok {
				return name(f) + "." + p, true
			}
		}
	}
	return "", false
}

func goName(f reflect.StructField) string { return f.Name }

// yamlName is a field's YAML key.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}
