package acmebed

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Defaults for Options.
const (
	// DefaultZone is the zone BIND serves and Pebble validates in.
	DefaultZone = "example.test"
	// DefaultTSIGKeyName names the TSIG key allowed to update TXT records.
	DefaultTSIGKeyName = "certhub-test"
	// DefaultStartTimeout bounds the wait for both servers to answer.
	DefaultStartTimeout = 30 * time.Second
)

// Options configure a Bed.
type Options struct {
	// Dir holds bin/pebble, bin/named, bin/tsig-keygen and pebble/ (the
	// output of hack/ensure-acme-bed.sh). Defaults to Dir().
	Dir string
	// Zone defaults to DefaultZone.
	Zone string
	// TSIGKeyName defaults to DefaultTSIGKeyName.
	TSIGKeyName string
	// Env is added to Pebble's environment, e.g. PEBBLE_VA_NOSLEEP=1 or
	// PEBBLE_WFE_NONCEREJECT=0 (Pebble rejects 5 % of nonces by default).
	Env []string
	// EABKeys, when set, makes Pebble require External Account Binding with
	// these key IDs → base64url HMAC keys.
	EABKeys map[string]string
	// StartTimeout defaults to DefaultStartTimeout.
	StartTimeout time.Duration
	// Profiles adds certificate profiles (name → validity) to Pebble's
	// "default" (90 days) and "shortlived" (6 days), e.g. one of minutes
	// to see renewals through several lifetimes in a test.
	Profiles map[string]time.Duration
}

// Bed is a running Pebble + BIND.
type Bed struct {
	// DirectoryURL is Pebble's ACME directory (https).
	DirectoryURL string
	// ManagementURL is Pebble's management API (https): /roots/0,
	// /set-renewal-info/, ...
	ManagementURL string
	// ServerCAs verifies Pebble's HTTPS listeners (its minica root), PEM.
	ServerCAs []byte
	// Nameserver is BIND's host:port (UDP and TCP).
	Nameserver string
	// Zone is the zone BIND serves, without the trailing dot.
	Zone string
	// TSIGKeyName, TSIGAlgorithm and TSIGSecret (base64) sign updates;
	// TSIGAlgorithm is spelt as cert-manager's rfc2136 solver wants it
	// (HMACSHA256).
	TSIGKeyName, TSIGAlgorithm, TSIGSecret string

	dir   string
	procs []*exec.Cmd
	logs  []string
}

// Dir returns the bed's binaries directory: $CERTHUB_ACME_BED when set,
// else what hack/ensure-acme-bed.sh prints (building it on first use).
func Dir() (string, error) {
	if d := os.Getenv("CERTHUB_ACME_BED"); d != "" {
		return d, nil
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "hack", "ensure-acme-bed.sh")
	out, err := exec.Command("bash", script).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("%s failed: %w: %s", script, err, ee.Stderr)
		}
		return "", fmt.Errorf("%s failed: %w (run make acme-bed)", script, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Start runs BIND and Pebble on loopback.
func Start(ctx context.Context, opts Options) (_ *Bed, err error) {
	if opts.Dir == "" {
		if opts.Dir, err = Dir(); err != nil {
			return nil, err
		}
	}
	if opts.Zone == "" {
		opts.Zone = DefaultZone
	}
	if opts.TSIGKeyName == "" {
		opts.TSIGKeyName = DefaultTSIGKeyName
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	work, err := os.MkdirTemp("", "acmebed-")
	if err != nil {
		return nil, err
	}
	b := &Bed{dir: work, Zone: opts.Zone, TSIGKeyName: opts.TSIGKeyName, TSIGAlgorithm: "HMACSHA256"}
	defer func() {
		if err != nil {
			_ = b.Stop()
		}
	}()
	if b.ServerCAs, err = os.ReadFile(filepath.Join(opts.Dir, "pebble", "pebble.minica.pem")); err != nil {
		return nil, err
	}
	if err := b.startBIND(ctx, opts); err != nil {
		return nil, err
	}
	if err := b.startPebble(ctx, opts); err != nil {
		return nil, err
	}
	return b, nil
}

var secretRE = regexp.MustCompile(`secret "([^"]+)"`)

func (b *Bed) startBIND(ctx context.Context, opts Options) error {
	key, err := exec.CommandContext(ctx, filepath.Join(opts.Dir, "bin", "tsig-keygen"), "-a", "hmac-sha256", b.TSIGKeyName).Output()
	if err != nil {
		return fmt.Errorf("tsig-keygen: %w", err)
	}
	m := secretRE.FindSubmatch(key)
	if m == nil {
		return fmt.Errorf("tsig-keygen printed no secret: %s", key)
	}
	b.TSIGSecret = string(m[1])
	port, err := freePort()
	if err != nil {
		return err
	}
	b.Nameserver = fmt.Sprintf("127.0.0.1:%d", port)
	conf := fmt.Sprintf(`%s
options {
	directory "%[2]s";
	pid-file "%[2]s/named.pid";
	listen-on port %[3]d { 127.0.0.1; };
	listen-on-v6 { none; };
	recursion no;
	notify no;
};
zone "%[4]s" {
	type primary;
	file "%[2]s/zone.db";
	update-policy { grant %[5]s zonesub TXT; };
};
`, key, b.dir, port, b.Zone, b.TSIGKeyName)
	zone := fmt.Sprintf("$TTL 60\n@ IN SOA ns.%[1]s. admin.%[1]s. 1 60 60 600 60\n@ IN NS ns.%[1]s.\nns IN A 127.0.0.1\n", b.Zone)
	if err := os.WriteFile(filepath.Join(b.dir, "named.conf"), []byte(conf), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.dir, "zone.db"), []byte(zone), 0o600); err != nil {
		return err
	}
	args := []string{"-g", "-c", filepath.Join(b.dir, "named.conf")}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root") // named drops root to "bind" otherwise, who cannot read the temp dir
	}
	if err := b.run(filepath.Join(opts.Dir, "bin", "named"), "named", nil, args...); err != nil {
		return err
	}
	return b.waitFor(ctx, opts.StartTimeout, "named", func() error {
		c, err := net.DialTimeout("tcp", b.Nameserver, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	})
}

func (b *Bed) startPebble(ctx context.Context, opts Options) error {
	listen, err := freePort()
	if err != nil {
		return err
	}
	mgmt, err := freePort()
	if err != nil {
		return err
	}
	profiles := map[string]any{
		"default":    map[string]any{"description": "default", "validityPeriod": 7776000},
		"shortlived": map[string]any{"description": "short-lived", "validityPeriod": 518400},
	}
	for name, validity := range opts.Profiles {
		profiles[name] = map[string]any{"description": name, "validityPeriod": int(validity.Seconds())}
	}
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":                  fmt.Sprintf("127.0.0.1:%d", listen),
		"managementListenAddress":        fmt.Sprintf("127.0.0.1:%d", mgmt),
		"certificate":                    filepath.Join(opts.Dir, "pebble", "localhost-cert.pem"),
		"privateKey":                     filepath.Join(opts.Dir, "pebble", "localhost-key.pem"),
		"httpPort":                       5002,
		"tlsPort":                        5001,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": len(opts.EABKeys) > 0,
		"externalAccountMACKeys":         opts.EABKeys,
		"retryAfter":                     map[string]int{"authz": 1, "order": 1},
		"keyAlgorithm":                   "ecdsa",
		"profiles":                       profiles,
	}}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	path := filepath.Join(b.dir, "pebble.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return err
	}
	b.DirectoryURL = fmt.Sprintf("https://localhost:%d/dir", listen)
	b.ManagementURL = fmt.Sprintf("https://localhost:%d", mgmt)
	if err := b.run(filepath.Join(opts.Dir, "bin", "pebble"), "pebble", opts.Env, "-config", path, "-dnsserver", b.Nameserver); err != nil {
		return err
	}
	hc := b.HTTPClient()
	return b.waitFor(ctx, opts.StartTimeout, "pebble", func() error {
		resp, err := hc.Get(b.DirectoryURL)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", b.DirectoryURL, resp.Status)
		}
		return nil
	})
}

