package main

import (
	"bytes"
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every line gets its own report, in order, the failed ones included: a
// bad line costs no other line its amount.
func TestRunReportsEveryLineInOrderWithItsAmountOrItsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		failed, err := run(context.Background(), &out)
		require.NoError(t, err)
		assert.Equal(t, 2, failed)
		assert.Equal(t, `line 1:  13.50
line 2:  12.00
line 3: error: "two x 3.00": expected integer
line 4:   4.95
line 5: error: "": EOF
line 6:  14.50
total 44.95; 2 of 6 lines failed
`, out.String())
	})
}

// A ctx done before the batch runs gives every line ctx's error: still one
// report per line.
func TestRunReportsEveryLineWhenCtxIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var out bytes.Buffer
		failed, err := run(ctx, &out)
		require.NoError(t, err)
		assert.Equal(t, len(lines), failed)
		assert.Contains(t, out.String(), "line 6: error: context canceled\n")
	})
}
