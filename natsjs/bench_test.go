package natsjs_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// BenchmarkLoopback measures jobs per second through an embedded server on
// loopback: Run on a pool of n workers against a hand-written loop over
// Messages() in n goroutines, each job a handler call and an ack. Every
// run publishes b.N jobs before the timer starts; run it with a fixed
// -benchtime (such as 20000x) so that all consume the same number, and
// interleave the runs:
//
//	for i in 1 2 3 4 5 6; do go test -run '^$' -bench 'Loopback/work=/n=/impl=(Run|RunNoCarry|Messages)$' -benchtime 20000x; done > bench.txt
//	go run golang.org/x/perf/cmd/benchstat@latest -col /impl bench.txt
//
// (-bench Loopback runs every implementation below.)
//
// The work is either nothing ("none", which shows the adapter's cost per
// job at its worst) or 1ms asleep ("sleep1ms", a job that waits on I/O).
// Besides jobs/s, it reports cpu-ns/job: the CPU time, user and system, of
// the whole process (the embedded server's included) per job, which moves
// less than jobs/s when other processes compete for the cores.
//
// The implementations:
//   - Run: natsjs.Run with its default bound, 2n messages held;
//   - Run500: natsjs.Run holding up to 500, as Messages does;
//   - RunNoCarry: Run whose acker confirms each batch of acks before it
//     frees their slots, as v1 did, rather than carry the next pull in
//     the last ack: what carrying gives;
//   - Messages: the peer, the plain loop, with Messages' default
//     buffer of 500 messages, acking with Ack, which does not wait for the
//     server;
//   - Messages2n: the loop with a buffer of 2n messages (PullMaxMessages),
//     holding up to 3n with the goroutines' own;
//   - Messages2nPool: that loop, each goroutine running its jobs on a pool
//     of n with SubmitWait: what the pool's hand-offs cost it;
//   - MessagesConfirmed: the loop with Run's v1 guarantee, a buffer of n
//     messages and DoubleAck, each goroutine holding its message until the
//     server confirms its ack: at most 2n held, all unconfirmed acks among
//     them.
func BenchmarkLoopback(b *testing.B) {
	works := []struct {
		name string
		fn   func()
	}{
		{"none", func() {}},
		{"sleep1ms", func() { time.Sleep(time.Millisecond) }},
	}
	for _, work := range works {
		for _, n := range []int{8} {
			for _, impl := range []string{"Run", "Run500", "RunNoCarry", "Messages", "Messages2n", "Messages2nPool", "MessagesConfirmed"} {
				b.Run(fmt.Sprintf("work=%s/n=%d/impl=%s", work.name, n, impl), func(b *testing.B) {
					benchLoopback(b, n, impl, work.fn)
				})
			}
		}
	}
}

func benchLoopback(b *testing.B, n int, impl string, work func()) {
	s := startServer(b)
	_, js := connect(b, s)
	cons := workQueue(b, js, 30*time.Second, 0)
	for i := range b.N {
		_, err := js.PublishAsync("jobs."+strconv.Itoa(i), []byte(strconv.Itoa(i)))
		require.NoError(b, err)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishing timed out")
	}

	var handled atomic.Int64
	all := make(chan struct{})
	count := func() {
		if handled.Add(1) == int64(b.N) {
			close(all)
		}
	}
	var wg sync.WaitGroup
	var stop func() // ends the consumers' goroutines
	b.ReportAllocs()
	b.ResetTimer()
	start, startCPU := time.Now(), cpuTime()
	switch impl {
	case "Run", "Run500", "RunNoCarry":
		var opts []natsjs.Option
		if impl == "Run500" {
			opts = append(opts, natsjs.WithMaxInFlight(500))
		}
		natsjs.SetNoCarry(impl == "RunNoCarry")
		defer natsjs.SetNoCarry(false)
		p := workerpool.New(n)
		defer p.Stop()
		ctx, cancel := context.WithCancel(context.Background())
		stop = cancel
		wg.Go(func() {
			err := natsjs.Run(ctx, p, cons, func(context.Context, jetstream.Msg) error {
				work()
				count()
				return nil
			}, append(opts, natsjs.WithJetStream(js))...)
			if err != nil {
				b.Error(err)
			}
		})
	case "Messages", "Messages2n", "Messages2nPool", "MessagesConfirmed":
		var opts []jetstream.PullMessagesOpt
		switch impl {
		case "Messages2n", "Messages2nPool":
			opts = append(opts, jetstream.PullMaxMessages(2*n))
		case "MessagesConfirmed":
			opts = append(opts, jetstream.PullMaxMessages(n))
		}
		it, err := cons.Messages(opts...)
		require.NoError(b, err)
		stop = it.Stop
		run := func(job func()) { job() }
		if impl == "Messages2nPool" {
			p := workerpool.New(n)
			defer p.Stop()
			run = func(job func()) { _ = p.SubmitWait(job) }
		}
		for range n {
			wg.Go(func() {
				for {
					msg, err := it.Next()
					if err != nil {
						return // the iterator was stopped
					}
					run(func() {
						work()
						count()
					})
					if impl == "MessagesConfirmed" {
						_ = msg.DoubleAck(context.Background())
					} else {
						_ = msg.Ack()
					}
				}
			})
		}
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatal("jobs not all handled")
	}
	elapsed, cpu := time.Since(start), cpuTime()-startCPU
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/job")
	}
	stop()
	wg.Wait()
}
