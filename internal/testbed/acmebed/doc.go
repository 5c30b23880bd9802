// Package acmebed runs the ACME test bed on loopback: Pebble (Let's
// Encrypt's test CA) validating DNS-01 against a BIND 9 primary for one
// zone that accepts TSIG-signed RFC 2136 updates of TXT records — what users
// configure as cert-manager's rfc2136 solver.
//
// Contract: the binaries come from hack/ensure-acme-bed.sh (Dir finds or
// builds them, cached outside the clone); Start picks free ports, writes the
// configuration under a temporary directory, starts both processes, waits
// until each answers, and Stop kills both and removes the directory.
// Nothing is left running and nothing needs root.
package acmebed
