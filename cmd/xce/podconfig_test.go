package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/xce/xce/configs"
)

func TestParsePod(t *testing.T) {
	for _, tc := range []struct {
		name, set string
		ordinal   int
		bad       bool
	}{
		{name: "xce-0", set: "xce", ordinal: 0},
		{name: "my-xce-12", set: "my-xce", ordinal: 12},
		{name: "xce", bad: true},
		{name: "xce-", bad: true},
		{name: "-3", bad: true},
		{name: "xce-01", bad: true},
		{name: "xce--1", bad: true},
		{name: "xce-a", bad: true},
	} {
		id, err := parsePod(tc.name)
		if (err != nil) != tc.bad {
			t.Errorf("parsePod(%q): %v", tc.name, err)
			continue
		}
		if !tc.bad && (id.set != tc.set || id.ordinal != tc.ordinal || id.name != tc.name) {
			t.Errorf("parsePod(%q) = %+v", tc.name, id)
		}
	}
}

// Pod 0 bootstraps unless another pod answers, then joins those that do;
// every other pod joins the pods before it. A pod's addresses are its
// name under the headless Service.
func TestPlanPodStart(t *testing.T) {
	f := podFlags{service: "xce-peers", ns: "prod", domain: "cluster.local",
		hostFormat: "{pod}.{service}.{namespace}.svc.{domain}", clientPort: 7101, peerPort: 7201, maxProbe: 16}
	host := func(k string) string { return "xce-" + k + ".xce-peers.prod.svc.cluster.local" }
	for _, tc := range []struct {
		name     string
		pod      string
		existing int // pods 1..existing-1 resolve
		answer   []int
		peers    bool
		join     []string
	}{
		{name: "a new cluster's first pod", pod: "xce-0", existing: 1, peers: true},
		{name: "pod 0, others exist but none answers", pod: "xce-0", existing: 3, peers: true},
		{name: "pod 0 replaced, others answer", pod: "xce-0", existing: 3, answer: []int{1, 2},
			join: []string{host("1") + ":7101", host("2") + ":7101"}},
		{name: "pod 0 replaced, one answers", pod: "xce-0", existing: 3, answer: []int{2}, join: []string{host("2") + ":7101"}},
		{name: "the second pod", pod: "xce-1", join: []string{host("0") + ":7101"}},
		{name: "a pod scaled in", pod: "xce-4", join: []string{host("0") + ":7101", host("1") + ":7101", host("2") + ":7101", host("3") + ":7101"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := parsePod(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			var asked []int
			s := planPodStart(f, id, func(k int) (bool, bool) {
				asked = append(asked, k)
				return slices.Contains(tc.answer, k), k >= tc.existing
			})
			wantSelf := configs.Peer{ID: tc.pod, PeerAddr: host(tc.pod[4:]) + ":7201", ClientAddr: host(tc.pod[4:]) + ":7101"}
			if s.self != wantSelf {
				t.Errorf("self %+v, want %+v", s.self, wantSelf)
			}
			if tc.peers != (len(s.peers) == 1 && s.peers[0] == s.self) || (!tc.peers && len(s.peers) > 0) {
				t.Errorf("peers %+v, want bootstrap %v", s.peers, tc.peers)
			}
			if !slices.Equal(s.join, tc.join) {
				t.Errorf("join %v, want %v", s.join, tc.join)
			}
			if id.ordinal > 0 && len(asked) > 0 {
				t.Errorf("pod %d probed %v: only pod 0 looks for others", id.ordinal, asked)
			}
			if id.ordinal == 0 && tc.existing > 0 && len(asked) != tc.existing {
				t.Errorf("pod 0 probed %v with %d pods", asked, tc.existing)
			}
		})
	}
}

const podTemplate = `cluster_id: prod
data_dir: /var/lib/xce/$(POD_NAME)
insecure: true
`

// The template's settings stay, $(POD_NAME) becomes the pod's name, and
// the pod's start is written in; the result is a valid config. A
// template that sets what the pod decides is refused.
func TestRenderPodConfig(t *testing.T) {
	self := configs.Peer{ID: "xce-1", PeerAddr: "xce-1.s.ns.svc.cluster.local:7201", ClientAddr: "xce-1.s.ns.svc.cluster.local:7101"}
	out, err := renderPodConfig([]byte(podTemplate), "xce-1", podStart{self: self, join: []string{"xce-0.s.ns.svc.cluster.local:7101"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := configs.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeID != "xce-1" || c.DataDir != "/var/lib/xce/xce-1" || c.ClusterID != "prod" || c.ClientAddr != self.ClientAddr ||
		c.PeerAddr != self.PeerAddr || len(c.Peers) != 0 || !slices.Equal(c.Join, []string{"xce-0.s.ns.svc.cluster.local:7101"}) {
		t.Fatalf("rendered %+v", c)
	}

	self0 := configs.Peer{ID: "xce-0", PeerAddr: "xce-0.s.ns.svc.cluster.local:7201", ClientAddr: "xce-0.s.ns.svc.cluster.local:7101"}
	out, err = renderPodConfig([]byte(podTemplate), "xce-0", podStart{self: self0, peers: []configs.Peer{self0}})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := configs.Parse(out); err != nil || len(c.Peers) != 1 || c.Peers[0] != self0 || len(c.Join) != 0 {
		t.Fatalf("bootstrap: %+v, %v", c, err)
	}

	for _, bad := range []struct{ template, want string }{
		{podTemplate + "node_id: n1\n", "node_id is the pod's to set"},
		{podTemplate + "join: [a:1]\n", "join is the pod's to set"},
		{"- a\n", "want a YAML mapping"},
		{"cluster_id: [\n", "template"},
		{"cluster_id: prod\n", "data_dir"},
	} {
		if _, err := renderPodConfig([]byte(bad.template), "xce-1", podStart{self: self, join: []string{"xce-0.s.ns.svc.cluster.local:7101"}}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("template %q: %v, want %q", bad.template, err, bad.want)
		}
	}
}
