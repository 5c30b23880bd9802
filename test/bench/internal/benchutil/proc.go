package benchutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BuildCertHub builds the certhub binary into dir and returns its path.
func BuildCertHub(dir string) (string, error) {
	bin := filepath.Join(dir, "certhub")
	if b, err := exec.Command("go", "build", "-o", bin, "github.com/certhub/certhub/cmd/certhub").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, b)
	}
	return bin, nil
}

// Proc is one `certhub run` replica process.
type Proc struct {
	ID   string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartReplica starts `bin run --identity id args...`, logging to a file in dir.
func StartReplica(bin, dir, id string, args ...string) (*Proc, error) {
	lf, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.log", id, time.Now().UnixNano())))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"run", "--identity", id}, args...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	p := &Proc{ID: id, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); lf.Close(); close(p.done) }()
	return p, nil
}

// Stop sends sig and waits for the exit (SIGKILL after 60s).
func (p *Proc) Stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// RSS is the process's resident set size in bytes (VmRSS).
func (p *Proc) RSS() (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", p.cmd.Process.Pid)
}
