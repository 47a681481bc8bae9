package natsjs_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test below attacks the promise that a handled message keeps its slot
// until the server has processed its ack. Its worker process reaches the
// server through an ackDropper, which passes on the process's first acks,
// then drops every later one while it passes on everything else, pulls
// included: the server goes on delivering what the process asks for, and
// never learns of a single ack. A process that gave a slot back once it had
// sent an ack, rather than once the server had processed it, would go on
// pulling and handling messages, all of which the server redelivers once
// the process dies; Run holds at most its bound of them.

const (
	dropJobs     = 400
	dropAfter    = 100 // acks passed on before the dropping starts
	dropWorkers  = 4
	dropInFlight = 8
)

func TestACrashWhileTheServerHasNotProcessedABurstOfAcksDuplicatesAtMostTheBound(t *testing.T) {
	if url := os.Getenv(crashURLEnv); url != "" {
		// Wait for confirmations as long as the process lives: a
		// confirmation that timed out would give its slot back.
		crashWorker(t, url, os.Getenv(crashRecordEnv), dropWorkers, dropInFlight, 0, natsjs.WithSettleTimeout(time.Hour))
		return
	}
	t.Parallel() // waits on the clock, not the CPU
	s := startServer(t)
	_, js := connect(t, s)
	cons := workQueue(t, js, 2*time.Second, 0)
	publishJobs(t, js, dropJobs)

	dropper := startAckDropper(t, s.Addr().String(), dropAfter)
	record := filepath.Join(t.TempDir(), "victim")
	victim, _ := startWorkerProcess(t, "nats://"+dropper.addr(), record)

	// The victim handles jobs, each a burst of acks, until its acks stop
	// reaching the server; then it handles what it holds, and waits.
	eventually(t, func() bool { return dropper.dropped.Load() > 0 }, "no ack was dropped")
	waitUntilSteady(t, func() int { return countRecords(record) })
	require.NoError(t, victim.Process.Signal(syscall.SIGKILL))
	_ = victim.Wait()
	dropper.close()

	// Everything the victim did not ack comes back, after AckWait.
	ta := newTally()
	stop := consuming(t, newPool(t, dropWorkers), js, cons, func(_ context.Context, msg jetstream.Msg) error {
		ta.add(msg)
		return nil
	})
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left in the stream")
	require.NoError(t, stop())

	victimJobs := readRecord(t, record)
	ta.mu.Lock()
	for _, r := range victimJobs {
		ta.count[strconv.Itoa(r.job)]++
	}
	ta.mu.Unlock()
	counts := ta.snapshot()
	assert.Len(t, counts, dropJobs, "jobs lost")
	duplicates := 0
	for _, c := range counts {
		duplicates += c - 1
	}
	// The victim handled messages whose acks never reached the server.
	assert.Positive(t, duplicates, "no job was handled twice: the attack missed")
	assert.LessOrEqual(t, duplicates, dropInFlight)
	t.Logf("victim handled %d, %d acks dropped, %d duplicates (bound %d)",
		len(victimJobs), dropper.dropped.Load(), duplicates, dropInFlight)
}

// waitUntilSteady waits until count has not changed for a while.
func waitUntilSteady(t *testing.T, count func() int) {
	t.Helper()
	const steady = 500 * time.Millisecond
	deadline := time.Now().Add(waitFor)
	last, since := count(), time.Now()
	for time.Since(since) < steady {
		require.True(t, time.Now().Before(deadline), "the count never stopped growing")
		time.Sleep(10 * time.Millisecond)
		if n := count(); n != last {
			last, since = n, time.Now()
		}
	}
}

// An ackDropper forwards one client's connections to a server. It passes
// on the first acks (messages published to $JS.ACK.>) it sees, then drops
// every later one; it passes on everything else.
type ackDropper struct {
	ln      net.Listener
	server  string
	pass    int64
	acks    atomic.Int64 // acks seen
	dropped atomic.Int64 // acks dropped

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// startAckDropper listens on loopback for connections to server; it
// passes on pass acks. It closes at the end of the test.
func startAckDropper(t *testing.T, server string, pass int) *ackDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	d := &ackDropper{ln: ln, server: server, pass: int64(pass)}
	d.wg.Go(d.accept)
	t.Cleanup(d.close)
	return d
}

func (d *ackDropper) addr() string { return d.ln.Addr().String() }

// close stops listening and closes every connection.
func (d *ackDropper) close() {
	_ = d.ln.Close()
	d.mu.Lock()
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

func (d *ackDropper) accept() {
	for {
		client, err := d.ln.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.Dial("tcp", d.server)
		if err != nil {
			_ = client.Close()
			continue
		}
		d.mu.Lock()
		d.conns = append(d.conns, client, server)
		d.mu.Unlock()
		d.wg.Go(func() {
			_, _ = io.Copy(client, server)
			_ = client.Close()
		})
		d.wg.Go(func() {
			d.forward(server, client)
			_ = server.Close()
		})
	}
}

// forward copies the client's protocol to the server, one operation at a
// time, dropping acks once pass were passed on.
func (d *ackDropper) forward(server io.Writer, client io.Reader) {
	r := bufio.NewReader(client)
	for {
		op, subject, err := readOp(r)
		if err != nil {
			return
		}
		if bytes.HasPrefix(subject, []byte("$JS.ACK.")) && d.acks.Add(1) > d.pass {
			d.dropped.Add(1)
			continue
		}
		if _, err := server.Write(op); err != nil {
			return
		}
	}
}
