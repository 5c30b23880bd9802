package testbed

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// apiServerProcess is a kube-apiserver this package started again after
// StopAPIServer; envtest only knows the first one.
type apiServerProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// StopAPIServer stops cp's kube-apiserver (SIGTERM, SIGKILL after 20s) and
// leaves its etcd running: the cluster is unreachable and keeps its data.
// StartAPIServer brings it back. For chaos runs; not safe for concurrent use
// on one ControlPlane.
func (cp *ControlPlane) StopAPIServer() error {
	if cp.apiServer != nil {
		p := cp.apiServer
		cp.apiServer = nil
		return stopProcess(p.cmd.Process.Pid, p.done)
	}
	pid, args, err := cp.findAPIServer()
	if err != nil {
		return err
	}
	cp.apiServerArgs = args
	return stopProcess(pid, nil)
}

// StartAPIServer starts cp's kube-apiserver again with the flags it last ran
// with — the same port, serving certificate, client CA and service-account
// keys, so every client config and token handed out before keeps working —
// and waits until it reports healthy.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	if cp.apiServer != nil {
		return fmt.Errorf("kube-apiserver of %s is already running", cp.Name)
	}
	if len(cp.apiServerArgs) == 0 {
		return fmt.Errorf("kube-apiserver of %s was not stopped with StopAPIServer", cp.Name)
	}
	cmd := exec.Command(cp.apiServerArgs[0], cp.apiServerArgs[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("failed to restart kube-apiserver of %s: %w", cp.Name, err)
	}
	p := &apiServerProcess{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	cp.apiServer = p

	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // a health probe, as envtest's own
	}}
	url := strings.TrimRight(cp.Server(), "/") + "/healthz"
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-p.done:
			return false, fmt.Errorf("kube-apiserver of %s exited while starting", cp.Name)
		default:
		}
		resp, err := hc.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("restarted kube-apiserver of %s never became healthy: %w", cp.Name, err)
	}
	return nil
}

// stopRestarted stops an API server StartAPIServer started (Bed.Stop).
func (cp *ControlPlane) stopRestarted() error {
	if cp.apiServer == nil {
		return nil
	}
	p := cp.apiServer
	cp.apiServer = nil
	return stopProcess(p.cmd.Process.Pid, p.done)
}

// findAPIServer finds the kube-apiserver envtest started for cp by its
// --cert-dir, which is unique per control plane, and returns its pid and
// command line.
func (cp *ControlPlane) findAPIServer() (int, []string, error) {
	dir := cp.env.ControlPlane.APIServer.CertDir
	if dir == "" {
		return 0, nil, fmt.Errorf("control plane %s has no kube-apiserver cert dir", cp.Name)
	}
	want := "--cert-dir=" + dir
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, nil, err
	}
	for _, p := range procs {
		raw, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(raw, []byte(want)) {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if filepath.Base(args[0]) != "kube-apiserver" {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		return pid, args, nil
	}
	return 0, nil, fmt.Errorf("kube-apiserver of %s (%s) not found in /proc", cp.Name, want)
}

// stopProcess sends SIGTERM to pid and waits for it to go: on done when this
// package reaps it, else until the pid is gone (envtest reaps its own).
func stopProcess(pid int, done <-chan struct{}) error {
	gone := func() bool {
		if done != nil {
			select {
			case <-done:
				return true
			default:
				return false
			}
		}
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("failed to stop kube-apiserver (pid %d): %w", pid, err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return gone(), nil
	})
	if err == nil {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return gone(), nil
	})
}
