package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/localcluster"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/tlsconf"
)

// The peer port's TLS refusals, by reason, as /metrics shows them.
const peerTLSRefused = "xce_peer_tls_refused_total"

// refusedFor scrapes node i's refusals for reason.
func (c *Cluster) refusedFor(i int, reason string) float64 {
	c.t.Helper()
	v, err := c.Metric(i, fmt.Sprintf(`%s{reason="%s"}`, peerTLSRefused, reason))
	if err != nil {
		c.t.Fatalf("%s /metrics: %v", c.Node(i).ID, err)
	}
	return v
}

// A 3-node cluster with mutual TLS on the peer port elects, serves, and
// survives a SIGKILL of the primary under a write load with the history
// linearizable and nothing lost; no peer of its own is ever refused.
func TestPeerTLSKillPrimaryUnderLoad(t *testing.T) {
	c := newCluster(t, 3, WithPeerTLS(), WithLogLevel("info"))
	c.StartAll()
	p := c.WaitRoles(raceSlack(10 * time.Second))
	load := startLoad(t, c.Addrs(), 8)
	load.waitProgress(t, 100, 30*time.Second)
	killPrimaryUnderLoad(t, c, p, load)
	for i := range c.N() {
		if v, err := c.Metric(i, peerTLSRefused); err != nil || v != 0 {
			t.Errorf("%s: %s = %v (%v), want no peer of the cluster refused", c.Node(i).ID, peerTLSRefused, v, err)
		}
		if strings.Contains(c.RunLog(i), "refused a peer at the TLS handshake") {
			t.Errorf("%s logged a refusal of its own cluster's peer", c.Node(i).ID)
		}
	}
}

