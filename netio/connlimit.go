package netio

import (
	"container/list"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// limitListener admits the connections of a listener under two caps: the
// general connections, and the health reserve (see Limits). When a pool is
// full, a new connection takes the place of the pool's connection that has
// waited longest without sending a request, else of the one idle longest
// between requests (if idle for idleAfter at least); a connection with a
// request in progress is never closed to make room.
type limitListener struct {
	net.Listener
	s         *Server
	idleAfter time.Duration

	mu      sync.Mutex
	general pool
	reserve pool
}

// pool is one cap's connections; guarded by limitListener.mu.
type pool struct {
	name   string
	cap, n int
	unused list.List // of *conn that have not sent a request yet, oldest first
	idle   list.List // of *conn idle between requests, longest idle first
}

func newLimitListener(l net.Listener, s *Server, general, reserve int) *limitListener {
	ll := &limitListener{Listener: l, s: s, idleAfter: s.lim.ReadHeaderTimeout}
	ll.general.name, ll.general.cap = PoolGeneral, general
	ll.reserve.name, ll.reserve.cap = PoolReserve, reserve
	return ll
}

// Accept returns the next connection admitted under the caps. One that
// finds no place is closed at once and counted.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.s.refusals.note("accept_error", err.Error())
			}
			return nil, err
		}
		c, victim, kind := l.admit(nc)
		if victim != nil {
			l.s.m.evicted[kind].Inc()
			l.s.refusals.note("evicted_"+kind, victim.remote)
			_ = victim.Conn.Close()
		}
		if c != nil {
			return c, nil
		}
		remote := nc.RemoteAddr().String()
		l.s.refuse(ReasonCap, remote)
		_ = nc.Close()
	}
}

// admit places nc in the general pool or else the reserve, making room if
// it can; victim is the connection it made room from, to be closed.
func (l *limitListener) admit(nc net.Conn) (c, victim *conn, kind string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range []*pool{&l.general, &l.reserve} {
		if p.n >= p.cap {
			if victim, kind = p.victim(now, l.idleAfter); victim == nil {
				continue
			}
			l.remove(victim)
		}
		c = &conn{Conn: nc, l: l, p: p, reserve: p == &l.reserve, opened: now, remote: nc.RemoteAddr().String(), inPool: true}
		p.n++
		c.in, c.elem = &p.unused, p.unused.PushBack(c)
		l.s.m.open[p.name].Set(float64(p.n))
		return c, victim, kind
	}
	return nil, nil, ""
}

// victim is the connection to close to make room in p, or nil.
func (p *pool) victim(now time.Time, idleAfter time.Duration) (*conn, string) {
	if e := p.unused.Front(); e != nil {
		return e.Value.(*conn), EvictedUnused
	}
	if e := p.idle.Front(); e != nil {
		if c := e.Value.(*conn); now.Sub(c.idleSince) >= idleAfter {
			return c, EvictedIdle
		}
	}
	return nil, ""
}

// remove takes c out of its pool; l.mu is held.
func (l *limitListener) remove(c *conn) {
	if !c.inPool {
		return
	}
	c.inPool = false
	c.unlist()
	c.p.n--
	l.s.m.open[c.p.name].Set(float64(c.p.n))
}

// conn is an admitted connection. It tells its pool when it serves and
// when it idles, and counts the timeouts and malformed requests that end
// it.
type conn struct {
	net.Conn
	l       *limitListener
	p       *pool
	reserve bool
	opened  time.Time
	remote  string

	// Guarded by l.mu.
	inPool      bool
	in          *list.List // the pool list holding elem, nil while serving
	elem        *list.Element
	active      int  // requests in the handler
	everServed  bool // a request has reached the handler
	idlePending bool // the server went idle while a handler still ran
	doomed      bool // refused: to be closed, first to make room
	lastEnd     time.Time
	idleSince   time.Time // when its last request's handler ended

	served        atomic.Bool  // a request reached the handler since the connection last went idle
	readSinceIdle atomic.Bool  // bytes arrived since the connection last went idle
	readDL        atomic.Int64 // the read deadline set, in Unix nanoseconds; 0: none
	writeDL       atomic.Int64 // the write deadline set, likewise
	counted       atomic.Bool  // a refusal was counted for the connection
	closeOnce     sync.Once
}

// unlist takes c out of its pool's lists; l.mu is held.
func (c *conn) unlist() {
	if c.in != nil {
		c.in.Remove(c.elem)
		c.in, c.elem = nil, nil
	}
}

