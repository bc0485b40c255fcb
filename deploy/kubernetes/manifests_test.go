// Package kubernetes holds the manifests that run xce on Kubernetes
// (docs/operations.md, "Running on Kubernetes") and the test that renders
// them as kubectl apply -k would and decodes every object strictly with
// the Kubernetes API types.
package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/xce/xce/configs"
)

// render runs kustomize on dir and returns each object's YAML.
func render(t *testing.T, dir string) [][]byte {
	t.Helper()
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = types.LoadRestrictionsNone
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	var out [][]byte
	for _, r := range m.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// objects are the rendered objects by kind, each decoded strictly: a field
// the API types do not know fails the test.
type objects struct {
	sets        []appsv1.StatefulSet
	deployments []appsv1.Deployment
	services    []corev1.Service
	configMaps  []corev1.ConfigMap
	pdbs        []policyv1.PodDisruptionBudget
	namespaces  []corev1.Namespace
	certs       []certificate
	issuers     int
}

// certificate is the part of cert-manager's Certificate the pods rely on
// (cert-manager's types are not Kubernetes'; its other fields are left to
// its own validation).
type certificate struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		SecretName string   `json:"secretName"`
		URIs       []string `json:"uris"`
		DNSNames   []string `json:"dnsNames"`
		IsCA       bool     `json:"isCA"`
	} `json:"spec"`
}

func decode(t *testing.T, docs [][]byte) objects {
	t.Helper()
	var o objects
	for _, doc := range docs {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatal(err)
		}
		what := head.APIVersion + " " + head.Kind
		switch what {
		case "apps/v1 StatefulSet":
			o.sets = strictAppend(t, o.sets, doc, what)
		case "apps/v1 Deployment":
			o.deployments = strictAppend(t, o.deployments, doc, what)
		case "v1 Service":
			o.services = strictAppend(t, o.services, doc, what)
		case "v1 ConfigMap":
			o.configMaps = strictAppend(t, o.configMaps, doc, what)
		case "policy/v1 PodDisruptionBudget":
			o.pdbs = strictAppend(t, o.pdbs, doc, what)
		case "v1 Namespace":
			o.namespaces = strictAppend(t, o.namespaces, doc, what)
		case "cert-manager.io/v1 Certificate":
			var c certificate
			if err := yaml.Unmarshal(doc, &c); err != nil {
				t.Fatal(err)
			}
			o.certs = append(o.certs, c)
		case "cert-manager.io/v1 Issuer":
			o.issuers++
		default:
			t.Fatalf("unexpected object %s", what)
		}
	}
	return o
}

// strictAppend decodes doc into a T, refusing fields T does not have, and
// appends it to list.
func strictAppend[T any](t *testing.T, list []T, doc []byte, what string) []T {
	t.Helper()
	var v T
	if err := yaml.UnmarshalStrict(doc, &v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, doc)
	}
	return append(list, v)
}

func (o objects) service(t *testing.T, name string) corev1.Service {
	t.Helper()
	for _, s := range o.services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %q", name)
	return corev1.Service{}
}

