package state

// queueChunk is the number of elements in one chunk of a queue.
const queueChunk = 1024

// queue is a FIFO kept in fixed-size chunks, so pushes and pops never copy
// what it holds however long it grows (a slice would copy it all at every
// growth and compaction, under the FSM's lock).
type queue[T any] struct {
	chunks [][]T // the first chunk's elements start at head
	head   int
	n      int
}

// queueOf returns a queue holding a copy of s, in order.
func queueOf[T any](s []T) queue[T] {
	var q queue[T]
	for _, v := range s {
		q.push(v)
	}
	return q
}

func (q *queue[T]) len() int { return q.n }

func (q *queue[T]) push(v T) {
	if len(q.chunks) == 0 || len(q.chunks[len(q.chunks)-1]) == queueChunk {
		q.chunks = append(q.chunks, make([]T, 0, queueChunk))
	}
	last := len(q.chunks) - 1
	q.chunks[last] = append(q.chunks[last], v)
	q.n++
}

// front returns the oldest element; the queue must not be empty.
func (q *queue[T]) front() T { return q.chunks[0][q.head] }

// pop removes and returns the oldest element; the queue must not be empty.
func (q *queue[T]) pop() T {
	c := q.chunks[0]
	v := c[q.head]
	var zero T
	c[q.head] = zero // drop references for the collector
	q.head++
	q.n--
	if q.head == len(c) {
		if len(q.chunks) == 1 {
			q.chunks[0] = c[:0] // empty: reuse the chunk
		} else {
			q.chunks[0] = nil
			q.chunks = q.chunks[1:]
		}
		q.head = 0
	}
	return v
}

// all returns a copy of the elements, oldest first.
func (q *queue[T]) all() []T {
	out := make([]T, 0, q.n)
	for i, c := range q.chunks {
		if i == 0 {
			c = c[q.head:]
		}
		out = append(out, c...)
	}
	return out
}
