package workerpool_test

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dispatchkit/workerpool"
)

// New panics on an impossible configuration with a message that names New
// and says what is wrong.
func TestNewPanicsOnImpossibleConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
		opts []workerpool.Option
		want string
	}{
		{"zero max", 0, nil, "workerpool: New(0): maxWorkers must be at least 1"},
		{"negative max", -3, nil, "workerpool: New(-3): maxWorkers must be at least 1"},
		{"nil option", 2, []workerpool.Option{workerpool.WithMinWorkers(1), nil}, "workerpool: New: option 1 is nil"},
		{"min above max", 2, []workerpool.Option{workerpool.WithMinWorkers(3)}, "workerpool: New: WithMinWorkers(3) is outside 0..maxWorkers (2)"},
		{"negative min", 2, []workerpool.Option{workerpool.WithMinWorkers(-1)}, "workerpool: New: WithMinWorkers(-1) is outside 0..maxWorkers (2)"},
		{"negative queue bound", 2, []workerpool.Option{workerpool.WithMaxWaiting(-1)}, "workerpool: New: WithMaxWaiting(-1) is negative"},
		{"unknown overflow", 2, []workerpool.Option{workerpool.WithOverflow(workerpool.Overflow(7))}, "workerpool: New: WithOverflow(7) is not Block, Reject or CallerRuns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tc.want, func() { workerpool.New(tc.max, tc.opts...) })
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

// TestDefaultPanicHandlerLogsWithTheSlogDefaultOfTheMoment: a program that
// makes its pools (at package level, say) before it sets its default
// logger gets its tasks' panics in that logger, at level Error, whatever
// the default was at New. (A review of issue 36 found the default captured
// at New: the new default got nothing, or the record at level Info.)
func TestDefaultPanicHandlerLogsWithTheSlogDefaultOfTheMoment(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	for _, before := range []string{"slog's own default", "an earlier logger"} {
		t.Run(before, func(t *testing.T) {
			var earlier, later bytes.Buffer
			if before == "an earlier logger" {
				slog.SetDefault(slog.New(slog.NewTextHandler(&earlier, nil)))
			}
			p := workerpool.New(1)
			slog.SetDefault(slog.New(slog.NewTextHandler(&later, nil)))
			require.NoError(t, p.Submit(func() { panic("boom") }))
			p.StopWait()
			assert.Contains(t, later.String(), `level=ERROR msg="workerpool: task panicked" panic=boom stack=`,
				"WithLogger's doc: with no logger given, the panic goes to slog.Default as it is when the panic comes")
			assert.Empty(t, earlier.String(), "the default at New")
		})
	}
}

func TestStringers(t *testing.T) {
	assert.Equal(t, []string{"running", "paused", "stopping", "stopped", "State(9)"},
		[]string{workerpool.Running.String(), workerpool.Paused.String(), workerpool.Stopping.String(), workerpool.Stopped.String(), workerpool.State(9).String()})
	assert.Equal(t, []string{"block", "reject", "caller-runs", "Overflow(9)"},
		[]string{workerpool.Block.String(), workerpool.Reject.String(), workerpool.CallerRuns.String(), workerpool.Overflow(9).String()})
}