// begin marks a request in the handler: the connection is busy.
func (c *conn) begin() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.active++
	c.everServed = true
	c.idlePending = false
	c.served.Store(true)
	c.unlist()
}

// end marks the end of a request's handler.
func (c *conn) end() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.active--
	c.lastEnd = time.Now()
	if c.active == 0 && c.doomed && c.inPool {
		c.unlist()
		c.in, c.elem = &c.p.unused, c.p.unused.PushFront(c)
		return
	}
	if c.active == 0 && c.idlePending {
		c.idlePending = false
		c.toIdle()
	}
}

// doom marks a connection whose request was refused: once its handler
// ends, it is the first to make room.
func (c *conn) doom() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.doomed = true
}

// state follows the server's view of the connection.
func (c *conn) state(st http.ConnState) {
	if st != http.StateIdle {
		return
	}
	c.readSinceIdle.Store(false)
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.active > 0 {
		c.idlePending = true
		return
	}
	c.toIdle()
}

// toIdle moves a connection that has served into its pool's idle list (one
// that never has stays with the unused); l.mu is held.
func (c *conn) toIdle() {
	c.served.Store(false)
	if !c.inPool || !c.everServed {
		return
	}
	c.unlist()
	// Idle since its last request ended: the server may get to tell
	// one connection idle after another that ended later.
	c.idleSince = c.lastEnd
	c.in = &c.p.idle
	e := c.in.Back()
	for e != nil && e.Value.(*conn).idleSince.After(c.idleSince) {
		e = e.Prev()
	}
	if e == nil {
		c.elem = c.in.PushFront(c)
	} else {
		c.elem = c.in.InsertAfter(c, e)
	}
}

// Close releases the connection's place.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.l.mu.Lock()
		c.l.remove(c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// CloseWrite lets the server half-close before it closes after an error,
// so the client reads the error.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.readSinceIdle.Load() {
		c.readSinceIdle.Store(true)
	}
	if err != nil && c.deadlinePassed(err, c.readDL.Load()) {
		c.readTimedOut()
	}
	return n, err
}

// readTimedOut counts a request whose headers did not arrive in time (a
// body's timeout is counted by its handler's deadlineBody; a connection
// that stayed idle is not a refusal).
func (c *conn) readTimedOut() {
	c.l.mu.Lock()
	waiting := c.active == 0 && !c.served.Load() && (!c.everServed || c.readSinceIdle.Load())
	c.l.mu.Unlock()
	if waiting && c.counted.CompareAndSwap(false, true) {
		c.l.s.refuse(ReasonReadTimeout, c.remote)
	}
}

func (c *conn) Write(b []byte) (int, error) {
	// The server answers a request it cannot take (no handler runs) with
	// a status line of its own.
	if len(b) >= 12 && !c.served.Load() && string(b[:9]) == "HTTP/1.1 " {
		switch string(b[9:12]) {
		case "431":
			c.refuseOnce(ReasonHeaderTooLarge)
		case "400":
			c.refuseOnce(ReasonBadRequest)
		}
	}
	n, err := c.Conn.Write(b)
	if err != nil && c.deadlinePassed(err, c.writeDL.Load()) {
		c.refuseOnce(ReasonWriteTimeout)
	}
	return n, err
}

// refuseOnce counts a refusal that ends the connection, unless one of
// its requests was counted already (what ends it then follows from that).
func (c *conn) refuseOnce(reason string) {
	if c.counted.CompareAndSwap(false, true) {
		c.l.s.refuse(reason, c.remote)
	}
}

// refused counts the refusal of one of the connection's requests (HTTP/2
// carries many on one connection).
func (c *conn) refused(reason string) {
	c.counted.Store(true)
	c.l.s.refuse(reason, c.remote)
}

// deadlinePassed tells a deadline that passed from the server cutting a
// read short on purpose (it sets a deadline long past to do so).
func (c *conn) deadlinePassed(err error, deadline int64) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) && deadline > c.opened.UnixNano()
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (c *conn) SetDeadline(t time.Time) error {
	c.readDL.Store(unixNano(t))
	c.writeDL.Store(unixNano(t))
	return c.Conn.SetDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.readDL.Store(unixNano(t))
	return c.Conn.SetReadDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.writeDL.Store(unixNano(t))
	return c.Conn.SetWriteDeadline(t)
}
