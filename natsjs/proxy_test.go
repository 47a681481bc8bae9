package natsjs_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
