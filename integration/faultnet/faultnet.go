// Package faultnet is a fault-injecting TCP proxy for the Raft peer links of
// a test cluster. Each node gets a proxy in front of its peer listener and
// dials out from its own loopback IP (peer_listen_addr), so the proxy knows
// both ends of every connection and can cut any pair.
package faultnet

import (
	"errors"
	"io"
	"net"
	"sync"
)

type pair struct{ from, to string }

// Net is the set of proxies and the current partition.
type Net struct {
	mu      sync.Mutex
	ids     map[string]string // source IP -> node id
	blocked map[pair]bool
	conns   map[pair]map[net.Conn]struct{}
	proxies []*proxy
	closed  bool // Close has begun: no connection is forwarded any more
	wg      sync.WaitGroup
}

// New returns an empty network.
func New() *Net {
	return &Net{ids: map[string]string{}, blocked: map[pair]bool{}, conns: map[pair]map[net.Conn]struct{}{}}
}

// Node registers the source IP a node dials from.
func (n *Net) Node(id, sourceIP string) {
	n.mu.Lock()
	n.ids[sourceIP] = id
	n.mu.Unlock()
}

type proxy struct {
	l      net.Listener
	target string
	to     string
}

// Proxy listens on listenAddr and forwards to node to at targetAddr.
// It returns the address it listens on.
func (n *Net) Proxy(listenAddr, to, targetAddr string) (string, error) {
	l, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return "", err
	}
	p := &proxy{l: l, target: targetAddr, to: to}
	n.mu.Lock()
	n.proxies = append(n.proxies, p)
	n.mu.Unlock()
	n.wg.Go(func() { n.accept(p) })
	return l.Addr().String(), nil
}

func (n *Net) accept(p *proxy) {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		n.wg.Go(func() { n.serve(p, c) })
	}
}

func (n *Net) serve(p *proxy, in net.Conn) {
	host, _, _ := net.SplitHostPort(in.RemoteAddr().String())
	n.mu.Lock()
	pr := pair{from: n.ids[host], to: p.to}
	if n.blocked[pr] || n.closed {
		n.mu.Unlock()
		in.Close()
		return
	}
	n.mu.Unlock()
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	n.mu.Lock()
	if n.blocked[pr] || n.closed { // blocked, or closed, while dialing
		n.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	if n.conns[pr] == nil {
		n.conns[pr] = map[net.Conn]struct{}{}
	}
	n.conns[pr][in], n.conns[pr][out] = struct{}{}, struct{}{}
	n.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
	wg.Go(func() { _, _ = io.Copy(in, out); in.Close() })
	wg.Wait()
	n.mu.Lock()
	delete(n.conns[pr], in)
	delete(n.conns[pr], out)
	n.mu.Unlock()
}

// Isolate cuts every link to and from id, both ways, closing open
// connections; new ones are closed as soon as they are accepted.
func (n *Net) Isolate(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, other := range n.ids {
		if other == id {
			continue
		}
		for _, pr := range []pair{{id, other}, {other, id}} {
			n.blocked[pr] = true
			for c := range n.conns[pr] {
				c.Close()
			}
		}
	}
}

// Heal restores every link.
func (n *Net) Heal() {
	n.mu.Lock()
	n.blocked = map[pair]bool{}
	n.mu.Unlock()
}

// Close stops every proxy and waits for their goroutines.
func (n *Net) Close() error {
	n.mu.Lock()
	// A connection whose dial to its target is under way is not in conns
	// yet: it sees closed when it comes back, rather than be forwarded
	// with nobody left to close it (Close would wait for it for good).
	n.closed = true
	var errs []error
	for _, p := range n.proxies {
		errs = append(errs, p.l.Close())
	}
	for _, cs := range n.conns {
		for c := range cs {
			c.Close()
		}
	}
	n.mu.Unlock()
	n.wg.Wait()
	return errors.Join(errs...)
}
