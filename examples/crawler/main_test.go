package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestTheCrawlerFetchesEveryPageSpacedPerHostAndRetriesEachFailureOnce(t *testing.T) {
	var out strings.Builder
	crawl(&out, "a.example/", 20*time.Millisecond)
	got := out.String()
	assert.Contains(t, got, "a.example: 3 fetches, 0 retries, each at least 20ms after the last")
	assert.Contains(t, got, "b.example: 4 fetches, 1 retries, each at least 20ms after the last")
	assert.Contains(t, got, "c.example: 4 fetches, 1 retries, each at least 20ms after the last")
	assert.Contains(t, got, "/shop (retry)")
	assert.Contains(t, got, "/news (retry)")
	assert.Contains(t, got, "9 pages, 2 failed once")
}