func container(t *testing.T, cs []corev1.Container, name string) corev1.Container {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// The controller's manifests: every object decodes strictly, and the
// StatefulSet holds what running a quorum needs.
func TestControllerManifests(t *testing.T) {
	o := decode(t, render(t, "."))
	if len(o.sets) != 1 || len(o.pdbs) != 1 || len(o.configMaps) != 1 || len(o.namespaces) != 1 {
		t.Fatalf("want one StatefulSet, PDB, ConfigMap and Namespace: %d, %d, %d, %d", len(o.sets), len(o.pdbs), len(o.configMaps), len(o.namespaces))
	}
	s := o.sets[0]
	checkStatefulSet(t, o, s, 3)
	checkTemplate(t, o.configMaps[0], s)

	// One voter down at a time, of the set's pods.
	p := o.pdbs[0]
	if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 || p.Spec.MinAvailable != nil {
		t.Errorf("PDB: maxUnavailable %v, minAvailable %v; want maxUnavailable 1", p.Spec.MaxUnavailable, p.Spec.MinAvailable)
	}
	if !selects(p.Spec.Selector.MatchLabels, s.Spec.Template.Labels) {
		t.Errorf("PDB selects %v, the pods are %v", p.Spec.Selector.MatchLabels, s.Spec.Template.Labels)
	}
	// Clients reach members through a Service of their own.
	c := o.service(t, "xce")
	if c.Spec.ClusterIP == corev1.ClusterIPNone || !selects(c.Spec.Selector, s.Spec.Template.Labels) || c.Spec.Ports[0].Port != 7101 {
		t.Errorf("client Service %+v", c.Spec)
	}
}

// Five voters by one value: the replicas, and the TLS volume has each
// pod's Secret.
func TestFiveVoters(t *testing.T) {
	overlay := t.TempDir()
	base, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(overlay, base)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("resources:\n  - %s\nreplicas:\n  - name: xce\n    count: 5\n", rel)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	o := decode(t, render(t, overlay))
	checkStatefulSet(t, o, o.sets[0], 5)
}

func checkStatefulSet(t *testing.T, o objects, s appsv1.StatefulSet, replicas int32) {
	t.Helper()
	spec := s.Spec.Template.Spec
	if s.Spec.Replicas == nil || *s.Spec.Replicas != replicas {
		t.Errorf("replicas %v, want %d", s.Spec.Replicas, replicas)
	}
	if s.Spec.PodManagementPolicy != appsv1.OrderedReadyPodManagement {
		t.Errorf("pod management %q: pod 0 must bootstrap before the others join", s.Spec.PodManagementPolicy)
	}
	// The headless Service names each pod, before it is ready.
	h := o.service(t, s.Spec.ServiceName)
	if h.Spec.ClusterIP != corev1.ClusterIPNone || !h.Spec.PublishNotReadyAddresses || !selects(h.Spec.Selector, s.Spec.Template.Labels) {
		t.Errorf("headless Service %q: %+v", h.Name, h.Spec)
	}
	// Not root, nothing to escalate to.
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod security context %+v: want a non-root user", psc)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the pods need no service account token")
	}
	// One voter per machine.
	a := spec.Affinity
	if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 ||
		a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("affinity %+v: want required anti-affinity per host", a)
	}
	// The init container writes the node config from the pod's identity.
	if len(spec.InitContainers) != 1 {
		t.Fatalf("%d init containers, want pod-config", len(spec.InitContainers))
	}
	ic := spec.InitContainers[0]
	if !slices.Equal(ic.Args[:1], []string{"pod-config"}) || env(ic, "XCE_SERVICE") == nil || env(ic, "XCE_SERVICE").Value != s.Spec.ServiceName ||
		env(ic, "POD_NAME") == nil || env(ic, "POD_NAME").ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("init container %+v", ic)
	}
	x := container(t, spec.Containers, "xce")
	for _, c := range []corev1.Container{ic, x} {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s: security context %+v", c.Name, sc)
		}
	}
	// Ready when it serves as a member, alive while it answers.
	if r := x.ReadinessProbe; r == nil || r.HTTPGet == nil || r.HTTPGet.Path != "/readyz?standby=1" || r.HTTPGet.Port.String() != "client" {
		t.Errorf("readiness probe %+v", r)
	}
	if l := x.LivenessProbe; l == nil || l.HTTPGet == nil || l.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v", l)
	}
	// The leadership is handed on before the stop, within the grace period.
	ps := x.Lifecycle
	if ps == nil || ps.PreStop == nil || ps.PreStop.Exec == nil || !slices.Contains(ps.PreStop.Exec.Command, "--if-primary") ||
		!slices.Equal(ps.PreStop.Exec.Command[1:3], []string{"leader", "transfer"}) {
		t.Errorf("preStop %+v", ps)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g < 10+15 {
		t.Errorf("grace period %v: the hook's 10 s and the server's 15 s must fit", g)
	}
	if env(x, "XCE_ADDR") == nil || !strings.Contains(env(x, "XCE_ADDR").Value, "$(POD_NAME)."+s.Spec.ServiceName) {
		t.Errorf("the hook's XCE_ADDR %+v: want the pod's own address", env(x, "XCE_ADDR"))
	}
	// Sized, with the data dir on the pod's own volume.
	if x.Resources.Requests.Cpu().IsZero() || x.Resources.Requests.Memory().IsZero() || x.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", x.Resources)
	}
	if len(s.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("%d volume claim templates", len(s.Spec.VolumeClaimTemplates))
	}
	mounted := false
	for _, m := range x.VolumeMounts {
		mounted = mounted || (m.Name == s.Spec.VolumeClaimTemplates[0].Name && m.MountPath == "/var/lib/xce")
	}
	if !mounted {
		t.Error("the claim is not mounted at /var/lib/xce")
	}
	// Each pod's certificate, by name.
	var tls []string
	for _, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.Secret != nil {
				tls = append(tls, src.Secret.Name)
			}
		}
	}
	for k := range replicas {
		if !slices.Contains(tls, fmt.Sprintf("xce-%d-tls", k)) {
			t.Errorf("no TLS Secret for pod xce-%d in %v", k, tls)
		}
	}
}