// HTTPClient trusts Pebble's HTTPS listeners.
func (b *Bed) HTTPClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b.ServerCAs)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// Root returns Pebble's issuing root (PEM), what issued chains verify against.
func (b *Bed) Root(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.ManagementURL+"/roots/0", nil)
	if err != nil {
		return nil, err
	}
	resp, err := b.HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/roots/0: %s", b.ManagementURL, resp.Status)
	}
	return body, nil
}

// SetRenewalInfo makes Pebble answer certPEM's renewal information (ARI)
// with the window [start, end), as a CA that moves a window would
// (management API /set-renewal-info/).
func (b *Bed) SetRenewalInfo(ctx context.Context, certPEM []byte, start, end time.Time) error {
	window, err := json.Marshal(map[string]any{"suggestedWindow": map[string]time.Time{"start": start.UTC(), "end": end.UTC()}})
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]string{"certificate": string(certPEM), "ariResponse": string(window)})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.ManagementURL+"/set-renewal-info/", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := b.HTTPClient().Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s/set-renewal-info/: %s: %s", b.ManagementURL, resp.Status, msg)
	}
	return nil
}

// Logs returns the output of both processes so far (for a failing test).
func (b *Bed) Logs() string {
	var out strings.Builder
	for _, l := range b.logs {
		raw, _ := os.ReadFile(l)
		fmt.Fprintf(&out, "----- %s -----\n%s\n", filepath.Base(l), raw)
	}
	return out.String()
}

// Counts are what Pebble's log says it holds: accounts registered, orders
// created and orders it accepted as replacing a certificate (ARI's
// "replaces"), counted from its own "There are now N accounts in memory",
// "Added order" and "ARI: order ... is a replacement of" lines (Pebble has
// no API that lists them).
type Counts struct{ Accounts, Orders, Replacements int }

// Count reads Pebble's log.
func (b *Bed) Count() Counts {
	var c Counts
	for _, l := range b.logs {
		if !strings.Contains(filepath.Base(l), "pebble") {
			continue
		}
		raw, _ := os.ReadFile(l)
		for _, line := range strings.Split(string(raw), "\n") {
			var n int
			if i := strings.Index(line, "There are now "); i >= 0 && strings.Contains(line, "accounts in memory") {
				if _, err := fmt.Sscanf(line[i:], "There are now %d accounts", &n); err == nil {
					c.Accounts = n
				}
			}
			if strings.Contains(line, "Added order ") {
				c.Orders++
			}
			if strings.Contains(line, "ARI: order ") && strings.Contains(line, " is a replacement of ") {
				c.Replacements++
			}
		}
	}
	return c
}

// Stop kills both processes and removes the bed's files.
func (b *Bed) Stop() error {
	for _, p := range b.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	b.procs = nil
	return os.RemoveAll(b.dir)
}

func (b *Bed) run(bin, name string, env []string, args ...string) error {
	logPath := filepath.Join(b.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	_ = f.Close()
	b.procs = append(b.procs, cmd)
	b.logs = append(b.logs, logPath)
	return nil
}

func (b *Bed) waitFor(ctx context.Context, timeout time.Duration, name string, ready func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = ready(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer within %s: %w\n%s", name, timeout, last, b.Logs())
		case <-tick.C:
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	a, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("listener address %v is not TCP", l.Addr())
	}
	return a.Port, nil
}
