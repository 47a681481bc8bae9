package natsjs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dispatchkit/workerpool"
	"github.com/dispatchkit/workerpool/natsjs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The crash test's worker processes are this test binary, run again with
// these variables set: the server's URL, the file where the worker
// records each job it handled, and, for a victim, how many jobs it
// handles before every later handler hangs once it has recorded its job.
const (
	crashURLEnv    = "NATSJS_CRASH_URL"
	crashRecordEnv = "NATSJS_CRASH_RECORD"
	crashHangEnv   = "NATSJS_CRASH_HANG_AFTER"
)

const (
	crashJobs     = 600
	crashWorkers  = 4 // each worker process's pool size
	crashInFlight = 8 // each worker process's WithMaxInFlight
)

func TestACrashedProcessLosesNothingAndDuplicatesAtMostItsInFlightBound(t *testing.T) {
	if url := os.Getenv(crashURLEnv); url != "" {
		crashWorker(t, url, os.Getenv(crashRecordEnv), crashWorkers, crashInFlight, 10*time.Millisecond)
		return
	}
	t.Parallel() // waits on the clock, not the CPU
	s := startServer(t)
	_, js := connect(t, s)
	workQueue(t, js, 3*time.Second, 0) // progress every second: slack for a loaded machine
	publishJobs(t, js, crashJobs)

	dir := t.TempDir()
	start := func(name string, env ...string) (*exec.Cmd, string, *bytes.Buffer) {
		record := filepath.Join(dir, name)
		cmd, out := startWorkerProcess(t, s.ClientURL(), record, env...)
		return cmd, record, out
	}
	// The victim's handlers hang once it has handled a tenth of the jobs,
	// each after recording its job: when it is killed, it holds at least
	// those, which a kill at a random moment (v2's test) did not ensure.
	victim, victimRecord, _ := start("victim", crashHangEnv+"="+strconv.Itoa(crashJobs/10))
	survivor, survivorRecord, survivorOut := start("survivor")

	// Kill the victim mid-run, once every one of its workers hangs.
	eventually(t, func() bool { return countRecords(victimRecord) >= crashJobs/10+crashWorkers }, "the victim did not hang")
	require.NoError(t, victim.Process.Signal(syscall.SIGKILL))
	_ = victim.Wait()
	killedAfter := countRecords(victimRecord)

	// The survivor gets everything, the victim's messages after AckWait.
	eventually(t, func() bool { return streamEmpty(js, "JOBS") }, "jobs left in the stream")
	require.NoError(t, survivor.Process.Signal(syscall.SIGTERM))
	require.NoError(t, survivor.Wait(), "survivor: %s", survivorOut)

	victimJobs, survivorJobs := readRecord(t, victimRecord), readRecord(t, survivorRecord)
	require.Len(t, victimJobs, killedAfter, "the victim recorded jobs after it was killed")
	assert.Less(t, killedAfter, crashJobs, "the victim was not killed mid-run")
	counts := make(map[int]int)
	redelivered := 0 // to the survivor, after the victim's death
	for _, r := range append(victimJobs, survivorJobs...) {
		counts[r.job]++
		if r.delivery > 1 {
			redelivered++
		}
	}
	duplicates := 0
	victimHad := make(map[int]bool)
	for _, r := range victimJobs {
		victimHad[r.job] = true
	}
	for job := range crashJobs {
		assert.GreaterOrEqual(t, counts[job], 1, "job %d lost", job)
		if counts[job] > 1 {
			duplicates += counts[job] - 1
			assert.True(t, victimHad[job], "job %d handled twice without the victim", job)
		}
	}
	assert.Len(t, counts, crashJobs)
	// Only a message the victim held can have been handled twice: it holds
	// a message until the server has confirmed its ack.
	assert.LessOrEqual(t, duplicates, crashInFlight)
	// The victim held messages when it died, its hanging ones at least:
	// the server redelivered them.
	assert.GreaterOrEqual(t, redelivered, crashWorkers, "the victim's hanging jobs were not redelivered")
	assert.LessOrEqual(t, redelivered, crashInFlight, "redelivered more than the victim could hold")
	t.Logf("victim handled %d before the kill, survivor %d; %d redelivered, %d duplicates",
		killedAfter, len(survivorJobs), redelivered, duplicates)
}

// startWorkerProcess runs the test binary again as a worker process of the
// running test, which connects to url and records its jobs in record, with
// env besides. The process is killed at the end of the test if it is still
// running.
func startWorkerProcess(t *testing.T, url, record string, env ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	test, _, _ := strings.Cut(t.Name(), "/") // the worker runs the top-level test
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(append(os.Environ(), crashURLEnv+"="+url, crashRecordEnv+"="+record), env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, &out
}

// crashWorker is a worker process of a crash test: it consumes the jobs
// until SIGTERM on a pool of workers, holding at most inFlight messages,
// recording each job it handled in record, each job taking jobTime after
// its record, with opts besides the bound.
func crashWorker(t *testing.T, url, record string, workers, inFlight int, jobTime time.Duration, opts ...natsjs.Option) {
	nc, err := nats.Connect(url, nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cons, err := js.Consumer(context.Background(), "JOBS", "workers")
	require.NoError(t, err)
	f, err := os.OpenFile(record, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer f.Close()

	hangAfter := int64(-1) // none
	if v := os.Getenv(crashHangEnv); v != "" {
		hangAfter, err = strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
	}
	var handled atomic.Int64

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	p := workerpool.New(workers)
	defer p.StopWait()
	err = natsjs.Run(ctx, p, js, cons, func(ctx context.Context, msg jetstream.Msg) error {
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		// One write(2) per record, unbuffered: a SIGKILL cannot tear it,
		// and every record written before the ack survives the process.
		if _, err := fmt.Fprintf(f, "%s %d\n", msg.Data(), md.NumDelivered); err != nil {
			return err
		}
		if hangAfter >= 0 && handled.Add(1) > hangAfter {
			select {} // until the kill
		}
		// The rest of the job's work: a kill now repeats a recorded job.
		time.Sleep(jobTime)
		return nil
	}, append(opts, natsjs.WithMaxInFlight(inFlight))...)
	require.NoError(t, err)
}

// countRecords returns the number of records in file so far, while its
// process may be writing it.
func countRecords(file string) int {
	data, _ := os.ReadFile(file)
	return bytes.Count(data, []byte{'\n'})
}

// A crashRecord says that a worker handled job on its delivery-th delivery.
type crashRecord struct{ job, delivery int }

// readRecord returns the records in file, in order; none if the file does
// not exist.
func readRecord(t *testing.T, file string) []crashRecord {
	t.Helper()
	data, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var records []crashRecord
	for line := range strings.Lines(string(data)) {
		var r crashRecord
		_, err := fmt.Sscanf(line, "%d %d\n", &r.job, &r.delivery)
		require.NoError(t, err, "torn record %q", line)
		records = append(records, r)
	}
	return records
}
