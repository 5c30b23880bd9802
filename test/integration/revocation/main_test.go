// Package revocation proves CertificateRevocations end to end on real API
// servers: a CA-issued certificate revoked by serial is renewed first,
// then its serial is in the CA's CRL, served over HTTP by the hub and
// verified with Go's x509 CRL parsing; "everything issued by CA X before
// T" rolls through three clusters with a status per cluster. (ACME
// revocation at Pebble: test/integration/acme.)
package revocation

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/test/fixture/suite"
)

const issuerName = "revocation-ca"

var (
	env *suite.Env
	// crlAddr is where the in-process replica serves the CRLs.
	crlAddr string
)

func TestMain(m *testing.M) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	crlAddr = l.Addr().String()
	_ = l.Close()
	os.Exit(suite.Run(m, suite.Options{Issuer: issuerName, Downstreams: 3, Hub: func(o *hub.Options) {
		o.RevocationInterval = 300 * time.Millisecond
		o.CRLBindAddress = crlAddr
	}}, &env))
}
