package fleet

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Failures is a testing.TB that also keeps every failure message, and says
// them all again as the test's very last output. Fleet tests end, when they
// fail, with the last lines of every replica's log (dozens of them in a
// chaos run), and CI shows only the end of the output: without the summary
// the reason of a failure is scrolled away.
type Failures struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

// RecordFailures wraps t. Call it first in the test, so its cleanup (the
// summary) runs after every other one.
func RecordFailures(t testing.TB) *Failures {
	f := &Failures{TB: t}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if t.Failed() && len(f.msgs) > 0 {
			t.Logf("--- %s failed (%d) ---\n%s", t.Name(), len(f.msgs), strings.Join(f.msgs, "\n"))
		}
	})
	return f
}

func (f *Failures) keep(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, msg)
}

// Error records and reports a failure.
func (f *Failures) Error(args ...any) {
	f.Helper()
	f.keep(fmt.Sprint(args...))
	f.TB.Error(args...)
}

// Errorf records and reports a failure.
func (f *Failures) Errorf(format string, args ...any) {
	f.Helper()
	f.keep(fmt.Sprintf(format, args...))
	f.TB.Errorf(format, args...)
}

// Fatal records and reports a failure, and stops the test.
func (f *Failures) Fatal(args ...any) {
	f.Helper()
	f.keep(fmt.Sprint(args...))
	f.TB.Fatal(args...)
}

// Fatalf records and reports a failure, and stops the test.
func (f *Failures) Fatalf(format string, args ...any) {
	f.Helper()
	f.keep(fmt.Sprintf(format, args...))
	f.TB.Fatalf(format, args...)
}
