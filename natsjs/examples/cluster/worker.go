package main

import (
	"context"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// runWorker is worker process id: a pool of size workers, fed with the
// jobs by natsjs.Run until SIGTERM or an interrupt.
func runWorker(id int, url string, size int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, js, err := connect(url, nats.Name("cluster worker "+strconv.Itoa(id)))
	if err != nil {
		return err
	}
	defer nc.Close()
	cons, err := js.Consumer(ctx, jobsStream, consumerName)
	if err != nil {
		return err
	}
	p := workerpool.New(size)
	defer p.StopWait()
	return natsjs.Run(ctx, p, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		// The job's work: 10 to 30ms.
		time.Sleep(10*time.Millisecond + rand.N(20*time.Millisecond))
		// Its result, with who handled it and on which delivery. A real
		// handler would make this idempotent by giving the result the
		// job's ID (header Nats-Msg-Id), so that the results stream keeps
		// one per job; this one keeps them all, to count the duplicates.
		out := nats.NewMsg(resultsPrefix + string(msg.Data()))
		out.Data = msg.Data()
		out.Header.Set("Worker", strconv.Itoa(id))
		out.Header.Set("Delivery", strconv.FormatUint(md.NumDelivered, 10))
		_, err = js.PublishMsg(context.WithoutCancel(ctx), out)
		return err
	})
}
