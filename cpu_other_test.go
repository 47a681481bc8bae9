//go:build !unix

package workerpool_test

import "testing"

// reportCPU does nothing where getrusage is missing.
func reportCPU(*testing.B) {}
