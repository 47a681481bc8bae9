package workerpool_test

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

func TestNewPanicsOnImpossibleConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
		opts []workerpool.Option
	}{
		{"zero max", 0, nil},
		{"negative max", -3, nil},
		{"nil option", 2, []workerpool.Option{nil}},
		{"min above max", 2, []workerpool.Option{workerpool.WithMinWorkers(3)}},
		{"negative min", 2, []workerpool.Option{workerpool.WithMinWorkers(-1)}},
		{"negative queue bound", 2, []workerpool.Option{workerpool.WithMaxWaiting(-1)}},
		{"unknown overflow", 2, []workerpool.Option{workerpool.WithOverflow(workerpool.Overflow(7))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				assert.Regexp(t, `^workerpool: `, msg)
			}()
			workerpool.New(tc.max, tc.opts...)
			t.Error("New did not panic")
		})
	}
}

func TestNewAcceptsBoundaryConfiguration(t *testing.T) {
	p := workerpool.New(3, workerpool.WithMinWorkers(3), workerpool.WithMaxWaiting(0), workerpool.WithIdleTimeout(-1), workerpool.WithPanicHandler(nil))
	defer p.Stop()
	s := p.Status()
	assert.Equal(t, 3, s.Workers, "MinWorkers workers start in New")
	assert.Equal(t, 3, s.MinWorkers)
	assert.Equal(t, 3, s.MaxWorkers)
	assert.Equal(t, 3, p.Size())
}

func TestDefaultPanicHandlerLogsWithSlog(t *testing.T) {
	var buf bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	p := workerpool.New(1)
	require.NoError(t, p.Submit(func() { panic("boom") }))
	p.StopWait()
	assert.Contains(t, buf.String(), `msg="workerpool: task panicked" panic=boom stack=`)
}

func TestStringers(t *testing.T) {
	assert.Equal(t, []string{"running", "paused", "stopping", "stopped", "State(9)"},
		[]string{workerpool.Running.String(), workerpool.Paused.String(), workerpool.Stopping.String(), workerpool.Stopped.String(), workerpool.State(9).String()})
	assert.Equal(t, []string{"block", "reject", "caller-runs", "Overflow(9)"},
		[]string{workerpool.Block.String(), workerpool.Reject.String(), workerpool.CallerRuns.String(), workerpool.Overflow(9).String()})
}
