package natsjs_test

import (
	"context"
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
