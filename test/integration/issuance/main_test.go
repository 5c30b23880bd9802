// Package issuance checks cert-manager parity on real API servers: every spec
// field ends up in the issued certificate and Secret as cert-manager would
// write it, renewals and manual triggers behave, invalid specs are refused
// with a reason, and Argo CD's own health check reads the status correctly.
package issuance

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const issuerName = "parity-ca"

var (
	env   *suite.Env
	bed   *testbed.Bed
	caPEM []byte
	// hubLog keeps the in-process hub's log lines (and passes them to stderr).
	hubLog = &lineLog{}
)

// lineLog is an io.Writer that keeps what it is given, for tests that read
// what the hub logged.
type lineLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	l.mu.Unlock()
	return os.Stderr.Write(p)
}

// issuancesLogged counts the hub's "issuing certificate" lines for the
// Certificate namespace/name.
func issuancesLogged(namespace, name string) int {
	l := hubLog
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	ns, nm := fmt.Sprintf(`"namespace": %q`, namespace), fmt.Sprintf(`"name": %q`, name)
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, "issuing certificate") && strings.Contains(line, ns) && strings.Contains(line, nm) {
			n++
		}
	}
	return n
}

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Logs: hubLog,
		Hub: func(o *hub.Options) { o.IssuerRetryInterval = time.Second },
		Setup: func(_ context.Context, e *suite.Env) error {
			bed, caPEM = e.Bed, e.CAPEM
			return nil
		}}, &env))
}
