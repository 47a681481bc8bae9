package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Run runs a work queue's jobs on a pool until its ctx is done. Here
// the server is embedded, and the jobs are three words to shout.
func ExampleRun() {
	dir, _ := os.MkdirTemp("", "natsjs-example-")
	defer os.RemoveAll(dir)
	s, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	s.Start()
	defer s.Shutdown()
	s.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(s.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)

	ctx := context.Background()
	js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy,
	})
	cons, _ := js.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{
		Durable:    "workers",
		AckPolicy:  jetstream.AckExplicitPolicy,
		AckWait:    30 * time.Second,
		MaxDeliver: 5,
	})
	for _, word := range []string{"alpha", "beta", "gamma"} {
		js.Publish(ctx, "jobs.shout", []byte(word))
	}

	p := workerpool.New(4)
	defer p.StopWait()
	var mu sync.Mutex
	var shouted []string
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		<-done // a real worker runs until it is told to stop
		cancel()
	}()
	h := func(ctx context.Context, msg jetstream.Msg) error {
		mu.Lock()
		defer mu.Unlock()
		shouted = append(shouted, string(msg.Data())+"!")
		if len(shouted) == 3 {
			close(done)
		}
		return nil // acks the message
	}
	// Run pulls on js's connection: cons came from js.
	err := natsjs.Run(ctx, p, js, cons, h)

	sort.Strings(shouted)
	fmt.Println(shouted, err)
	// Output: [alpha! beta! gamma!] <nil>
}

// Middleware is a Handler that wraps a Handler: here one that counts each
// message's outcome and adds up the time its handler took, as a metrics
// library would; tracing would start a span from ctx instead, and end it
// with the error. No hook is needed.
func ExampleHandler_middleware() {
	dir, _ := os.MkdirTemp("", "natsjs-example-")
	defer os.RemoveAll(dir)
	s, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	s.Start()
	defer s.Shutdown()
	s.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(s.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	js.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: jetstream.WorkQueuePolicy})
	cons, _ := js.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy})
	for _, job := range []string{"one", "bad", "two"} {
		js.Publish(ctx, "jobs.word", []byte(job))
	}

	var mu sync.Mutex
	outcomes := map[string]int{}
	var took time.Duration
	measured := func(h natsjs.Handler) natsjs.Handler {
		return func(ctx context.Context, msg jetstream.Msg) error {
			start := time.Now()
			err := h(ctx, msg)
			mu.Lock()
			defer mu.Unlock()
			took += time.Since(start)
			if err != nil {
				outcomes["failed"]++
			} else {
				outcomes["ok"]++
			}
			if outcomes["ok"]+outcomes["failed"] == 3 {
				cancel() // a real worker runs until it is told to stop
			}
			return err
		}
	}
	h := func(ctx context.Context, msg jetstream.Msg) error {
		if string(msg.Data()) == "bad" {
			return natsjs.Permanent(errors.New("a bad job"))
		}
		return nil
	}
	p := workerpool.New(4)
	defer p.StopWait()
	err := natsjs.Run(ctx, p, js, cons, measured(h))

	fmt.Println(outcomes, took > 0, err)
	// Output: map[failed:1 ok:2] true <nil>
}

// A service that starts while its cluster elects a leader gets a 503, or
// a timeout, from Run's first reads of the consumer: it retries. (No
// output: go test compiles this example but does not run it.)
func ExampleRun_retry() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	cons, err := js.Consumer(ctx, "JOBS", "workers")
	if err != nil {
		fmt.Println(err)
		return
	}
	p := workerpool.New(8)
	defer p.StopWait()
	h := func(ctx context.Context, msg jetstream.Msg) error { return nil }

	for {
		err := natsjs.Run(ctx, p, js, cons, h)
		var apiErr *jetstream.APIError
		transient := !errors.Is(err, jetstream.ErrInvalidOption) &&
			(errors.Is(err, context.DeadlineExceeded) || errors.As(err, &apiErr) && apiErr.Code == 503)
		if !transient || ctx.Err() != nil {
			fmt.Println(err)
			return
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return
		}
	}
}
