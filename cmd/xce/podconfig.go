package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/xce/xce/configs"
)

// podFlags are where a StatefulSet pod's identity comes from: flags, or
// the environment the manifests set (the downward API's pod name and
// namespace, the headless Service's name).
type podFlags struct {
	template, out        string
	pod, service, ns     string
	domain, hostFormat   string
	clientPort, peerPort int
	probeTimeout         time.Duration
	maxProbe             int
}

// podOwned are the keys pod-config writes: a template setting them is
// refused, since the pod's identity decides them.
var podOwned = []string{"node_id", "client_addr", "peer_addr", "peers", "join"}

func podConfigCmd() *cobra.Command {
	var f podFlags
	cmd := &cobra.Command{
		Use:   "pod-config --template FILE --out FILE",
		Short: "Write a StatefulSet pod's node config: its id from the pod name, bootstrap or join",
		Long: `Write the node config of a pod of a StatefulSet (an init container's job, see
docs/operations.md, "Running on Kubernetes"): the template's settings, with
$(POD_NAME) replaced by the pod's name, plus what the pod's identity decides.

  node_id      the pod's name (xce-2)
  client_addr  HOST:--client-port, HOST from --host-format (by default the pod's
  peer_addr    HOST:--peer-port      name under the headless Service)
  peers/join   the pod with ordinal 0 bootstraps (peers: itself) unless a pod of a
               higher ordinal answers on its client port, then it joins those;
               every other pod joins the pods of lower ordinals.

A data dir that already holds Raft state ignores both peers and join, so the same
config serves every restart. The template may not set node_id, client_addr,
peer_addr, peers or join. The result is validated as xce server would.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.template == "" || f.out == "" {
				return usageErr("pod-config: --template and --out are required")
			}
			return runPodConfig(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.template, "template", "", "the node config template (YAML)")
	fl.StringVar(&f.out, "out", "", "where to write the pod's node config")
	fl.StringVar(&f.pod, "pod", os.Getenv("POD_NAME"), "the pod's name, ending in -<ordinal> (env POD_NAME)")
	fl.StringVar(&f.service, "service", os.Getenv("XCE_SERVICE"), "the StatefulSet's headless Service (env XCE_SERVICE)")
	fl.StringVar(&f.ns, "namespace", os.Getenv("POD_NAMESPACE"), "the pod's namespace (env POD_NAMESPACE)")
	fl.StringVar(&f.domain, "cluster-domain", envOr("XCE_CLUSTER_DOMAIN", "cluster.local"), "the Kubernetes cluster's DNS domain (env XCE_CLUSTER_DOMAIN)")
	fl.StringVar(&f.hostFormat, "host-format", "{pod}.{service}.{namespace}.svc.{domain}",
		"a pod's host name, from {pod}, {statefulset}, {ordinal}, {service}, {namespace} and {domain}")
	fl.IntVar(&f.clientPort, "client-port", 7101, "every pod's client port")
	fl.IntVar(&f.peerPort, "peer-port", 7201, "every pod's peer port")
	fl.DurationVar(&f.probeTimeout, "probe-timeout", 2*time.Second, "how long pod 0 waits for each other pod's client port to answer")
	fl.IntVar(&f.maxProbe, "max-probe", 16, "how many other pods pod 0 looks for, at most")
	return cmd
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// podIdentity is a StatefulSet pod's place: its set and ordinal.
type podIdentity struct {
	name, set string
	ordinal   int
}

// parsePod reads a StatefulSet pod's name: the set's name, a dash, the
// ordinal.
func parsePod(name string) (podIdentity, error) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return podIdentity{}, fmt.Errorf("pod name %q does not end in -<ordinal>: is it a StatefulSet's pod?", name)
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil || n < 0 || strconv.Itoa(n) != name[i+1:] || strings.HasSuffix(name[:i], "-") {
		return podIdentity{}, fmt.Errorf("pod name %q does not end in -<ordinal>: is it a StatefulSet's pod?", name)
	}
	return podIdentity{name: name, set: name[:i], ordinal: n}, nil
}

// host is the host name of the set's pod with ordinal k.
func (f podFlags) host(id podIdentity, k int) string {
	return strings.NewReplacer("{pod}", id.set+"-"+strconv.Itoa(k), "{statefulset}", id.set,
		"{ordinal}", strconv.Itoa(k), "{service}", f.service, "{namespace}", f.ns, "{domain}", f.domain).Replace(f.hostFormat)
}

// podStart is how a pod starts: with peers (bootstrap) or join.
type podStart struct {
	self  configs.Peer
	peers []configs.Peer
	join  []string
}

// planPodStart decides a pod's start. answers says whether the pod with
// ordinal k answers on its client port, and stop that no pod k exists
// (its name does not resolve), which ends pod 0's search.
func planPodStart(f podFlags, id podIdentity, answers func(k int) (ok, stop bool)) podStart {
	addr := func(k, port int) string { return net.JoinHostPort(f.host(id, k), strconv.Itoa(port)) }
	s := podStart{self: configs.Peer{ID: id.name, PeerAddr: addr(id.ordinal, f.peerPort), ClientAddr: addr(id.ordinal, f.clientPort)}}
	if id.ordinal > 0 {
		for k := range id.ordinal {
			s.join = append(s.join, addr(k, f.clientPort))
		}
		return s
	}
	// Pod 0 bootstraps a new cluster unless one runs: a pod 0 whose volume
	// was replaced joins the others instead of starting a second cluster.
	for k := 1; k <= f.maxProbe; k++ {
		ok, stop := answers(k)
		if stop {
			break
		}
		if ok {
			s.join = append(s.join, addr(k, f.clientPort))
		}
	}
	if len(s.join) == 0 {
		s.peers = []configs.Peer{s.self}
	}
	return s
}

// renderPodConfig is the template with $(POD_NAME) replaced and the
// pod's start written in, checked as xce server checks its config.
func renderPodConfig(template []byte, pod string, s podStart) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(bytes.ReplaceAll(template, []byte("$(POD_NAME)"), []byte(pod)), &root); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("template: want a YAML mapping")
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		for _, k := range podOwned {
			if m.Content[i].Value == k {
				return nil, fmt.Errorf("template line %d: %s is the pod's to set; leave it out", m.Content[i].Line, k)
			}
		}
	}
	add := func(key string, v any) error {
		var n yaml.Node
		if err := n.Encode(v); err != nil {
			return err
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, &n)
		return nil
	}
	for _, kv := range []struct {
		k string
		v any
	}{{"node_id", s.self.ID}, {"client_addr", s.self.ClientAddr}, {"peer_addr", s.self.PeerAddr}, {"peers", s.peers}, {"join", s.join}} {
		if err := add(kv.k, kv.v); err != nil {
			return nil, err
		}
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	if _, err := configs.Parse(out); err != nil {
		return nil, fmt.Errorf("the pod's config: %w", err)
	}
	return out, nil
}

func runPodConfig(ctx context.Context, f podFlags) error {
	if f.pod == "" || f.service == "" || f.ns == "" {
		return usageErr("pod-config: the pod's name, its namespace and the headless Service are required (--pod, --namespace, --service or POD_NAME, POD_NAMESPACE, XCE_SERVICE)")
	}
	id, err := parsePod(f.pod)
	if err != nil {
		return usageErr("pod-config: %v", err)
	}
	template, err := os.ReadFile(f.template)
	if err != nil {
		return err
	}
	s := planPodStart(f, id, func(k int) (bool, bool) { return probePod(ctx, f, id, k) })
	out, err := renderPodConfig(template, id.name, s)
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.out, out, 0o600); err != nil {
		return err
	}
	how := "bootstraps a new cluster"
	if len(s.join) > 0 {
		how = "joins " + strings.Join(s.join, ", ")
	}
	fmt.Fprintf(os.Stderr, "pod-config: %s is node %s at %s and, with an empty data dir, %s\n", id.name, s.self.ID, s.self.ClientAddr, how)
	return nil
}

// probePod says whether pod k answers on its client port, or that its
// name does not resolve (no such pod).
func probePod(ctx context.Context, f podFlags, id podIdentity, k int) (ok, stop bool) {
	host := f.host(id, k)
	ctx, cancel := context.WithTimeout(ctx, f.probeTimeout)
	defer cancel()
	if _, err := net.DefaultResolver.LookupHost(ctx, host); err != nil {
		return false, true
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(f.clientPort)))
	if err != nil {
		return false, false
	}
	_ = c.Close()
	return true, false
}
