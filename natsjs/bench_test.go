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
// interleave the runs (README.md has the script that measured the
// figures there):
//
//	go test -c -o /tmp/natsjs.test .
//	/tmp/natsjs.test -test.run '^$' -test.bench 'Loopback/work=none/n=8/impl=Run$' -test.benchtime 20000x
//
// The work is either nothing ("none", which shows the adapter's cost per
// job at its worst) or 1ms asleep ("sleep1ms", a job that waits on I/O).
// Besides jobs/s, it reports cpu-ns/job: the CPU time, user and system, of
// the whole process (the embedded server's included) per job, which moves
// less than jobs/s when other processes compete for the cores.
//
// The implementations:
//   - Run: natsjs.Run with its defaults;
//   - Run16: natsjs.Run with WithMaxInFlight(2n), v2's default bound;
//   - RunKeyed: natsjs.Run with WithKey, each job its own key (its
//     subject): what key order costs when it holds nothing up;
//   - Messages: the peer, the plain loop, n goroutines each
//     taking a message from Messages (default buffer of 500), running the
//     job and acking with Ack, which does not wait for the server;
//   - Messages2n: that loop with a buffer of 2n messages
//     (PullMaxMessages);
//   - Messages2nPool: Messages2n whose goroutines each run their job on a
//     workerpool of n with SubmitWait, then ack;
//
// and, to tell what a hand-off from the loop to other goroutines costs,
// one goroutine taking the messages from Messages (buffer of 500) and:
//   - Loop1: running each job and acking it itself;
//   - LoopPool: handing each job and its ack to a workerpool of n
//     (Submit), once a semaphore of n has room;
//   - LoopChan: handing each to n goroutines through an unbuffered
//     channel;
//   - LoopSem: starting a goroutine for each, once a semaphore of n has
//     room.
//
// In the last three, the ack is sent by the goroutine that ran the job.
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
			for _, impl := range []string{"Run", "Run16", "RunKeyed", "Messages", "Messages2n", "Messages2nPool", "Loop1", "LoopPool", "LoopChan", "LoopSem"} {
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
	case "Run", "Run16", "RunKeyed":
		var opts []natsjs.Option
		switch impl {
		case "Run16":
			opts = append(opts, natsjs.WithMaxInFlight(2*n))
		case "RunKeyed":
			opts = append(opts, natsjs.WithKey(func(msg jetstream.Msg) string { return msg.Subject() }))
		}
		p := workerpool.New(n)
		defer p.Stop()
		ctx, cancel := context.WithCancel(context.Background())
		stop = cancel
		wg.Go(func() {
			err := natsjs.Run(ctx, p, js, cons, func(context.Context, jetstream.Msg) error {
				work()
				count()
				return nil
			}, opts...)
			if err != nil {
				b.Error(err)
			}
		})
	case "Messages", "Messages2n", "Messages2nPool":
		var opts []jetstream.PullMessagesOpt
		if impl != "Messages" {
			opts = append(opts, jetstream.PullMaxMessages(2*n))
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
					_ = msg.Ack()
				}
			})
		}
	case "Loop1", "LoopPool", "LoopChan", "LoopSem":
		it, err := cons.Messages()
		require.NoError(b, err)
		stop = it.Stop
		hand := handOff(impl, n)
		wg.Go(func() {
			defer hand.close()
			for {
				msg, err := it.Next()
				if err != nil {
					return // the iterator was stopped
				}
				hand.run(func() {
					work()
					count()
					_ = msg.Ack()
				})
			}
		})
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

// A hand-off runs jobs for the one goroutine of a Loop benchmark: run
// returns once the job was handed over (or, for Loop1, ran); close ends
// the goroutines it started.
type hand struct {
	run   func(job func())
	close func()
}

// handOff returns impl's hand-off to n goroutines.
func handOff(impl string, n int) hand {
	switch impl {
	case "LoopPool":
		p := workerpool.New(n)
		sem := make(chan struct{}, n)
		return hand{
			run: func(job func()) {
				sem <- struct{}{}
				_ = p.Submit(func() {
					job()
					<-sem
				})
			},
			close: func() { p.StopWait() },
		}
	case "LoopChan":
		jobs := make(chan func()) // unbuffered: the loop waits for a free goroutine
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				for job := range jobs {
					job()
				}
			})
		}
		return hand{run: func(job func()) { jobs <- job }, close: func() { close(jobs); wg.Wait() }}
	case "LoopSem":
		sem := make(chan struct{}, n)
		var wg sync.WaitGroup
		return hand{
			run: func(job func()) {
				sem <- struct{}{}
				wg.Go(func() {
					job()
					<-sem
				})
			},
			close: wg.Wait,
		}
	}
	return hand{run: func(job func()) { job() }, close: func() {}}
}
