// Package e2e runs the built binaries' end-to-end flows: `certhub-demo`
// (running `certhub run` replicas) from start to its table (a hub, two downstream clusters, replicas as
// processes, Certificates issued, a failover), and the same demo interrupted
// midway leaving nothing running. The demo starts its own control planes
// (KUBEBUILDER_ASSETS or the envtest cache), so there is no shared bed.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "certhub-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// certhub-demo runs the certhub binary beside it as the hub's replicas,
	// as `make demo` builds them into bin/.
	binary = filepath.Join(dir, "certhub-demo")
	for _, b := range []struct{ out, pkg string }{{filepath.Join(dir, "certhub"), "./cmd/certhub"}, {binary, "./cmd/certhub-demo"}} {
		build := exec.Command("go", "build", "-o", b.out, "github.com/certhub/certhub/"+strings.TrimPrefix(b.pkg, "./"))
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: building %s: %v\n%s", b.pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// `certhub-demo` (what `make demo` runs) issues every example Certificate in
// both clusters, survives the failover it stages, prints the table and the
// status, and exits 0. With --acme (`make demo-acme`) it also issues one
// Certificate per cluster from an ACME ClusterIssuer on Pebble + BIND.
func TestDemo(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
		acme int // Ready rows of ClusterIssuer/demo-acme, at least
	}{
		{name: "demo", args: nil,
			want: []string{"CLUSTER", "cluster-1", "cluster-2", "ClusterIssuer/demo-ca", "is now served by", "certhub status", "IssuancePolicy"}},
		{name: "demo --acme", args: []string{"--acme"},
			want: []string{"ClusterIssuer/demo-acme", "one ACME account, registered once", "is now served by"}, acme: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, binary, tc.args...).CombinedOutput()
			if err != nil {
				t.Fatalf("certhub-demo %s: %v\n%s", strings.Join(tc.args, " "), err, out)
			}
			text := string(out)
			for _, want := range tc.want {
				if !strings.Contains(text, want) {
					t.Errorf("the demo output lacks %q:\n%s", want, text)
				}
			}
			rows, denied, acme := checkDemoTables(t, text)
			if rows == 0 || denied == 0 {
				t.Errorf("the demo tables show %d Certificate rows, %d denied; want both > 0:\n%s", rows, denied, text)
			}
			if acme < tc.acme {
				t.Errorf("the first demo table shows %d Ready Certificates from ClusterIssuer/demo-acme, want %d:\n%s", acme, tc.acme, text)
			}
		})
	}
}

// checkDemoTables reads the demo's tables (rows CLUSTER OWNER NAMESPACE/NAME
// READY REASON ... ISSUER): every Certificate is Ready but shop/stolen,
// which the policy denies. It returns the rows, the denied ones, and the
// Ready ones from ClusterIssuer/demo-acme in the first table.
func checkDemoTables(t *testing.T, text string) (rows, denied, acme int) {
	t.Helper()
	tables := 0
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "CLUSTER" && strings.Contains(line, "CERTIFICATE") {
			tables++
		}
		if len(f) < 5 || !strings.HasPrefix(f[0], "cluster-") || !strings.Contains(f[2], "/") {
			continue
		}
		rows++
		switch {
		case f[2] == "shop/stolen":
			if f[3] != "False" || f[4] != "PolicyDenied" {
				t.Errorf("shop/stolen asks for another cluster's name and must be denied: %s", line)
			}
			denied++
		case f[3] != "True":
			t.Errorf("a Certificate in the demo table is not Ready: %s", line)
		case tables == 1 && f[len(f)-1] == "ClusterIssuer/demo-acme":
			acme++
		}
	}
	return rows, denied, acme
}

// childPIDs lists the descendants of pid.
func childPIDs(pid int) []int {
	parents := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var p int
		if _, err := fmt.Sscan(e.Name(), &p); err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut after the last ')'.
		fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
		if len(fields) < 2 {
			continue
		}
		var ppid int
		if _, err := fmt.Sscan(fields[1], &ppid); err != nil {
			continue
		}
		parents[ppid] = append(parents[ppid], p)
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range parents[p] {
			out = append(out, c)
			walk(c)
		}
	}
	walk(pid)
	return out
}

func alive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// `certhub-demo` interrupted with SIGINT midway stops its control planes and
// replicas and exits.
func TestDemoInterruptedLeavesNothingRunning(t *testing.T) {
	cmd := exec.Command(binary)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	seen := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := false
		for sc.Scan() {
			if !once && strings.Contains(sc.Text(), "hub replicas as processes") {
				once = true
				close(seen)
			}
		}
		done <- cmd.Wait()
	}()
	select {
	case <-seen:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("demo never started its replicas")
	}
	children := childPIDs(cmd.Process.Pid)
	if len(children) < 4 {
		t.Fatalf("expected control planes and replicas under the demo, found %d processes", len(children))
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Logf("demo exited after SIGINT: %v", err)
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("demo did not exit within a minute of SIGINT")
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for _, p := range children {
			if alive(p) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var left []int
		for _, p := range children {
			if alive(p) {
				left = append(left, p)
			}
		}
		t.Errorf("processes left behind after SIGINT: %v", left)
	}
}