// checkTemplate: the ConfigMap's node config, with a pod's identity
// added as pod-config adds it, is a valid config whose files are mounted.
func checkTemplate(t *testing.T, cm corev1.ConfigMap, s appsv1.StatefulSet) {
	t.Helper()
	tmpl := cm.Data["node.yaml"]
	for _, k := range []string{"node_id:", "client_addr:", "peer_addr:", "peers:", "join:"} {
		if strings.Contains(tmpl, "\n"+k) || strings.HasPrefix(tmpl, k) {
			t.Errorf("the template sets %s, which pod-config writes", k)
		}
	}
	host := "xce-1." + s.Spec.ServiceName + ".xce.svc.cluster.local"
	node := strings.ReplaceAll(tmpl, "$(POD_NAME)", "xce-1") +
		fmt.Sprintf("node_id: xce-1\nclient_addr: %s:7101\npeer_addr: %s:7201\njoin: [xce-0.%s.xce.svc.cluster.local:7101]\n", host, host, s.Spec.ServiceName)
	c, err := configs.Parse([]byte(node))
	if err != nil {
		t.Fatalf("the template with a pod's identity: %v", err)
	}
	mounts := container(t, s.Spec.Template.Spec.Containers, "xce").VolumeMounts
	for _, f := range []string{c.TLS.CertFile, c.PeerTLS.CAFile, c.PeerTLS.CertFile, c.Auth.TokensFile} {
		if f == "" {
			t.Fatalf("the template leaves a TLS or tokens file out: %+v", c)
		}
		under := false
		for _, m := range mounts {
			under = under || strings.HasPrefix(f, m.MountPath+"/")
		}
		if !under {
			t.Errorf("%s is under no mount", f)
		}
	}
	if !strings.HasPrefix(c.DataDir, "/var/lib/xce/") {
		t.Errorf("data_dir %s is not on the volume", c.DataDir)
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// The example workers: labelled with their zone, and given the time to
// hand their actives over.
func TestWorkerExample(t *testing.T) {
	o := decode(t, render(t, "examples"))
	var err error
	if len(o.deployments) != 1 {
		t.Fatalf("%d Deployments", len(o.deployments))
	}
	d := o.deployments[0]
	w := container(t, d.Spec.Template.Spec.Containers, "worker")
	z := env(w, "ZONE")
	if z == nil || z.ValueFrom == nil || z.ValueFrom.FieldRef == nil || z.ValueFrom.FieldRef.FieldPath != "metadata.labels['topology.kubernetes.io/zone']" {
		t.Errorf("ZONE %+v: want the pod's zone label", z)
	}
	if !slices.Contains(w.Args, "--label=zone=$(ZONE)") {
		t.Errorf("args %v: want --label=zone=$(ZONE)", w.Args)
	}
	var drain time.Duration
	for _, a := range w.Args {
		if v, ok := strings.CutPrefix(a, "--drain-timeout="); ok {
			if drain, err = time.ParseDuration(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	g := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if drain == 0 || g == nil || time.Duration(*g)*time.Second < drain+10*time.Second {
		t.Errorf("drain timeout %v, grace %v s: the grace must cover the drain and the exit", drain, g)
	}
	sc := d.Spec.Template.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("worker security context %+v", sc)
	}
}

// The certificates name each pod's node of the cluster the template
// names, in the Secret the StatefulSet reads.
func TestCertificates(t *testing.T) {
	o := decode(t, render(t, "cert-manager"))
	base := decode(t, render(t, "."))
	c, err := configs.Parse([]byte(strings.ReplaceAll(base.configMaps[0].Data["node.yaml"], "$(POD_NAME)", "xce-0") +
		"node_id: xce-0\nclient_addr: 127.0.0.1:7101\npeer_addr: 127.0.0.1:7201\npeers: [{id: xce-0, peer_addr: 127.0.0.1:7201, client_addr: 127.0.0.1:7101}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if o.issuers != 2 {
		t.Errorf("%d issuers, want the self-signed one and the CA", o.issuers)
	}
	pods := 0
	for _, cert := range o.certs {
		if cert.Spec.IsCA {
			continue
		}
		pods++
		pod := cert.Metadata.Name
		if cert.Spec.SecretName != pod+"-tls" || !slices.Equal(cert.Spec.URIs, []string{"xce://" + c.ClusterID + "/node/" + pod}) ||
			!slices.Contains(cert.Spec.DNSNames, pod+".xce-peers.xce.svc.cluster.local") {
			t.Errorf("certificate %s: %+v", pod, cert.Spec)
		}
	}
	if pods != 5 {
		t.Errorf("%d pod certificates, want 5", pods)
	}
	if !bytes.Contains([]byte(base.configMaps[0].Data["node.yaml"]), []byte("cluster_id: "+c.ClusterID)) {
		t.Error("cluster id")
	}
}
