package shard

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Lease timings the replicas run with; the failover bound follows from them.
const (
	leaseDuration = 8 * time.Second
	renewDeadline = 5 * time.Second
	retryPeriod   = time.Second
	renewInterval = 2 * time.Second
)

// replica is one `certhub run` process.
type replica struct {
	id      string
	cmd     *exec.Cmd
	logPath string
	probes  string
	done    chan error
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startReplica(t *testing.T, id string) *replica {
	t.Helper()
	r := &replica{id: id, probes: freeAddr(t), done: make(chan error, 1)}
	// CERTHUB_TEST_LOGDIR keeps the replicas' logs after the test.
	dir := os.Getenv("CERTHUB_TEST_LOGDIR")
	if dir == "" {
		dir = t.TempDir()
	}
	r.logPath = filepath.Join(dir, fmt.Sprintf("%s-%d.log", id, time.Now().UnixNano()))
	logf, err := os.Create(r.logPath)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(certhubBinary, "run",
		"--kubeconfig", hubKubeconfig,
		"--namespace", bed.HubNamespace(), "--cluster-secret-namespace", bed.ArgoNamespace(),
		"--identity", id, "--metrics-bind-address", "0", "--health-probe-bind-address", r.probes,
		"--lease-duration", leaseDuration.String(), "--renew-deadline", renewDeadline.String(),
		"--retry-period", retryPeriod.String(), "--renew-interval", renewInterval.String())
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	go func() { r.done <- r.cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.done:
			case <-time.After(15 * time.Second):
				_ = r.cmd.Process.Kill()
			}
		}
		if t.Failed() {
			r.dumpLog(t)
		}
	})
	return r
}

func (r *replica) dumpLog(t *testing.T) {
	raw, _ := os.ReadFile(r.logPath)
	lines := strings.Split(string(raw), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	t.Logf("--- last lines of %s ---\n%s", r.id, strings.Join(lines, "\n"))
}

// waitReady polls /readyz until the replica has its membership snapshot.
func (r *replica) waitReady(t *testing.T) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + r.probes + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("replica %s never became ready: %v", r.id, err)
	}
}

// stop sends sig and waits for the process to exit, returning its error.
func (r *replica) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s: %v", r.id, err)
	}
	select {
	case err := <-r.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("replica %s did not exit within 30s of %s", r.id, sig)
		return nil
	}
}

func (r *replica) String() string { return fmt.Sprintf("replica %s (pid %d)", r.id, r.cmd.Process.Pid) }