// Over TLS, the followers' exit watch still tells a SIGKILLed leader by its
// refused port and elects well within raft's 3 s heartbeat timeout.
func TestPeerTLSLeaderExitDetected(t *testing.T) {
	c := newCluster(t, 3, WithPeerTLS(), WithRaft(3*time.Second, 3*time.Second, time.Second), WithLogLevel("info"))
	c.StartAll()
	p := c.WaitRoles(raceSlack(20 * time.Second))
	var others []int
	for i := range c.N() {
		if i != p {
			others = append(others, i)
		}
	}
	want := fmt.Sprintf(`"leader":"%s"`, c.Node(p).ID)
	if err := testutil.Poll(raceSlack(10*time.Second), pollEvery, func() error {
		for _, i := range others {
			if !slices.ContainsFunc(strings.Split(c.RunLog(i), "\n"), func(l string) bool {
				return strings.Contains(l, "watching the leader's peer port") && strings.Contains(l, want)
			}) {
				return fmt.Errorf("%s does not watch %s yet", c.Node(i).ID, c.Node(p).ID)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	c.Kill(p)
	np, _, err := c.waitRolesAmong(2*time.Second, others)
	if err != nil {
		t.Fatalf("no new PRIMARY within 2 s of SIGKILL (heartbeat timeout 3 s): %v", err)
	}
	t.Logf("SIGKILL %s: %s PRIMARY after %v", c.Node(p).ID, c.Node(np).ID, time.Since(t0).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Client().Submit(ctx, client.Task{ID: "after-exit"}); err != nil {
		t.Errorf("submit after failover: %v", err)
	}
}

// startIntruder runs a fourth node, n4, that lists the cluster's three
// nodes and itself as voters and campaigns every few hundred
// milliseconds, with the given peer_tls (none: plaintext).
func startIntruder(t *testing.T, c *Cluster, name string, ports []int, pt configs.PeerTLS) {
	t.Helper()
	cfg := c.ConfigSpec(0).Config
	cfg.NodeID = "n4"
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.ClientAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	cfg.PeerAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	cfg.Peers = append(slices.Clone(cfg.Peers), configs.Peer{ID: "n4", PeerAddr: cfg.PeerAddr, ClientAddr: cfg.ClientAddr})
	cfg.PeerTLS = pt
	cfg.Raft.HeartbeatTimeout = configs.Duration{Duration: 200 * time.Millisecond}
	cfg.Raft.ElectionTimeout = configs.Duration{Duration: 200 * time.Millisecond}
	cfg.Raft.LeaderLeaseTimeout = configs.Duration{Duration: 100 * time.Millisecond}
	path := filepath.Join(c.dir, name+".yaml")
	if err := configs.WriteFile(path, &cfg); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(c.dir, name+".log")
	proc, err := localcluster.StartProcess(xceBin, logPath, true, "server", "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = proc.Kill(10 * time.Second)
		if t.Failed() {
			t.Logf("---- last 20 lines of %s ----\n%s", name, tailLines(logPath, 20, 600))
		}
	})
}

// Nodes that are not the cluster's cannot join or vote: one with a
// certificate of another CA, one with a certificate of the cluster's CA
// that names a node not among peers, and one that speaks plaintext. Each
// is refused at the handshake, counted by reason, logged once per peer
// and reason, and the cluster's term does not move while they campaign.
func TestPeerTLSRefusesForeignNodes(t *testing.T) {
	c := newCluster(t, 3, WithPeerTLS(), WithLogLevel("info"))
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))
	terms := make([]uint64, c.N())
	for i := range c.N() {
		st, err := c.Status(i)
		if err != nil {
			t.Fatal(err)
		}
		terms[i] = st.Term
		for _, r := range []string{"plaintext", "bad_certificate", "wrong_node", "expired", "other_cluster"} {
			if v, err := c.Metric(i, fmt.Sprintf(`%s{reason="%s"}`, peerTLSRefused, r)); err != nil || v != 0 {
				t.Errorf("%s: %s{reason=%q} = %v (%v), want shown at 0", c.Node(i).ID, peerTLSRefused, r, v, err)
			}
		}
	}

	caFile, _ := tlsconf.CAFiles(c.TLSDir())
	n4 := tlsconf.Identity{Cluster: "it", Kind: tlsconf.KindNode, Name: "n4"}
	req := tlsconf.CertRequest{ID: n4, Hosts: []string{"127.0.0.1"}}
	// Another CA's certificate, though the intruder trusts the cluster's.
	other := t.TempDir()
	if err := tlsconf.CreateCA(other, "it"); err != nil {
		t.Fatal(err)
	}
	oc, ok, err := tlsconf.CreateCert(other, req)
	if err != nil {
		t.Fatal(err)
	}
	// One call for every intruder's ports: ports taken one intruder at a
	// time could repeat while the previous intruder has not bound them yet.
	ports := freePorts(t, 6)
	startIntruder(t, c, "foreign-ca", ports[0:2], configs.PeerTLS{CAFile: caFile, CertFile: oc, KeyFile: ok})
	// The cluster's CA signed a certificate for a node it does not list.
	wc, wk, err := tlsconf.CreateCert(c.TLSDir(), req)
	if err != nil {
		t.Fatal(err)
	}
	startIntruder(t, c, "unlisted-node", ports[2:4], configs.PeerTLS{CAFile: caFile, CertFile: wc, KeyFile: wk})
	startIntruder(t, c, "plaintext", ports[4:6], configs.PeerTLS{})

	reasons := []string{"bad_certificate", "wrong_node", "plaintext"}
	short := map[string]float64{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("refusals counted by reason at the last look: %v", short)
		}
	})
	testutil.Eventually(t, raceSlack(30*time.Second), "every intruder refused again and again", func() bool {
		for _, r := range reasons {
			sum := 0.0
			for i := range c.N() {
				sum += c.refusedFor(i, r)
			}
			short[r] = sum
			if sum < 5 {
				return false
			}
		}
		return true
	})
	for i := range c.N() {
		st, err := c.Status(i)
		if err != nil {
			t.Fatal(err)
		}
		if st.Term != terms[i] {
			t.Errorf("%s: term %d, was %d before the intruders campaigned", c.Node(i).ID, st.Term, terms[i])
		}
		log := c.RunLog(i)
		for _, r := range reasons {
			if c.refusedFor(i, r) == 0 {
				continue
			}
			lines := 0
			for _, l := range strings.Split(log, "\n") {
				if strings.Contains(l, "refused a peer at the TLS handshake") && strings.Contains(l, `"reason":"`+r+`"`) {
					lines++
				}
			}
			if lines != 1 {
				t.Errorf("%s: %d log lines for %s refusals, want 1 (once per peer and reason)", c.Node(i).ID, lines, r)
			}
		}
		if c.refusedFor(i, "plaintext") > 0 && !strings.Contains(log, "spoke plaintext to this TLS peer port") {
			t.Errorf("%s: the plaintext refusal does not say so", c.Node(i).ID)
		}
	}
	c.WaitRoles(5 * time.Second)
}
