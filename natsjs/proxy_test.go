package natsjs_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A latencyProxy forwards the TCP connections it accepts on loopback to a
// server, and delivers every byte a delay after it read it, in each
// direction: the server seems a round trip of twice the delay away, as a
// server in another region would, without any loss of bandwidth. A test
// may change the delay (setDelay); the bytes keep their order.
type latencyProxy struct {
	ln    net.Listener
	to    string
	delay atomic.Int64 // a time.Duration

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// startLatencyProxy starts a proxy to the server at address to, and closes
// it, with every connection through it, at the end of the test.
func startLatencyProxy(t testing.TB, to string, delay time.Duration) *latencyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &latencyProxy{ln: ln, to: to}
	p.setDelay(delay)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// setDelay sets the delay of the bytes read from now on.
func (p *latencyProxy) setDelay(d time.Duration) { p.delay.Store(int64(d)) }

// url is the proxy's address as a NATS URL.
func (p *latencyProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *latencyProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *latencyProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Go(func() { p.forward(server, client) })
		p.wg.Go(func() { p.forward(client, server) })
	}
}

// A chunk is what one read returned, and when to write it on.
type chunk struct {
	data []byte
	at   time.Time
}

// forward copies src to dst, each chunk the delay after it was read. The
// reader never waits for the writer's delays, so the bytes keep their
// order and the delay does not add up.
func (p *latencyProxy) forward(dst io.WriteCloser, src io.ReadCloser) {
	chunks := make(chan chunk, 4096)
	p.wg.Go(func() {
		defer dst.Close()
		for c := range chunks {
			time.Sleep(time.Until(c.at))
			if _, err := dst.Write(c.data); err != nil {
				for range chunks { // drain, so that the reader never blocks
				}
				return
			}
		}
	})
	defer close(chunks)
	defer src.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunks <- chunk{data: append([]byte(nil), buf[:n]...), at: time.Now().Add(time.Duration(p.delay.Load()))}
		}
		if err != nil {
			return // closed, or the other side hung up
		}
	}
}

// A holdingProxy forwards the TCP connections it accepts on loopback to a
// server, and holds each of the client's publications that match for a
// while before it passes it on; it passes everything else at once, and the
// server's side untouched. The server sees a held publication after
// operations the client sent later, as it would see a publication that a
// slow stream took that long to store, or a progress message that a
// starved process took that long to send.
type holdingProxy struct {
	ln    net.Listener
	to    string
	match func(subject, op []byte) bool
	hold  time.Duration
	held  atomic.Int64 // publications held

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// heldCopies returns a proxy to s that holds for hold every publication to
// jobs.>, the subject of the jobs and of the copies Run publishes of them,
// and a JetStream context connected through it: a Run given it sees its
// copies answered, and stored, hold late.
func heldCopies(t testing.TB, s *server.Server, hold time.Duration) (*holdingProxy, jetstream.JetStream) {
	t.Helper()
	proxy := startHoldingProxy(t, s.Addr().String(), hold, publicationsTo("jobs."))
	nc, err := nats.Connect(proxy.url())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return proxy, js
}

// startHoldingProxy starts a proxy to the server at address to that holds
// for hold the publications that match says, given their subject and the
// whole operation, payload included; it closes the proxy, with every
// connection through it, at the end of the test.
func startHoldingProxy(t testing.TB, to string, hold time.Duration, match func(subject, op []byte) bool) *holdingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &holdingProxy{ln: ln, to: to, match: match, hold: hold}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// publicationsTo matches the publications to subjects beginning with
// prefix.
func publicationsTo(prefix string) func(subject, op []byte) bool {
	return func(subject, _ []byte) bool { return bytes.HasPrefix(subject, []byte(prefix)) }
}

// progressMessages matches the progress messages (InProgress) of messages
// of a JetStream consumer.
func progressMessages(subject, op []byte) bool {
	return bytes.HasPrefix(subject, []byte("$JS.ACK.")) && bytes.HasSuffix(op, []byte("+WPI\r\n"))
}

// url is the proxy's address as a NATS URL.
func (p *holdingProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *holdingProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *holdingProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Go(func() {
			_, _ = io.Copy(client, server)
			_ = client.Close()
		})
		p.wg.Go(func() {
			p.forward(server, client)
			_ = server.Close()
		})
	}
}

// forward copies the client's protocol to the server, one operation at a
// time, each written whole under a lock, the held ones by timers of their
// own.
func (p *holdingProxy) forward(server io.Writer, client io.Reader) {
	var mu sync.Mutex
	write := func(op []byte) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = server.Write(op)
	}
	r := bufio.NewReader(client)
	for {
		op, subject, err := readOp(r)
		if err != nil {
			return
		}
		if subject != nil && p.match(subject, op) {
			p.held.Add(1)
			time.AfterFunc(p.hold, func() { write(op) })
			continue
		}
		write(op)
	}
}

// readOp reads one operation of the client protocol from r: its line and,
// for a publication (PUB subject [reply] size, or HPUB subject [reply]
// hdrsize size), its payload and CRLF. subject is the publication's
// subject, nil for any other operation.
func readOp(r *bufio.Reader) (op, subject []byte, err error) {
	op, err = r.ReadBytes('\n')
	if err != nil {
		return nil, nil, err
	}
	args := bytes.Fields(op)
	if len(args) < 3 || !bytes.Equal(args[0], []byte("PUB")) && !bytes.Equal(args[0], []byte("HPUB")) {
		return op, nil, nil
	}
	size, err := strconv.Atoi(string(args[len(args)-1]))
	if err != nil {
		return nil, nil, err
	}
	payload := make([]byte, size+2)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, nil, err
	}
	return append(op, payload...), args[1], nil
}
