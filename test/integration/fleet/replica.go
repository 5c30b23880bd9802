package fleet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Timings are the coordinator's Lease timings the replicas run with; the
// failover bound follows from them.
type Timings struct {
	LeaseDuration, RenewDeadline, RetryPeriod, RenewInterval time.Duration
}

// FastTimings keep failover within seconds, for tests.
var FastTimings = Timings{LeaseDuration: 8 * time.Second, RenewDeadline: 5 * time.Second, RetryPeriod: time.Second, RenewInterval: 2 * time.Second}

// Config says how to start replicas.
type Config struct {
	// Binary is the certhub binary; Kubeconfig an admin kubeconfig of the hub.
	Binary, Kubeconfig string
	// HubNamespace and ArgoNamespace as in the test bed.
	HubNamespace, ArgoNamespace string
	// Timings default to FastTimings.
	Timings Timings
	// Args are appended to `certhub run`.
	Args []string
}

// Replica is one `certhub run` process.
type Replica struct {
	ID      string
	cmd     *exec.Cmd
	logPath string
	probes  string
	metrics string // host:port of its /metrics
	done    chan struct{}
	exitErr error
}

func freeAddr(t testing.TB) string {
	t.Helper()
	a, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// FreeAddr returns a loopback address with a port free at the moment,
// never the same one twice in a process. The port lies below the kernel's
// ephemeral range when it can: ports from that range are what bind(":0")
// hands out and what every outgoing connection takes, so under the
// connection churn of a fleet test one could be taken between this check
// and the replica's own bind (which then exits: "address already in use").
func FreeAddr() (string, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	if low := ephemeralLow(); low-minPort > 1000 {
		for range 200 {
			p := minPort + rand.IntN(low-minPort)
			if portsGiven[p] {
				continue
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				continue
			}
			_ = l.Close()
			portsGiven[p] = true
			return l.Addr().String(), nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// minPort is the lowest port FreeAddr hands out.
const minPort = 20000

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range (Linux;
// 32768 when it cannot be read).
func ephemeralLow() int {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(raw), &low, &high); err != nil {
		return 32768
	}
	return low
}

// TryStart starts replica id. The test's cleanup stops it (SIGTERM) if it
// still runs and, when the test failed, prints the end of its log. It never
// fails the test itself, so fault goroutines may call it.
// CERTHUB_TEST_LOGDIR keeps the replicas' logs after the test.
func (c Config) TryStart(t testing.TB, id string) (*Replica, error) {
	t.Helper()
	tm := c.Timings
	if tm == (Timings{}) {
		tm = FastTimings
	}
	probes, metrics := freeAddr(t), freeAddr(t)
	dir := os.Getenv("CERTHUB_TEST_LOGDIR")
	if dir == "" {
		dir = t.TempDir()
	}
	args := append([]string{"run",
		"--kubeconfig", c.Kubeconfig,
		"--namespace", c.HubNamespace, "--cluster-secret-namespace", c.ArgoNamespace,
		"--identity", id, "--metrics-bind-address", metrics, "--health-probe-bind-address", probes,
		"--shard-lease-duration", tm.LeaseDuration.String(), "--shard-renew-deadline", tm.RenewDeadline.String(),
		"--shard-retry-period", tm.RetryPeriod.String(), "--shard-renew-interval", tm.RenewInterval.String()}, c.Args...)
	r, err := Launch(id, c.Binary, dir, args...)
	if err != nil {
		return nil, err
	}
	r.probes = probes // Launch read the metrics address from the flags
	t.Cleanup(func() {
		if r.Running() {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.done:
			case <-time.After(15 * time.Second):
				_ = r.cmd.Process.Kill()
			}
		}
		if t.Failed() {
			r.DumpLog(t)
		}
	})
	return r, nil
}

// Start is TryStart failing the test on error; call it from the test's own goroutine.
func (c Config) Start(t testing.TB, id string) *Replica {
	t.Helper()
	r, err := c.TryStart(t, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Launch starts `bin args...` as replica id, its output in a new log file in
// dir, without a test to clean up after it (benchmarks; Config.Start wraps it).
func Launch(id, bin, dir string, args ...string) (*Replica, error) {
	r := &Replica{ID: id, done: make(chan struct{}),
		logPath: filepath.Join(dir, fmt.Sprintf("%s-%d.log", id, time.Now().UnixNano()))}
	logf, err := os.Create(r.logPath)
	if err != nil {
		return nil, err
	}
	for i, a := range args {
		if a == "--metrics-bind-address" && i+1 < len(args) && args[i+1] != "0" {
			r.metrics = args[i+1]
		}
	}
	r.cmd = exec.Command(bin, args...)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	go func() { r.exitErr = r.cmd.Wait(); logf.Close(); close(r.done) }()
	return r, nil
}

// Running reports whether the process has not exited yet.
func (r *Replica) Running() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// DumpLog prints the last 60 lines of the replica's log.
func (r *Replica) DumpLog(t testing.TB) {
	raw, _ := os.ReadFile(r.logPath)
	lines := strings.Split(string(raw), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	t.Logf("--- last lines of %s ---\n%s", r.ID, strings.Join(lines, "\n"))
}

// WaitReady polls /readyz until the replica has its membership snapshot.
func (r *Replica) WaitReady(ctx context.Context, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if !r.Running() {
			return false, fmt.Errorf("%s exited: %w", r, r.exitErr)
		}
		resp, err := http.Get("http://" + r.probes + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s never became ready: %w", r, err)
	}
	return nil
}

// Stop sends sig and waits up to 30s for the process to exit. It returns the
// process's exit error (nil for a clean exit), or an error when it did not exit.
// Safe to call from any goroutine.
func (r *Replica) Stop(sig syscall.Signal) error { return r.StopWithin(sig, 30*time.Second) }

// StopWithin is Stop with its own wait.
func (r *Replica) StopWithin(sig syscall.Signal, wait time.Duration) error {
	if err := r.cmd.Process.Signal(sig); err != nil && r.Running() {
		return fmt.Errorf("signal %s: %w", r, err)
	}
	select {
	case <-r.done:
		return r.exitErr
	case <-time.After(wait):
		return fmt.Errorf("%s did not exit within %s of %s", r, wait, sig)
	}
}

// Signal sends sig without waiting (SIGSTOP freezes the replica, SIGCONT
// thaws it).
func (r *Replica) Signal(sig syscall.Signal) error {
	if err := r.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s to %s: %w", sig, r, err)
	}
	return nil
}

// RSS is the process's resident set size in bytes (VmRSS).
func (r *Replica) RSS() (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for %s", r)
}

func (r *Replica) String() string { return fmt.Sprintf("replica %s (pid %d)", r.ID, r.cmd.Process.Pid) }
