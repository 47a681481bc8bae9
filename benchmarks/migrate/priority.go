package migrate

import "container/heap"

// A request is a func with a priority: the request queues run the highest
// priority first, and requests of equal priority in the order they came.
type request struct {
	priority int
	seq      int // order of arrival
	run      func()
}

// A requestQueue is a heap of requests, the next to run at the top. Both
// versions of the request program use it: the migration does not touch it.
type requestQueue []request

var _ heap.Interface = (*requestQueue)(nil)

func (q requestQueue) Len() int { return len(q) }
func (q requestQueue) Less(i, j int) bool {
	if q[i].priority != q[j].priority {
		return q[i].priority > q[j].priority
	}
	return q[i].seq < q[j].seq
}
func (q requestQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *requestQueue) Push(x any)   { *q = append(*q, x.(request)) }
func (q *requestQueue) Pop() any {
	old := *q
	r := old[len(old)-1]
	*q = old[:len(old)-1]
	return r
}
