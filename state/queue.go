package state

// queueChunk is the number of elements in one chunk of a queue.
const queueChunk = 1024

// queue is a FIFO kept in fixed-size chunks, so pushes and pops never copy
// what it holds however long it grows (a slice would copy it all at every
// growth and compaction, under the FSM's lock). An element, once pushed,
// is never written again: a view (see view) reads the chunks while the
// queue moves on. Popped elements stay in their chunk until the whole
// chunk is popped and dropped.
type queue[T any] struct {
	chunks [][]T // the first chunk's elements start at head
	head   int
	n      int
	pushed uint64 // elements ever pushed: the next push's sequence number
}

func (q *queue[T]) len() int { return q.n }

// push appends v and returns its sequence number (see at).
func (q *queue[T]) push(v T) uint64 {
	if len(q.chunks) == 0 || len(q.chunks[len(q.chunks)-1]) == queueChunk {
		q.chunks = append(q.chunks, make([]T, 0, queueChunk))
	}
	last := len(q.chunks) - 1
	q.chunks[last] = append(q.chunks[last], v)
	q.n++
	q.pushed++
	return q.pushed - 1
}

// adopt appends the elements of s, taking s's memory as chunks of the
// queue where the last chunk is full: every chunk but the last stays
// full. The caller must not change s afterwards.
func (q *queue[T]) adopt(s []T) {
	if k := len(q.chunks); k > 0 && len(q.chunks[k-1]) < queueChunk {
		n := min(queueChunk-len(q.chunks[k-1]), len(s))
		for _, v := range s[:n] {
			q.push(v)
		}
		s = s[n:]
	}
	for len(s) > 0 {
		n := min(queueChunk, len(s))
		q.chunks = append(q.chunks, s[:n:n])
		q.n += n
		q.pushed += uint64(n)
		s = s[n:]
	}
}

// first is the sequence number of the oldest element held (of the next
// push's when the queue is empty).
func (q *queue[T]) first() uint64 { return q.pushed - uint64(q.n) }

// at returns the element with sequence number seq, if it is still held.
func (q *queue[T]) at(seq uint64) (*T, bool) {
	first := q.first()
	if seq < first || seq >= q.pushed {
		return nil, false
	}
	p := q.head + int(seq-first)
	return &q.chunks[p/queueChunk][p%queueChunk], true
}

// front returns the oldest element; the queue must not be empty.
func (q *queue[T]) front() T { return q.chunks[0][q.head] }

// pop removes and returns the oldest element; the queue must not be empty.
func (q *queue[T]) pop() T {
	c := q.chunks[0]
	v := c[q.head]
	q.head++
	q.n--
	if q.head == queueChunk || q.n == 0 {
		// The chunk is done with (a view may still read it): drop it.
		q.chunks[0] = nil
		q.chunks = q.chunks[1:]
		if q.n == 0 {
			q.chunks = q.chunks[:0]
		}
		q.head = 0
	}
	return v
}

// all returns a copy of the elements, oldest first.
func (q *queue[T]) all() []T { return q.view().all() }

// view returns the queue's elements as of now, readable while the queue
// moves on.
func (q *queue[T]) view() queueView[T] {
	return queueView[T]{chunks: append([][]T(nil), q.chunks...), head: q.head, n: q.n}
}

// queueView is a queue's elements as of one moment.
type queueView[T any] struct {
	chunks [][]T
	head   int
	n      int
}

func (v queueView[T]) len() int { return v.n }

// all returns a copy of the elements, oldest first.
func (v queueView[T]) all() []T {
	out := make([]T, 0, v.n)
	for i, c := range v.chunks {
		if i == 0 {
			c = c[v.head:]
		}
		out = append(out, c...)
	}
	return out
}
