package kafkaha

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
)

// Kafka API keys the tests hold.
const (
	apiFetch  int16 = 1
	apiEndTxn int16 = 26
)

// gate opens a member's connections to the brokers (Config.dial) and holds
// every request of an API key while that key is held: the broker does not
// see it until the key opens. It pauses one side of a member the way a
// stopped process or a slow network would, with the real client and broker.
type gate struct {
	mu     sync.Mutex
	closed map[int16]chan struct{} // closed when the key opens
	seen   map[int16]chan struct{} // closed once a request of the key is held
}

func newGate() *gate {
	return &gate{closed: map[int16]chan struct{}{}, seen: map[int16]chan struct{}{}}
}

// use makes the member's clients dial through g.
func (g *gate) use(c *Config) { c.dial = g.dial }

func (g *gate) hold(key int16) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.closed[key]; !ok {
		g.closed[key], g.seen[key] = make(chan struct{}), make(chan struct{})
	}
}

// held closes once a request of key is held.
func (g *gate) held(key int16) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seen[key]
}

func (g *gate) open(key int16) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.closed[key]; ok {
		close(c)
		delete(g.closed, key)
	}
}

func (g *gate) openAll() {
	g.mu.Lock()
	keys := make([]int16, 0, len(g.closed))
	for k := range g.closed {
		keys = append(keys, k)
	}
	g.mu.Unlock()
	for _, k := range keys {
		g.open(k)
	}
}

func (g *gate) wait(key int16) {
	g.mu.Lock()
	c, ok := g.closed[key]
	if ok {
		select {
		case <-g.seen[key]:
		default:
			close(g.seen[key])
		}
	}
	g.mu.Unlock()
	if ok {
		<-c
	}
}

func (g *gate) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: c, g: g}, nil
}

// gatedConn holds a request before writing it. The client writes each
// request whole: a 4-byte size, then the header, whose first field is the
// API key.
type gatedConn struct {
	net.Conn
	g *gate
}

func (c *gatedConn) Write(p []byte) (int, error) {
	if len(p) >= 6 {
		c.g.wait(int16(binary.BigEndian.Uint16(p[4:6])))
	}
	return c.Conn.Write(p)
}
