// Command cluster shows workerpool as the executor of a NATS JetStream work
// queue shared by several processes, one of which dies mid-run.
//
// It starts an embedded JetStream server (or uses the one at $NATS_URL),
// publishes the jobs, and runs worker processes (this program again, with
// -worker), each a pool fed by natsjs.Run. Each job's handler records
// its result in a second stream. Once some of the jobs are done, it kills
// one worker with SIGKILL: the jobs that worker held come back to the
// others after the consumer's AckWait. The program shows each process's
// progress live, stops the workers when every job has a result, and prints
// a summary: jobs, handled, handled twice, redelivered, and lost, which is
// counted from the results and is 0.
//
//	cd natsjs && go run ./examples/cluster
//
// With $NATS_URL set, it deletes and recreates the streams CLUSTER_JOBS
// and CLUSTER_RESULTS on that server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	jobsStream    = "CLUSTER_JOBS"
	jobsSubject   = "cluster.jobs"
	resultsStream = "CLUSTER_RESULTS"
	resultsPrefix = "cluster.results."
	consumerName  = "cluster-workers"
	// ackWait is how long the server waits before it redelivers the jobs
	// of a worker that died: the run's tail after the kill.
	ackWait = 3 * time.Second
)

func main() {
	jobs := flag.Int("jobs", 3000, "jobs to publish")
	workers := flag.Int("workers", 3, "worker processes")
	pool := flag.Int("pool", 4, "workers in each process's pool")
	kill := flag.Bool("kill", true, "kill one worker process mid-run")
	worker := flag.Int("worker", 0, "run as worker process `n` (internal)")
	url := flag.String("url", "", "server URL (internal, for -worker)")
	flag.Parse()

	var err error
	if *worker > 0 {
		err = runWorker(*worker, *url, *pool)
	} else {
		err = runCluster(*jobs, *workers, *pool, *kill)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// runCluster is the parent process.
func runCluster(jobs, workers, pool int, kill bool) error {
	if jobs < 1 || workers < 1 || pool < 1 {
		return errors.New("-jobs, -workers and -pool must be at least 1")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	url := os.Getenv("NATS_URL")
	if url == "" {
		s, dir, err := startServer()
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		defer s.Shutdown()
		url = s.ClientURL()
		fmt.Printf("embedded JetStream server at %s\n", url)
	} else {
		fmt.Printf("JetStream server at %s (NATS_URL)\n", url)
	}
	nc, js, err := connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := setUp(ctx, js); err != nil {
		return err
	}
	tally, err := watchResults(ctx, js)
	if err != nil {
		return err
	}
	if err := publish(ctx, js, jobs); err != nil {
		return err
	}
	fmt.Printf("published %d jobs; starting %d worker processes of %d workers each\n", jobs, workers, pool)

	procs, err := startWorkers(workers, pool, url)
	if err != nil {
		return err
	}
	defer func() {
		for _, p := range procs {
			p.kill() // only those still running
		}
	}()
	err = supervise(ctx, js, tally, procs, jobs, kill)
	for _, p := range procs {
		p.terminate()
	}
	summary(tally, jobs)
	if err != nil {
		return err
	}
	if lost := jobs - tally.snapshot().distinct; lost != 0 {
		return fmt.Errorf("%d jobs lost", lost)
	}
	return nil
}

// startServer starts an embedded JetStream server on a random loopback
// port, its store in a new temporary directory.
func startServer() (*server.Server, string, error) {
	dir, err := os.MkdirTemp("", "natsjs-cluster-")
	if err != nil {
		return nil, "", err
	}
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		os.RemoveAll(dir)
		return nil, "", errors.New("embedded server not ready")
	}
	return s, dir, nil
}

// connect connects to the server at url, with opts, and returns the
// connection and its JetStream context.
func connect(url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// setUp creates, afresh, the jobs stream with its consumer and the results
// stream.
func setUp(ctx context.Context, js jetstream.JetStream) error {
	for _, name := range []string{jobsStream, resultsStream} {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: jobsStream, Subjects: []string{jobsSubject + ".>"}, Retention: jetstream.WorkQueuePolicy,
	}); err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, jobsStream, jetstream.ConsumerConfig{
		Durable: consumerName, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: 10,
	}); err != nil {
		return err
	}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: resultsStream, Subjects: []string{resultsPrefix + ">"}})
	return err
}

// publish publishes jobs 0..n-1, each with its number as payload and ID.
func publish(ctx context.Context, js jetstream.JetStream, n int) error {
	for i := range n {
		id := strconv.Itoa(i)
		msg := &nats.Msg{Subject: jobsSubject + "." + id, Data: []byte(id), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, id)
		if _, err := js.PublishMsgAsync(msg); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A proc is a worker process.
type proc struct {
	id     int
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd.Wait returned
	err    error         // cmd.Wait's, once exited is closed
	killed bool          // by supervise; only it reads and writes it
}

// startWorkers starts n worker processes: this program again.
func startWorkers(n, pool int, url string) ([]*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var procs []*proc
	for id := 1; id <= n; id++ {
		cmd := exec.Command(self, "-worker", strconv.Itoa(id), "-pool", strconv.Itoa(pool), "-url", url)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			for _, p := range procs {
				p.kill()
			}
			return nil, err
		}
		p := &proc{id: id, cmd: cmd, exited: make(chan struct{})}
		go func() {
			p.err = cmd.Wait()
			close(p.exited)
		}()
		procs = append(procs, p)
	}
	return procs, nil
}

// kill kills the process at once, if it still runs, and waits for it.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// terminate asks the process to stop gracefully, and kills it if it has
// not exited within 10 seconds.
func (p *proc) terminate() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}
